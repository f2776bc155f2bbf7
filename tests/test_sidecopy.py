"""The in-place rewrite's side copy made in the kernel (``_versions/sidecopy.py``).

- :meth:`OsIO.copy_range` copies byte for byte, by ``copy_file_range`` and, when
  the kernel refuses (another file system), through the process;
- the manifest over the side file reads every old chunk as libhdf5 reads it
  from the file (the two readers of a rechunk agree, filters included);
- an in-place rechunk takes that path (the side file is flat bytes, not HDF5),
  a dtype change keeps ``H5Ocopy``; both leave every version's values;
- the copy runs in a thread beside the rewrite: the rewrite reads only chunks
  already copied, no old chunk's bytes are overwritten before the whole copy
  is made, and a copy that fails rolls the rewrite back.
"""

from __future__ import annotations

import errno
import os
import threading
import time

import h5py
import numpy as np
import pytest

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._backend.transfer import kernel_backend
from xarray_vhdf5._versions import metadata, sidecopy
from xarray_vhdf5._versions.journal import SIDE_USERBLOCK, OsIO
from xarray_vhdf5._versions.metadata import modify_metadata
from xarray_vhdf5._versions.mutation import open_file
from xarray_vhdf5._versions.rechunk import raw_rows_reader, rechunk

FILTERS = [
    {},
    {"compression": "gzip", "shuffle": True},
    {"compression": "gzip", "shuffle": True, "fletcher32": True},
    {"compression": "lzf"},
]


def _file_of(tmp_path, n=4096 * 3 + 17) -> tuple[str, bytes]:
    p = str(tmp_path / "src.bin")
    data = np.random.default_rng(1).bytes(n)
    with open(p, "wb") as fh:
        fh.write(data)
    return p, data


@pytest.mark.parametrize("kernel", [True, False])
def test_copy_range_copies_byte_for_byte(tmp_path, monkeypatch, kernel):
    """Into the middle of the target, from the middle of the source; refused by the kernel: the same bytes."""
    if not kernel:

        def refuse(*args):
            raise OSError(errno.EXDEV, "cross-device")

        monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    p, data = _file_of(tmp_path)
    q = str(tmp_path / "dst.bin")
    io = OsIO()
    src, dst = io.open(p), io.open(q, create=True)
    try:
        io.copy_range(src, dst, 9000, 100, 512)
    finally:
        io.close(src)
        io.close(dst)
    with open(q, "rb") as fh:
        copied = fh.read()
    assert copied[:512] == b"\0" * 512 and copied[512:] == data[100:9100]


def test_copy_range_past_the_end_of_the_source_raises(tmp_path):
    p, _ = _file_of(tmp_path, 1000)
    io = OsIO()
    src, dst = io.open(p), io.open(str(tmp_path / "dst.bin"), create=True)
    try:
        with pytest.raises(OSError, match="ends 200 bytes into a copy of 500"):
            io.copy_range(src, dst, 500, 800, 0)
    finally:
        io.close(src)
        io.close(dst)


def _versions(path, filters, chunks=(3, 5, 4)) -> dict[str, np.ndarray]:
    """Three versions of ``x`` (an append, an edit, a chunk left unwritten) in ``chunks``."""
    rng = np.random.default_rng(7)
    data = rng.random((11, 9, 7)).astype("f4")
    values = {}
    f = open_file(path)
    try:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", shape=(8, 9, 7), dtype="f4", chunks=chunks, **filters)
            g["x"][:3] = data[:3]
            g["x"][6:8] = data[6:8]
        values["v0"] = vf["v0"]["x"][()]
        with vf.stage_version("v1") as g:
            g["x"].resize((11, 9, 7))
            g["x"][8:] = data[8:]
            g["x"][1, 2:6, 1:3] = -1.5
        values["v1"] = vf["v1"]["x"][()]
    finally:
        f.close()
    return values


@pytest.mark.parametrize("filters", FILTERS)
def test_the_side_manifest_reads_what_libhdf5_reads(tmp_path, filters):
    """Old chunks copied aside and read back without libhdf5 equal raw_rows_reader's libhdf5 reads."""
    p = str(tmp_path / "h.h5")
    _versions(p, filters)
    side = str(tmp_path / "side.bin")
    with h5py.File(p, "r") as f:
        raw = f["_version_data/x/raw_data"]
        found = sidecopy.side_manifest(raw, side, raw.dtype)
        assert found is not None
        manifest, plan = found
        io = OsIO()
        fd, side_fd = io.open(p), io.open(side, create=True)
        try:
            extents = sidecopy.copy_chunks_aside(io, fd, side_fd, plan)
        finally:
            io.close(fd)
            io.close(side_fd)
        assert extents[0][2] == SIDE_USERBLOCK and len(extents) == len(plan)
        with open(p, "rb") as a, open(side, "rb") as b:
            whole, copy = a.read(), b.read()
        assert all(whole[o : o + n] == copy[s : s + n] for o, n, s in extents)
        _reads_as_libhdf5_reads(f, raw, manifest)
        manifest.close()


@pytest.mark.parametrize("filters", FILTERS)
def test_the_file_manifest_reads_what_libhdf5_reads(tmp_path, filters):
    """raw_data's chunks read where they lie in the file (a rechunk that grows the file) read as libhdf5 reads them."""
    p = str(tmp_path / "h.h5")
    _versions(p, filters)
    with h5py.File(p, "r") as f:
        raw = f["_version_data/x/raw_data"]
        manifest = sidecopy.file_manifest(raw, p, raw.dtype)
        assert manifest is not None
        try:
            _reads_as_libhdf5_reads(f, raw, manifest)
        finally:
            manifest.close()
        assert sidecopy.file_manifest(raw, p, np.dtype("f8")) is None  # HDF5's conversion: read by libhdf5


def _reads_as_libhdf5_reads(f: h5py.File, raw: h5py.Dataset, manifest) -> None:
    """Every chunk of versions v0 and v1 of x reads the same through ``manifest`` and through libhdf5."""
    for version in ("v0", "v1"):
        vds = f[f"_version_data/versions/{version}/x"]
        chunks = tuple(int(c) for c in vds.attrs["chunks"])
        flat, starts = metadata.read_chunk_map(vds, chunks, raw.name)
        grid = tuple(-(-s // c) for s, c in zip(vds.shape, chunks))
        row_of = np.full(int(np.prod(grid)), -1, np.int64)
        row_of[flat] = starts
        ours = raw_rows_reader(manifest, vds.shape, chunks, row_of, raw.dtype, 0.0)
        theirs = raw_rows_reader(raw, vds.shape, chunks, row_of, raw.dtype, 0.0)
        assert hasattr(ours, "read_into") and not hasattr(theirs, "read_into")  # the two routes, compared
        for index in np.ndindex(*grid):
            np.testing.assert_array_equal(ours(index), theirs(index), err_msg=str(index))


def _spy(monkeypatch) -> list[str]:
    """Record which copy each in-place rewrite makes: 'kernel' or 'h5ocopy'."""
    made: list[str] = []

    class Kernel(sidecopy.SideCopy):
        def __init__(self, *args):
            made.append("kernel")
            super().__init__(*args)

    monkeypatch.setattr(metadata, "SideCopy", Kernel)
    same = metadata._same_chunks

    def h5ocopy(*args):
        made.append("h5ocopy")
        return same(*args)

    monkeypatch.setattr(metadata, "_same_chunks", h5ocopy)
    return made


@pytest.mark.parametrize("filters", FILTERS)
def test_an_in_place_rechunk_copies_aside_in_the_kernel(tmp_path, monkeypatch, filters):
    p = str(tmp_path / "h.h5")
    values = _versions(p, filters)
    made = _spy(monkeypatch)
    f = open_file(p)
    try:
        report = rechunk(VersionedHDF5File(f), "x", (4, 4, 7), max_mem="64kB")
    finally:
        f.close()
    assert made == ["kernel"]
    assert report.reads_per_input_chunk == 1.0
    with h5py.File(p, "r") as f:
        vf = VersionedHDF5File(f)
        for version, expected in values.items():
            assert vf[version]["x"].chunks == (4, 4, 7)
            np.testing.assert_array_equal(vf[version]["x"][()], expected)


def test_a_new_dtype_or_kept_chunks_copy_with_h5ocopy(tmp_path, monkeypatch):
    """HDF5's conversion (a new dtype) and the kept-chunks path read the copy through libhdf5."""
    p = str(tmp_path / "h.h5")
    values = _versions(p, {})
    made = _spy(monkeypatch)
    f = open_file(p)
    try:
        modify_metadata(VersionedHDF5File(f), "x", dtype=np.float64, chunks=(4, 4, 7))
        modify_metadata(VersionedHDF5File(f), "x", compression="gzip")
    finally:
        f.close()
    assert made == ["h5ocopy", "h5ocopy"]
    with h5py.File(p, "r") as f:
        vf = VersionedHDF5File(f)
        for version, expected in values.items():
            got = vf[version]["x"][()]
            assert got.dtype == np.float64
            np.testing.assert_array_equal(got, expected.astype(np.float64))


@pytest.mark.parametrize("backend", ["cython", "python"])
@pytest.mark.parametrize("filters", FILTERS)
def test_read_chunk_into_reads_unfiltered_chunks_in_place_only(tmp_path, filters, backend):
    """Unfiltered chunks land in the given array (whole, trimmed, or a strided view) as decoded_chunk reads
    them, with the compiled reader and its twin; filtered chunks and arrays larger than a chunk are refused."""
    p = str(tmp_path / "h.h5")
    _versions(p, filters)
    with h5py.File(p, "r") as f:
        raw = f["_version_data/x/raw_data"]
        found = sidecopy.side_manifest(raw, p, raw.dtype)
        assert found is not None
        copy_plan = found[1]
        # a manifest over the file itself: the side offsets are the file's
        stored = sidecopy._stored_chunks(raw)
        at = {int(r): (o, n, m) for r, o, n, m in stored.tolist()}
        rows = {int(r) for r in stored[:, 0]}
        assert len(copy_plan) == len(rows)
        grid = (raw.shape[0] // raw.chunks[0], 1, 1)
        starts = (np.arange(grid[0], dtype=np.int64) * raw.chunks[0]).reshape(grid)
        manifest = metadata_manifest(raw, starts, at)
        c0, c1, c2 = raw.chunks
        with kernel_backend(backend):
            for k in range(grid[0]):
                out = np.full(raw.chunks, -9.0, raw.dtype)
                done = manifest.read_chunk_into((k, 0, 0), out)
                expected = manifest.decoded_chunk((k, 0, 0))
                stored_as = at.get(k * c0)
                every = (1 << len(manifest.filters)) - 1  # mask bits: every filter skipped (lzf that cannot shrink)
                assert done == (stored_as is not None and (stored_as[2] & every) == every)
                np.testing.assert_array_equal(out, expected if done else np.full(raw.chunks, -9.0, raw.dtype))
                # a place in a larger buffer, trimmed as an edge chunk is: the chunk's first points
                buffer = np.full((c0 + 1, c1 + 2, c2 * 2), -9.0, raw.dtype)
                place = buffer[1:, 1 : c1 - 1, c2 : 2 * c2 - 1]
                assert manifest.read_chunk_into((k, 0, 0), place) == done
                if done:
                    np.testing.assert_array_equal(place, expected[:, : c1 - 2, : c2 - 1])
                assert (buffer[0] == -9.0).all() and (buffer[:, :1] == -9.0).all()  # nothing around it written
                strided = np.full((c0, c1, c2 * 2), -9.0, raw.dtype)[:, :, ::2]  # last axis not contiguous
                assert manifest.read_chunk_into((k, 0, 0), strided) == done
                np.testing.assert_array_equal(strided, expected if done else np.full(raw.chunks, -9.0, raw.dtype))
                assert not manifest.read_chunk_into((k, 0, 0), np.empty((c0 + 1, c1, c2), raw.dtype))
        manifest.close()


def metadata_manifest(raw, starts, at):
    from xarray_vhdf5._backend.manifest_resolve import manifest_from_starts

    def addresses(rows):
        return np.array([at.get(int(r), (0, 0, 0)) for r in rows.tolist()], np.uint64).reshape(-1, 3)

    fill = np.asarray(raw.fillvalue, raw.dtype)
    return manifest_from_starts(raw.name, raw, raw.shape, raw.chunks, raw.dtype, fill, starts, addresses=addresses)


def test_the_rechunk_reads_whole_unfiltered_chunks_into_its_buffer(tmp_path, monkeypatch):
    """The in-place rechunk of unfiltered chunks reads them with read_chunk_into, and values stay."""
    from xarray_vhdf5._backend.manifest import ChunkManifest

    p = str(tmp_path / "h.h5")
    values = _versions(p, {}, chunks=(1, 9, 7))  # whole planes: contiguous in the buffer
    calls = {True: 0, False: 0}
    into = ChunkManifest.read_chunk_into

    def counted(self, index, out):
        done = into(self, index, out)
        calls[done] += 1
        return done

    monkeypatch.setattr(ChunkManifest, "read_chunk_into", counted)
    f = open_file(p)
    try:
        report = rechunk(VersionedHDF5File(f), "x", (4, 3, 7), max_mem="64kB")
    finally:
        f.close()
    assert calls[True] > 0 and report.reads_per_input_chunk == 1.0
    with h5py.File(p, "r") as f:
        vf = VersionedHDF5File(f)
        for version, expected in values.items():
            np.testing.assert_array_equal(vf[version]["x"][()], expected)


class _SlowCopy(OsIO):
    """Kernel copies made slowly, one chunk at a time, and a log of what happened in which order.

    ``events`` holds ("copied", side stop), ("read", side stop) for reads of the
    side file by the rewrite, and ("overwrite", offset) for writes into the
    file below its size when the copy started (appended under the GIL, so in
    the order they happened).
    """

    def __init__(self, fail_at: int | None = None):
        self.events: list[tuple[str, int]] = []
        self.copies = 0
        self.fail_at = fail_at
        self.main_size: int | None = None
        self.main_fd: int | None = None
        self.copy_thread: str | None = None

    def copy_range(self, src, dst, length, src_offset, dst_offset):
        self.main_fd, self.main_size = src, self.main_size or self.size(src)
        self.copy_thread = threading.current_thread().name
        self.copies += 1
        if self.copies == self.fail_at:
            raise OSError(errno.EIO, "simulated read error in the side copy")
        time.sleep(0.002)  # slower than the rewrite's reads: they must wait at the gate
        super().copy_range(src, dst, length, src_offset, dst_offset)
        self.events.append(("copied", dst_offset + length))

    def pwrite(self, fd, data, offset):
        if fd == self.main_fd and self.main_size is not None and offset < self.main_size:
            self.events.append(("overwrite", offset))
        return super().pwrite(fd, data, offset)


def _log_side_reads(monkeypatch, io: _SlowCopy) -> None:
    from xarray_vhdf5._backend.manifest import ChunkManifest

    stored = ChunkManifest._stored_bytes

    def logged(self, slot):
        at, n = stored(self, slot)
        if self.gate is not None:
            io.events.append(("read", at + n))
        return at, n

    monkeypatch.setattr(ChunkManifest, "_stored_bytes", logged)


@pytest.mark.parametrize("filters", [{}, {"compression": "gzip", "shuffle": True}])
def test_the_side_copy_runs_beside_the_rewrite(tmp_path, monkeypatch, filters):
    """Reads start before the copy ends, each after its chunk is copied; overwrites after the whole copy."""
    p = str(tmp_path / "h.h5")
    values = _versions(p, filters, chunks=(1, 9, 7))
    with h5py.File(p, "r") as f:
        chunk_spans = [(o, o + n) for _, o, n, _ in sidecopy._stored_chunks(f["_version_data/x/raw_data"]).tolist()]
    io = _SlowCopy()
    _log_side_reads(monkeypatch, io)
    f = open_file(p, io=io)
    try:
        report = rechunk(VersionedHDF5File(f), "x", (4, 3, 7), max_mem="64kB")
    finally:
        f.close()
    assert report.reads_per_input_chunk == 1.0
    assert io.copy_thread == "vhdf5-side-copy"
    copied = [stop for kind, stop in io.events if kind == "copied"]
    assert len(copied) == io.copies > 2
    last_copy = max(i for i, (kind, _) in enumerate(io.events) if kind == "copied")
    reads = [(i, stop) for i, (kind, stop) in enumerate(io.events) if kind == "read"]
    assert reads and reads[0][0] < last_copy, "the rewrite waited for the whole copy before its first read"
    for i, stop in reads:  # every read after the copy of its bytes
        assert any(kind == "copied" and s >= stop for kind, s in io.events[:i]), (i, stop)
    overwrites = [i for i, (kind, _) in enumerate(io.events) if kind == "overwrite"]
    assert overwrites, "the new raw_data did not reuse the old one's bytes"
    # libhdf5's metadata writes may come earlier; none lands in an old chunk before the copy is whole
    for i in overwrites:
        if i < last_copy:
            offset = io.events[i][1]
            assert not any(s <= offset < e for s, e in chunk_spans), (i, offset)
    with h5py.File(p, "r") as f:
        vf = VersionedHDF5File(f)
        for version, expected in values.items():
            np.testing.assert_array_equal(vf[version]["x"][()], expected)
    assert not os.path.exists(p + "-journal") and not os.path.exists(p + ".vhdf5-modify")


def test_a_failed_side_copy_rolls_the_rewrite_back(tmp_path):
    p = str(tmp_path / "h.h5")
    values = _versions(p, {}, chunks=(1, 9, 7))
    with open(p, "rb") as fh:
        before = fh.read()
    io = _SlowCopy(fail_at=3)
    f = open_file(p, io=io)
    try:
        with pytest.raises(OSError, match="simulated read error in the side copy"):
            rechunk(VersionedHDF5File(f), "x", (4, 3, 7), max_mem="64kB")
    finally:
        f.close()
    with open(p, "rb") as fh:
        assert fh.read() == before
    with h5py.File(p, "r") as f:
        vf = VersionedHDF5File(f)
        assert vf["v1"]["x"].chunks == (1, 9, 7)
        for version, expected in values.items():
            np.testing.assert_array_equal(vf[version]["x"][()], expected)
    assert not os.path.exists(p + "-journal") and not os.path.exists(p + ".vhdf5-modify")
