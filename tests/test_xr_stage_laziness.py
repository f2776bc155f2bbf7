"""Staging reads and writes only what an edit touches (issue 5, "Laziness measured").

The staged variable's base slab (its raw_data) is replaced by a wrapper that
counts the bytes read from it; the chunks written are counted by the version
log (``new_chunks``, ``new_bytes``). The 2 GB / peak-memory measurement is the
``slow`` test at the end, run in a subprocess so that its peak RSS is its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (registers the .vhdf5 accessor)
from xarray_vhdf5.xr._staged_array import RawRows

SHAPE = (64, 256, 256)
CHUNKS = (1, 256, 256)
CHUNK_BYTES = 256 * 256 * 4


class CountingSlab:
    """A read-only array-like over an h5py dataset, counting the bytes read."""

    def __init__(self, dset):
        self.dset = dset
        self.shape = tuple(dset.shape)
        self.dtype = dset.dtype
        self.bytes_read = 0

    def __getitem__(self, key):
        out = self.dset[key]
        self.bytes_read += np.asarray(out).nbytes
        return out


@pytest.fixture
def big(tmp_path):
    values = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    var = xr.Variable(("time", "y", "x"), values)
    var.encoding["chunks"] = CHUNKS
    path = tmp_path / "big.h5"
    xr.Dataset({"v": var}).vhdf5.commit("v1", path=path)
    return values, path


def _counted(staged):
    arr = staged["v"].data
    base = arr.staged.base_slabs[0]
    # read through the stage's own handle, which reopens after a commit closed it
    counter = CountingSlab(RawRows(arr.handle, arr.raw_path, base.shape, base.dtype))
    arr.staged = arr.staged.astype(arr.staged.dtype, base_slabs=[counter])
    return counter


def test_edit_and_read_touch_one_chunk(big):
    values, path = big
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        counter = _counted(staged)
        staged["v"].variable[10, :5, :5] = 1.0  # partial chunk: read once, then in memory
        assert counter.bytes_read == CHUNK_BYTES
        staged["v"].variable[11] = 2.0  # a whole chunk: nothing read
        assert counter.bytes_read == CHUNK_BYTES
        got = staged["v"][10:12, :8, :8].values  # both staged: nothing read
        assert counter.bytes_read == CHUNK_BYTES
        expected = values.copy()
        expected[10, :5, :5] = 1.0
        expected[11] = 2.0
        np.testing.assert_array_equal(got, expected[10:12, :8, :8])
        staged["v"][20, 0, 0].values  # an untouched chunk: one chunk's bytes at most
        assert counter.bytes_read <= 2 * CHUNK_BYTES


def test_dataarray_setitem_reads_the_selection_once(big):
    """``DataArray.__setitem__`` reads ``self[key]`` first (xarray checks coordinates): selection bytes only."""
    values, path = big
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        counter = _counted(staged)
        staged["v"][10, :5, :5] = 1.0
        assert counter.bytes_read == CHUNK_BYTES + 5 * 5 * 4  # the selection, then its chunk
        staged["v"].loc[{"time": 12}] = 3.0
        assert counter.bytes_read == 2 * CHUNK_BYTES + 5 * 5 * 4  # the selected chunk, read by xarray
        expected = values.copy()
        expected[10, :5, :5] = 1.0
        expected[12] = 3.0
        np.testing.assert_array_equal(staged["v"].values[10:13], expected[10:13])


def test_commit_writes_one_chunk_and_reads_none(big):
    values, path = big
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        staged["v"][10, :5, :5] = 1.0
        counter = _counted(staged)  # after the edit: counts what the commit reads
        name = staged.vhdf5.commit()
        assert counter.bytes_read == 0
    log = xr.open_dataset(path, engine="vhdf5").vhdf5.versions
    assert log.loc[name, "new_chunks"] == 1
    assert log.loc[name, "new_bytes"] == CHUNK_BYTES
    expected = values.copy()
    expected[10, :5, :5] = 1.0
    with xr.open_dataset(path, engine="vhdf5", version=name) as got:
        np.testing.assert_array_equal(got["v"].values, expected)


MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np, xarray as xr
    import xarray_vhdf5

    def rss():
        status = dict(line.split(":", 1) for line in open("/proc/self/status"))
        return int(status["VmRSS"].split()[0]) * 1024, int(status["VmHWM"].split()[0]) * 1024

    path = sys.argv[1]
    ds = xr.open_dataset(path, engine="vhdf5")
    baseline, _ = rss()
    start = time.perf_counter()
    staged = ds.vhdf5.stage()
    staged["v"][100, :10, :10] = 1.0
    name = staged.vhdf5.commit()
    elapsed = time.perf_counter() - start
    _, peak = rss()
    print(json.dumps({"baseline": baseline, "peak": peak, "seconds": elapsed, "version": name}))
    """
)


@pytest.mark.slow
def test_one_chunk_edit_of_a_2gb_variable_memory(tmp_path):
    """Stage + commit a one-chunk edit of a 2 GiB variable: peak RSS < 100 MB above baseline."""
    import json

    import dask.array as da

    shape, chunks = (512, 1024, 1024), (1, 1024, 1024)  # 2 GiB of float32, 4 MiB chunks
    data = da.random.default_rng(0).standard_normal(shape, chunks=(8, 1024, 1024), dtype="float32")
    var = xr.Variable(("time", "y", "x"), data)
    var.encoding["chunks"] = chunks
    path = tmp_path / "big2g.h5"
    xr.Dataset({"v": var}).vhdf5.commit("v1", path=path)
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    extra = result["peak"] - result["baseline"]
    print(
        f"2 GiB variable, one-chunk edit: stage+commit {result['seconds']:.2f} s, "
        f"peak RSS {extra / 1e6:.1f} MB above baseline"
    )
    assert extra < 100e6
    log = xr.open_dataset(path, engine="vhdf5").vhdf5.versions
    assert log.loc[result["version"], "new_chunks"] == 1
