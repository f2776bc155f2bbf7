"""A rechunk that writes its new raw_data once, after the end of the file (``in_place=False``, ``--grow``).

- (the manifest over raw_data's chunks where they are reads what libhdf5 reads:
  ``tests/test_sidecopy.py``);
- through a journaled handle, ``rechunk(in_place=False)`` makes no side copy,
  reads the old chunks through that manifest while the writes go behind, grows
  the file by about the new raw_data, and leaves every version's values
  (versioned-hdf5 2.6 reads them too); the old raw_data's bytes are free;
- ``ChunkWriter.writing_behind`` keeps the writes' order, raises a failed
  write, and waits for the batch in flight when the block is left by an error;
- the CLI's ``--grow`` and the accessor's ``in_place=False`` take that path.
"""

from __future__ import annotations

import os
import time

import h5py
import numpy as np
import pytest
import versioned_hdf5
import xarray as xr
from click.testing import CliRunner

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._backend.hashtable import HashTable
from xarray_vhdf5._backend.raw_data import ChunkWriter, Filters, create_raw_data
from xarray_vhdf5._versions import metadata, sidecopy
from xarray_vhdf5._versions.mutation import open_file
from xarray_vhdf5._versions.rechunk import rechunk
from xarray_vhdf5.cli._main import cli

FILTERS = [{}, {"compression": "gzip", "shuffle": True}]


def _versions(path: str, filters: dict) -> dict[str, np.ndarray]:
    """Three versions of x (24, 10, 14) float32 stored (2, 10, 14): appends and a QC fix."""
    data = np.random.default_rng(3).random((24, 10, 14)).astype("f4")
    values = {}
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=data[:16], chunks=(2, 10, 14), **filters)
        values["v0"] = data[:16].copy()
        with vf.stage_version("v1") as g:
            g["x"].resize((24, 10, 14))
            g["x"][16:] = data[16:]
            g["x"][3, :4, :4] = -2.0
        values["v1"] = vf["v1"]["x"][()]
    return values


def _spy(monkeypatch) -> dict[str, int]:
    """Count side copies, file manifests made, and blocks of writing behind."""
    seen = {"side_copy": 0, "file_manifest": 0, "behind": 0}

    class Side(sidecopy.SideCopy):
        def __init__(self, *args):
            seen["side_copy"] += 1
            super().__init__(*args)

    monkeypatch.setattr(metadata, "SideCopy", Side)
    made = sidecopy.file_manifest

    def manifest(*args):
        seen["file_manifest"] += 1
        return made(*args)

    monkeypatch.setattr(metadata, "file_manifest", manifest)
    behind = ChunkWriter.writing_behind

    def counted(self):
        seen["behind"] += 1
        return behind(self)

    monkeypatch.setattr(ChunkWriter, "writing_behind", counted)
    return seen


@pytest.mark.parametrize("filters", FILTERS)
def test_a_grown_rechunk_writes_once_after_the_end(tmp_path, monkeypatch, filters):
    p = str(tmp_path / "h.h5")
    values = _versions(p, filters)
    with h5py.File(p, "r") as f:
        old_raw = f["_version_data/x/raw_data"].id.get_storage_size()
    before = os.path.getsize(p)
    seen = _spy(monkeypatch)
    f = open_file(p)
    try:
        report = rechunk(VersionedHDF5File(f), "x", (8, 5, 7), max_mem="64kB", in_place=False)
    finally:
        f.close()
    assert seen == {"side_copy": 0, "file_manifest": 1, "behind": 1}
    assert not os.path.exists(p + ".vhdf5-modify")
    assert report.reads_per_input_chunk == 1.0
    with h5py.File(p, "r") as f:
        new_raw = f["_version_data/x/raw_data"].id.get_storage_size()
        ours, theirs = VersionedHDF5File(f), versioned_hdf5.VersionedHDF5File(f)
        for version, expected in values.items():
            assert ours[version]["x"].chunks == (8, 5, 7)
            np.testing.assert_array_equal(ours[version]["x"][()], expected)
            np.testing.assert_array_equal(theirs[version]["x"][()], expected)
    # the file grew by the new raw_data (its metadata aside), not by a copy of the old one too
    grown = os.path.getsize(p) - before
    assert new_raw <= grown < new_raw + old_raw

    # the same rechunk in place (the default) copies aside and keeps the size
    p2 = str(tmp_path / "h2.h5")
    _versions(p2, filters)
    before2 = os.path.getsize(p2)
    f = open_file(p2)
    try:
        rechunk(VersionedHDF5File(f), "x", (8, 5, 7), max_mem="64kB")
    finally:
        f.close()
    assert seen["side_copy"] == 1
    assert os.path.getsize(p2) < before2 + new_raw


def test_a_plain_handle_reads_through_the_file_manifest_too(tmp_path, monkeypatch):
    p = str(tmp_path / "h.h5")
    values = _versions(p, {})
    seen = _spy(monkeypatch)
    with h5py.File(p, "r+") as f:
        rechunk(VersionedHDF5File(f), "x", (3, 10, 14))
    assert seen == {"side_copy": 0, "file_manifest": 1, "behind": 1}
    with h5py.File(p, "r") as f:
        for version, expected in values.items():
            np.testing.assert_array_equal(VersionedHDF5File(f)[version]["x"][()], expected)


def _writer(tmp_path) -> tuple[h5py.File, ChunkWriter]:
    f = h5py.File(tmp_path / "w.h5", "w")
    group = f.create_group("x")
    raw = create_raw_data(group, np.dtype("i4"), (4,), 0, Filters())
    return f, ChunkWriter(raw, HashTable.create(group))


def test_writing_behind_keeps_the_order_and_the_rows(tmp_path):
    f, writer = _writer(tmp_path)
    writer.max_queued_bytes = 32  # a batch every 2 chunks: several in flight in turn
    chunks = [np.full(4, k + 1, "i4") for k in range(9)]
    with writer.writing_behind():
        rows = [writer.add((k,), c) for k, c in enumerate(chunks)]
        writer.flush()
    raw = writer.raw_data
    for (start, stop), chunk in zip(rows, chunks, strict=True):
        np.testing.assert_array_equal(raw[start:stop], chunk)
    assert writer.hash_table.dataset.attrs["largest_index"] == 9
    f.close()


def test_a_failed_write_behind_is_raised_and_nothing_runs_after_the_block(tmp_path, monkeypatch):
    f, writer = _writer(tmp_path)
    writer.max_queued_bytes = 16
    calls = []

    def failing(queue, next_row):
        calls.append([start for start, _ in queue])
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(writer, "_write_batch", failing)
    with pytest.raises(OSError, match="disk full"), writer.writing_behind():
        for k in range(6):
            writer.add((k,), np.full(4, k + 1, "i4"))
        writer.flush()
    assert calls == [[0]]  # the next batch waited for the first, and met its error
    f.close()


def test_leaving_the_block_by_an_error_waits_for_the_batch_in_flight(tmp_path, monkeypatch):
    f, writer = _writer(tmp_path)
    writer.max_queued_bytes = 16
    real = writer._write_batch
    finished = []

    def slow(queue, next_row):
        time.sleep(0.2)
        real(queue, next_row)
        finished.append([start for start, _ in queue])

    monkeypatch.setattr(writer, "_write_batch", slow)
    with pytest.raises(KeyError), writer.writing_behind():
        writer.add((0,), np.full(4, 1, "i4"))  # queued, then written behind
        raise KeyError("the caller fails while the write is in flight")
    assert finished == [[0]]  # done before the error left the block
    f.close()


def test_writing_behind_refuses_best_fit(tmp_path):
    f, writer = _writer(tmp_path)
    writer.best_fit = True
    with pytest.raises(ValueError, match="best_fit"), writer.writing_behind():
        pass
    f.close()


def test_cli_grow_and_the_accessor(tmp_path):
    p = str(tmp_path / "h.h5")
    values = _versions(p, {})
    before = os.path.getsize(p)
    run = CliRunner().invoke(cli, ["rechunk", p, "x", "--chunks", "6,10,14", "--grow"])
    assert run.exit_code == 0, run.output
    assert "(2, 10, 14) -> (6, 10, 14)" in run.output
    assert os.path.getsize(p) > before
    with h5py.File(p, "r") as f:
        for version, expected in values.items():
            assert VersionedHDF5File(f)[version]["x"].chunks == (6, 10, 14)
            np.testing.assert_array_equal(VersionedHDF5File(f)[version]["x"][()], expected)

    ds = xr.Dataset({"t": (("time", "lat"), np.arange(60, dtype="f4").reshape(20, 3))})
    q = str(tmp_path / "x.h5")
    ds.vhdf5.commit("a", path=q)
    opened = xr.open_dataset(q, engine="vhdf5")
    out = opened.vhdf5.rechunk({"time": 10}, in_place=False)
    assert out["t"].encoding["chunks"][0] == 10
    xr.testing.assert_identical(out.load(), ds)
