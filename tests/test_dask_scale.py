"""Scaling with dask: reads on a 2-process cluster, streamed commits in bounded memory.

- a version read with ``chunks=`` reduces on a ``LocalCluster`` of 2 processes
  (arrays pickle through CachingFileManager; each worker opens the file);
- a dask-backed Dataset commits chunk by chunk: the "keep" plan computes each
  input block once, the file is the one the numpy path writes, chunks are cut
  and hashed on the workers, and a 1.5 GB commit stays within ~300 MB.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
import threading

import dask
import dask.array as da
import h5py
import numpy as np
import pytest
import xarray as xr

from xarray_vhdf5.xr._streaming import DaskChunkSource, cut_blocks, plan_buffers, show_progress


def _digests(path, name) -> set[bytes]:
    with h5py.File(path) as f:
        table = f[f"_version_data/{name}/hash_table"]
        n = int(table.attrs["largest_index"])
        return {bytes(row) for row in table[:n]["hash"]}


# -- the plan ------------------------------------------------------------------


def test_plan_aligned_when_chunks_nest():
    # dask blocks of 4 HDF5 chunks: every input edge is an output edge
    plan = plan_buffers(((40,) * 5, (100,)), (10, 50), (200, 100), 8, max_bytes=1 << 20)
    assert plan.modes == ("aligned", "aligned") and plan.kept_bytes == 0
    assert plan.edges[0] == (0, 40, 80, 120, 160, 200) and not plan.rereads


def test_plan_keeps_remainders_of_misaligned_chunks():
    # input 7 rows, output 10 rows: aligned every 70 rows would be a 70-row buffer
    in_chunks = ((7,) * 30 + (4,), (64,) * 4)
    plan = plan_buffers(in_chunks, (10, 64), (214, 256), 8, max_bytes=64 * 1024)
    assert plan.modes == ("keep", "aligned")
    assert plan.edges[0][:4] == (0, 7, 14, 21) and plan.kept_bytes > 0
    roomy = plan_buffers(in_chunks, (10, 64), (214, 256), 8, max_bytes=1 << 30)
    assert roomy.modes == ("aligned", "aligned") and roomy.edges[0][:3] == (0, 70, 140)


def test_plan_rereads_only_to_fit_the_budget():
    # narrow input blocks 7 deep, output chunks 10 deep: aligned buffers are 70 rows deep,
    # and keeping axis 0's remainders costs a whole plane of chunks. Output-aligned
    # 10-row buffers re-compute the blocks they cut, but fit the budget.
    in_chunks = ((7,) * 10, (64,) * 8, (64,) * 8)
    plan = plan_buffers(in_chunks, (10, 16, 16), (70, 512, 512), 4, max_bytes=1 << 20)
    assert plan.modes == ("reread", "aligned", "aligned") and plan.rereads
    assert plan.edges[0] == tuple(range(0, 71, 10))
    # rows 20:30 need the blocks of rows 14:35
    assert plan.input_bytes == 21 * 64 * 64 * 4 and plan.input_bytes + plan.buffer_bytes <= 1 << 20
    roomy = plan_buffers(in_chunks, (10, 16, 16), (70, 512, 512), 4, max_bytes=4 << 20)
    assert roomy.modes == ("aligned", "aligned", "aligned")


def test_plan_rejects_bad_input():
    with pytest.raises(ValueError, match="do not tile"):
        plan_buffers(((3, 3),), (2,), (7,), 8)
    with pytest.raises(ValueError, match="positive"):
        plan_buffers(((3, 4),), (0,), (7,), 8)


def test_cut_blocks_whole_chunks_and_remainders():
    x = np.arange(10 * 6, dtype="f8").reshape(10, 6)
    pieces = [x[0:4, 0:3], x[0:4, 3:6]]
    whole, rest = cut_blocks(pieces, [(0, 0), (0, 3)], (slice(0, 4), slice(0, 6)), (3, 2), x.shape, 0.0)
    assert [w[0] for w in whole] == [(0, 0), (0, 1), (0, 2)]
    np.testing.assert_array_equal(whole[1][1], x[0:3, 2:4])  # assembled across two pieces
    assert [(r[0], r[1]) for r in rest] == [
        ((1, 0), (slice(0, 1), slice(0, 2))),
        ((1, 1), (slice(0, 1), slice(0, 2))),
        ((1, 2), (slice(0, 1), slice(0, 2))),
    ]
    zeros = np.zeros((3, 2))
    assert cut_blocks([zeros], [(0, 0)], (slice(0, 3), slice(0, 2)), (3, 2), (3, 2), 0.0)[0] == [((0, 0), None, None)]


# -- streamed commits -----------------------------------------------------------


def _dataset(dask_chunks) -> xr.Dataset:
    rng = np.random.default_rng(5)
    values = rng.normal(size=(45, 33, 20)).astype("f4")
    values[:, :11] = np.nan  # whole chunks of fill value: not stored
    flag = rng.integers(0, 200, size=(45, 33)).astype("u1")
    ds = xr.Dataset(
        {
            "v": (("t", "y", "x"), values, {"units": "K"}),
            "packed": (("t", "y"), rng.normal(size=(45, 33))),
            "flag": (("t", "y"), flag),
        },
        coords={"t": np.arange(45.0)},
    )
    ds["v"].encoding.update({"chunks": (10, 11, 20), "_FillValue": np.float32(np.nan)})
    ds["packed"].encoding.update({"chunks": (4, 33), "dtype": "i2", "scale_factor": 0.01, "_FillValue": -9999})
    ds["flag"].encoding.update({"chunks": (9, 8), "zlib": True})
    if dask_chunks is None:
        return ds
    return ds.chunk(dask_chunks)


@pytest.mark.parametrize(
    "dask_chunks",
    [{"t": 7, "y": 13}, {"t": 10, "y": 11}, {"t": 45, "y": 33, "x": 20}, {"t": 4, "y": 7, "x": 6}],
    ids=["misaligned", "aligned", "one-block", "tiny-blocks"],
)
def test_streamed_commit_writes_what_the_numpy_path_writes(tmp_path, dask_chunks):
    lazy, eager = _dataset(dask_chunks), _dataset(None)
    a, b = tmp_path / "dask.h5", tmp_path / "numpy.h5"
    with dask.config.set(scheduler="threads"):
        lazy.vhdf5.commit("v1", path=a, max_bytes=16 * 1024)  # small batches: many of them
    eager.vhdf5.commit("v1", path=b)
    for name in ("v", "packed", "flag"):
        assert _digests(a, name) == _digests(b, name)
    with xr.open_dataset(a, engine="vhdf5") as got, xr.open_dataset(b, engine="vhdf5") as want:
        xr.testing.assert_identical(got, want)
        xr.testing.assert_identical(got.drop_vars("packed"), eager.drop_vars("packed"))
    with h5py.File(a) as f:
        assert f["_version_data/v/raw_data"].shape[0] == 5 * 2 * 10  # 2 of 3 y-chunks stored per t-chunk
        assert f["_version_data/flag/raw_data"].compression == "gzip"
    # recommitting the same data, eagerly, adds nothing (an empty version: allow_empty)
    eager.vhdf5.commit("v2", path=a, allow_empty=True)
    for name in ("v", "packed", "flag"):
        assert _digests(a, name) == _digests(b, name)


def test_keep_plan_computes_each_input_block_once(tmp_path):
    calls = collections.Counter()
    lock = threading.Lock()

    def generate(block_info=None):
        info = block_info[None]
        with lock:
            calls[tuple(info["chunk-location"])] += 1
        start = [lo for lo, _ in info["array-location"]]
        grid = np.indices(info["chunk-shape"], dtype="f8")
        return sum((g + s) * 10.0**k for k, (g, s) in enumerate(zip(grid, start)))

    x = da.map_blocks(generate, chunks=((7,) * 14 + (2,), (13, 13, 6)), dtype="f8")
    ds = xr.Dataset({"v": (("a", "b"), x)})
    ds["v"].encoding["chunks"] = (10, 8)
    source = DaskChunkSource(x, max_bytes=8 * 1024)
    with dask.config.set(scheduler="threads"):
        chunks = {index: chunk for index, chunk, _ in source.iter_hashed_chunks((10, 8), 0.0)}
        assert source.plan.modes == ("keep", "keep")
        assert set(calls.values()) == {1} and len(calls) == 15 * 3
        calls.clear()
        ds.vhdf5.commit("v1", path=tmp_path / "k.h5", max_bytes=8 * 1024)
        assert set(calls.values()) == {1}
        # the naive way, one compute per HDF5 chunk, computes blocks several times
        calls.clear()
        for i in range(0, 100, 10):
            x[i : i + 10, 0:8].compute()
        assert max(calls.values()) > 1
    with xr.open_dataset(tmp_path / "k.h5", engine="vhdf5") as got:
        np.testing.assert_array_equal(got["v"].values, x.compute())
    assert len(chunks) == 10 * 4 and chunks[(0, 0)] is not None


def test_commit_into_the_file_it_reads_from(tmp_path):
    # a version opened lazily (dask), changed and committed into the same file:
    # libhdf5 refuses a writer while this process holds the file read-only, so the
    # writer closes the engine's handles first; the lazy arrays reopen the file.
    path = tmp_path / "same.h5"
    _dataset(None).vhdf5.commit("v1", path=path)
    with xr.open_dataset(path, engine="vhdf5", chunks={}) as ds:
        changed = ds.copy()
        changed["v"] = ds["v"] + 1
        changed["v"].encoding = dict(ds["v"].encoding)
        changed.vhdf5.commit("v2", path=path)
        assert float(ds["v"][0, 20, 0]) == pytest.approx(float(changed["v"][0, 20, 0]) - 1)  # still readable
    with xr.open_dataset(path, engine="vhdf5", version="v1") as v1, xr.open_dataset(path, engine="vhdf5") as v2:
        xr.testing.assert_allclose(v2["v"], v1["v"] + 1)


def test_progress_bar_only_when_asked(tmp_path, capsys):
    assert show_progress(None) is False  # pytest captures stderr: not a terminal
    ds = _dataset({"t": 9})
    ds.vhdf5.commit("v1", path=tmp_path / "p.h5")
    assert "committing" not in capsys.readouterr().err
    ds.vhdf5.commit("v2", path=tmp_path / "p.h5", progress=True, allow_empty=True)
    assert "committing v" in capsys.readouterr().err


# -- a 2-process cluster ---------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def test_reduction_on_a_process_cluster(client, tmp_path):
    path = tmp_path / "c.h5"
    ds = _dataset(None)
    ds.vhdf5.commit("v1", path=path)
    ds2 = ds.copy(deep=True)
    ds2["v"][:, 20:] += 1.0
    ds2.vhdf5.commit("v2", path=path)
    with xr.open_dataset(path, engine="vhdf5", version="v1") as local:
        expected = local["v"].mean("t").values
    with xr.open_dataset(path, engine="vhdf5", version="v1", chunks={}) as lazy:
        mean = lazy["v"].mean("t")
        assert lazy["v"].chunks == ((10,) * 4 + (5,), (11,) * 3, (20,))
        got = client.compute(mean).result()  # computed by the 2 worker processes
    np.testing.assert_allclose(got.values, expected, rtol=1e-5, atol=1e-6)  # float32 sums in another order
    workers = client.run(lambda: os.getpid())
    assert len(set(workers.values())) == 2 and os.getpid() not in workers.values()


def test_commit_hashes_on_the_workers(client, tmp_path):
    distributed = pytest.importorskip("distributed")
    lazy, eager = _dataset({"t": 7, "y": 13}), _dataset(None)
    with distributed.get_task_stream(client) as stream:
        lazy.vhdf5.commit("v1", path=tmp_path / "d.h5", max_bytes=32 * 1024)
    cut = [t for t in stream.data if "cut_blocks" in str(t["key"])]
    assert len(cut) > 3 and {t["worker"] for t in cut} <= set(client.scheduler_info()["workers"])
    eager.vhdf5.commit("v1", path=tmp_path / "e.h5")
    for name in ("v", "packed", "flag"):
        assert _digests(tmp_path / "d.h5", name) == _digests(tmp_path / "e.h5", name)
    with (
        xr.open_dataset(tmp_path / "d.h5", engine="vhdf5") as got,
        xr.open_dataset(tmp_path / "e.h5", engine="vhdf5") as want,
    ):
        xr.testing.assert_identical(got, want)


# -- bounded memory --------------------------------------------------------------

_MEMORY_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import dask, dask.array as da, xarray as xr
    import xarray_vhdf5  # noqa: F401

    def status(key):
        with open("/proc/self/status") as fh:
            return next(int(l.split()[1]) * 1024 for l in fh if l.startswith(key))

    shape = tuple(int(s) for s in sys.argv[2].split(","))
    x = da.random.default_rng(42).random(shape, dtype="f4", chunks=(15, 250, shape[2]))
    ds = xr.Dataset({"v": (("t", "y", "x"), x)})
    ds["v"].encoding["chunks"] = (4, 250, 250)   # 15 vs 4 rows: the "keep" plan
    base = status("VmRSS")
    with dask.config.set(scheduler="threads"):
        start = time.perf_counter()
        ds.vhdf5.commit("v1", path=sys.argv[1])
        seconds = time.perf_counter() - start
    print(x.nbytes, status("VmHWM") - base, seconds)
    """
)


def _commit_in_subprocess(tmp_path, shape) -> tuple[int, int, float]:
    script = tmp_path / "commit_big.py"
    script.write_text(_MEMORY_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "big.h5"), ",".join(map(str, shape))],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    nbytes, growth, seconds = out.stdout.split()
    return int(nbytes), int(growth), float(seconds)


@pytest.mark.parametrize(
    "shape",
    [pytest.param((100, 1000, 1000), marks=pytest.mark.slow), pytest.param((375, 1000, 1000), marks=pytest.mark.slow)],
    ids=["0.4GB", "1.5GB"],
)
def test_streamed_commit_memory_is_bounded(tmp_path, shape):
    """Committing a dask variable larger than the bound: 0.4 GB (held whole it would grow the
    process by more than the bound) and 1.5 GB, both in the slow run (a memory harness: 9-13 s
    of the suite's 5 minutes on 2 cores)."""
    nbytes, growth, _seconds = _commit_in_subprocess(tmp_path, shape)
    assert nbytes == 4 * int(np.prod(shape)) and nbytes > 1.2 * 300 * 1024 * 1024
    # peak RSS growth over the process's RSS before the commit (VmHWM - VmRSS)
    assert growth < 300 * 1024 * 1024, f"peak RSS grew {growth / 2**20:.0f} MiB committing {nbytes / 1e9:.1f} GB"
    with h5py.File(tmp_path / "big.h5") as f:
        # every chunk once: ceil(t / 4) x 4 x 4 chunks of 4 rows
        assert f["_version_data/v/raw_data"].shape[0] == -(-shape[0] // 4) * 4 * 4 * 4
