"""Whole output chunks into Zarr arrays as encoded bytes (issue 22): the store equals zarr's own writes.

Oracle: a second array made with the same arguments and written by zarr itself
(``array[...] = data``). The two stores are compared key by key and byte by
byte: the chunks skipped as empty are the same, edge chunks are padded alike,
every codec's bytes are zarr's (gzip's: but for the header's time stamp, see
``_no_mtime``). ``zarr.Array.__setitem__`` is made to count, so
that the tests also see which writes took the fast path.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
numcodecs = pytest.importorskip("numcodecs")

from zarr.storage import LocalStore, MemoryStore  # noqa: E402

from xarray_vhdf5.resplit import plan_resplit, resplit_into  # noqa: E402
from xarray_vhdf5.resplit._zarr_target import ZarrChunkWriter  # noqa: E402

SHAPE, IN_CHUNKS, OUT_CHUNKS = (23, 17, 9), (1, 17, 9), (8, 5, 4)  # edge chunks on every axis


def _compressors(fmt: int, codec: str):
    if codec == "none":
        return None
    if fmt == 2:
        return {
            "gzip": numcodecs.GZip(level=5),
            "zstd": numcodecs.Zstd(level=3),
            "blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
        }[codec]
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    return {
        "gzip": GzipCodec(level=5),
        "zstd": ZstdCodec(level=3),
        "blosc": BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
    }[codec]


def _values(dtype: str, fill) -> np.ndarray:
    """Random points with some output chunks (an inner one, an edge one) all fill value."""
    rng = np.random.default_rng(7)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        a = (rng.random(SHAPE) * 100).astype(dt)
    elif dt.kind == "b":
        a = rng.random(SHAPE) > 0.5
    else:
        a = rng.integers(0, 100, SHAPE).astype(dt)
    a[8:16, 5:10, 4:8] = fill  # an inner chunk
    a[16:, 15:, 8:] = fill  # the last (edge) chunk
    return a


def _reader(a: np.ndarray, chunks):
    def read_chunk(index):
        return a[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks, strict=True))]

    return read_chunk


@pytest.fixture
def setitem_calls(monkeypatch):
    """``zarr.Array.__setitem__`` calls (the fallback path) made while the test runs: (array path, key)."""
    calls = []
    original = zarr.Array.__setitem__

    def counting(self, key, value):
        calls.append((self.path, key))
        original(self, key, value)

    monkeypatch.setattr(zarr.Array, "__setitem__", counting)
    return calls


def _make(store, fmt: int, dtype: str, codec: str, fill, **kw):
    return zarr.create_array(
        store=store,
        shape=SHAPE,
        chunks=OUT_CHUNKS,
        dtype=dtype,
        zarr_format=fmt,
        compressors=_compressors(fmt, codec),
        fill_value=fill,
        **kw,
    )


def _no_mtime(value: bytes) -> bytes:
    """``value`` with a gzip member's MTIME (header bytes 4-7) zeroed.

    numcodecs' GZip, which zarr's gzip codec (format 3) and compressor (format 2)
    use, stamps each chunk with the current second: the one place where two
    writes of the same points legitimately differ, even two writes by zarr.
    """
    return value[:4] + bytes(4) + value[8:] if value[:3] == b"\x1f\x8b\x08" else value


def _store_bytes(array) -> dict[str, bytes]:
    d = array.store_path.store._store_dict
    return {k: _no_mtime(d[k].to_bytes()) for k in d}


def _resplit(target, a: np.ndarray, budget="4MB", threads=None):
    plan = plan_resplit(a.shape, IN_CHUNKS, OUT_CHUNKS, a.dtype.itemsize, budget)
    counters = resplit_into(plan, _reader(a, IN_CHUNKS), target, threads=threads)
    return plan, counters


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("codec", ["none", "gzip", "zstd", "blosc"])
@pytest.mark.parametrize("dtype", ["f4", "f8", "i2", "u1", "bool"])
def test_whole_chunks_stored_as_zarr_stores_them(fmt, codec, dtype, setitem_calls):
    fill = False if dtype == "bool" else 0
    a = _values(dtype, fill)
    ours, theirs = _make(MemoryStore(), fmt, dtype, codec, fill), _make(MemoryStore(), fmt, dtype, codec, fill)
    plan, counters = _resplit(ours, a, threads=2)
    assert plan.piece_writes == 0 and counters.chunk_writes == math.prod(-(-s // c) for s, c in zip(SHAPE, OUT_CHUNKS))
    assert setitem_calls == []  # every chunk took the fast path
    theirs[...] = a
    got, want = _store_bytes(ours), _store_bytes(theirs)
    assert sorted(got) == sorted(want)
    assert got == want
    empty = {ours.metadata.encode_chunk_key(c) for c in [(1, 1, 1), (2, 3, 2)]}
    assert not empty & set(got)  # the chunks all fill value are not stored
    np.testing.assert_array_equal(zarr.open_array(ours.store_path.store)[...], a)


@pytest.mark.parametrize("fmt", [2, 3])
def test_negative_zero_is_not_the_fill_value_and_nan_fill_chunks_are_skipped(fmt, setitem_calls):
    """zarr compares a zero fill by bit pattern (-0.0 is stored) and lets NaN equal a NaN fill."""
    for fill, special in ((0.0, -0.0), (np.nan, np.nan)):
        a = _values("f4", fill)
        a[:8, :5, :4] = special
        ours, theirs = _make(MemoryStore(), fmt, "f4", "gzip", fill), _make(MemoryStore(), fmt, "f4", "gzip", fill)
        _resplit(ours, a)
        assert setitem_calls == []
        theirs[...] = a
        setitem_calls.clear()
        assert _store_bytes(ours) == _store_bytes(theirs)
        key = ours.metadata.encode_chunk_key((0, 0, 0))
        assert (key in _store_bytes(ours)) == (fill == 0.0)


@pytest.mark.parametrize("fmt", [2, 3])
def test_write_empty_chunks_true_stores_every_chunk(fmt, setitem_calls):
    a = _values("i2", 0)
    cfg = {"write_empty_chunks": True}
    ours = _make(MemoryStore(), fmt, "i2", "zstd", 0, config=cfg)
    theirs = _make(MemoryStore(), fmt, "i2", "zstd", 0, config=cfg)
    _, counters = _resplit(ours, a, threads=1)
    assert setitem_calls == []
    theirs[...] = a
    got = _store_bytes(ours)
    assert got == _store_bytes(theirs)
    assert sum(not k.endswith((".json", ".zarray", ".zattrs")) for k in got) == counters.chunk_writes


def test_a_zarr2_null_fill_value_skips_chunks_of_the_dtypes_default():
    """Zarr 2 metadata may hold ``fill_value: null``: zarr pads and compares with the dtype's default (0)."""
    a = _values("f4", 0)
    ours, theirs = _make(MemoryStore(), 2, "f4", "none", None), _make(MemoryStore(), 2, "f4", "none", None)
    assert ours.metadata.fill_value is None
    _resplit(ours, a)
    theirs[...] = a
    assert _store_bytes(ours) == _store_bytes(theirs)


@pytest.mark.parametrize("fmt", [2, 3])
def test_pieces_of_spilled_chunks_go_through_zarr_and_the_store_is_the_same(fmt, setitem_calls):
    a = _values("f4", 0)
    ours, theirs = _make(MemoryStore(), fmt, "f4", "blosc", 0), _make(MemoryStore(), fmt, "f4", "blosc", 0)
    plan, counters = _resplit(ours, a, budget="4kB", threads=2)
    assert plan.piece_writes > 0 and counters.chunk_writes > 0  # both paths ran
    assert len(setitem_calls) == counters.piece_writes
    theirs[...] = a
    assert _store_bytes(ours) == _store_bytes(theirs)


@pytest.mark.parametrize(
    ("fmt", "kw"),
    [
        (2, {"chunk_key_encoding": {"name": "v2", "separator": "/"}}),
        (2, {}),
        (3, {"chunk_key_encoding": {"name": "v2", "separator": "."}}),
        (3, {}),
    ],
)
def test_local_store_files_equal_zarrs_under_each_chunk_key_encoding(tmp_path, fmt, kw, setitem_calls):
    a = _values("f8", 0)
    ours = zarr.open_group(LocalStore(tmp_path / "ours"), mode="w", zarr_format=fmt)
    theirs = zarr.open_group(LocalStore(tmp_path / "theirs"), mode="w", zarr_format=fmt)
    args = dict(shape=SHAPE, chunks=OUT_CHUNKS, dtype="f8", compressors=_compressors(fmt, "gzip"), fill_value=0)
    x = ours.create_array("x", **args, **kw)
    y = theirs.create_array("x", **args, **kw)
    assert ZarrChunkWriter.of(x, OUT_CHUNKS) is not None
    _resplit(x, a, threads=2)
    assert setitem_calls == []
    y[...] = a

    def files(root):
        return {p.relative_to(root).as_posix(): _no_mtime(p.read_bytes()) for p in root.rglob("*") if p.is_file()}

    got, want = files(tmp_path / "ours"), files(tmp_path / "theirs")
    assert sorted(got) == sorted(want) and got == want
    if fmt == 3 and not kw:
        empty, full = "x/c/1/1/1", "x/c/0/0/1"
    else:
        sep = kw.get("chunk_key_encoding", {}).get("separator", ".")
        empty, full = f"x/1{sep}1{sep}1", f"x/0{sep}0{sep}1"
    assert empty not in got and full in got  # the chunk all fill value is not stored


def test_what_the_fast_path_does_not_cover_falls_back_to_zarrs_writes(setitem_calls):
    a = _values("f4", 0)
    n_chunks = math.prod(-(-s // c) for s, c in zip(SHAPE, OUT_CHUNKS))
    sharded = zarr.create_array(MemoryStore(), shape=SHAPE, chunks=OUT_CHUNKS, shards=(16, 10, 8), dtype="f4")
    fortran = zarr.create_array(MemoryStore(), shape=SHAPE, chunks=OUT_CHUNKS, dtype="f4", zarr_format=2, order="F")
    other_chunks = zarr.create_array(MemoryStore(), shape=SHAPE, chunks=(4, 5, 4), dtype="f4")
    for target in (sharded, fortran, other_chunks):
        assert ZarrChunkWriter.of(target, OUT_CHUNKS) is None
    for target in (sharded, fortran):
        setitem_calls.clear()
        _resplit(target, a, threads=2)
        assert len(setitem_calls) == n_chunks
        np.testing.assert_array_equal(target[...], a)
    assert ZarrChunkWriter.of(np.zeros(SHAPE, "f4"), OUT_CHUNKS) is None


def test_a_zarr_array_under_a_group_path_gets_its_prefixed_keys():
    root = zarr.open_group(MemoryStore(), mode="w")
    arr = root.create_group("a").create_array("b", shape=(3, 4), chunks=(2, 2), dtype="u1")
    writer = ZarrChunkWriter.of(arr, (2, 2))
    assert writer is not None
    assert writer.key((1, 0)) == "a/b/c/1/0"
    for i, j in itertools.product(range(2), range(2)):
        data = np.full((2 if i == 0 else 1, 2), 10 * i + j + 1, "u1")
        assert writer.write((i, j), writer.prepare(data)) > 0
    np.testing.assert_array_equal(arr[...], [[1, 1, 2, 2], [1, 1, 2, 2], [11, 11, 12, 12]])


@pytest.mark.parametrize("fmt", [2, 3])
def test_export_zarr_reads_back_as_the_version(tmp_path, fmt, setitem_calls):
    xr = pytest.importorskip("xarray")
    from xarray_vhdf5.xr._export import export_zarr

    rng = np.random.default_rng(11)
    t, y, x = 30, 14, 11
    sst = rng.random((t, y, x)).astype("f4")
    sst[:10, :7] = np.nan  # whole output chunks of NaN: skipped when NaN is the fill value
    ds = xr.Dataset(
        {
            "sst": (("time", "y", "x"), sst, {"units": "K"}, {"_FillValue": np.float32(np.nan)}),
            "count": (("time", "y"), rng.integers(0, 5, (t, y)).astype("i4")),
        },
        coords={"time": np.arange(t), "y": np.linspace(0, 1, y)},
    )
    path = tmp_path / "v.h5"
    ds.vhdf5.commit("v1", path=path)
    store = tmp_path / "out.zarr"
    report = export_zarr(path, store, chunks={"time": 10, "y": 7, "x": -1}, max_mem="1MB", zarr_format=fmt)
    assert report.counters["sst"].chunk_writes == 3 * 2 and report.counters["sst"].piece_writes == 0
    # the streamed variables took the fast path (xarray writes the coordinates itself)
    assert {p for p, _ in setitem_calls} <= {"time", "y"}
    chunk_files = {p.relative_to(store / "sst").as_posix() for p in (store / "sst").rglob("*") if p.is_file()}
    first, last = ("c/0/0/0", "c/2/1/0") if fmt == 3 else ("0.0.0", "2.1.0")
    assert first not in chunk_files and last in chunk_files  # all NaN, the fill value: not stored
    got = xr.open_zarr(store, consolidated=fmt == 2)
    want = xr.open_dataset(path, engine="vhdf5", version="v1")
    xr.testing.assert_identical(got.load(), want.load())
    assert got.sst.encoding["chunks"] == (10, 7, 11)


@pytest.mark.parametrize("budget", ["4kB", "6kB", "8kB"])
def test_before_reuse_comes_before_any_handed_out_view_changes(budget):
    """The contract the threads' late copies rely on: views stay as handed out until ``before_reuse``."""
    from xarray_vhdf5.resplit import iter_resplit

    a = _values("f4", 0)
    plan = plan_resplit(a.shape, IN_CHUNKS, OUT_CHUNKS, 4, budget)
    held: list[tuple[np.ndarray, np.ndarray]] = []
    calls = []

    def before_reuse():
        calls.append(len(held))
        for view, snapshot in held:
            np.testing.assert_array_equal(view, snapshot)
        held.clear()

    for w in iter_resplit(plan, _reader(a, IN_CHUNKS), a.dtype, pieces=True, before_reuse=before_reuse):
        np.testing.assert_array_equal(w.data, a[w.region])
        held.append((w.data, w.data.copy()))
    before_reuse()
    assert len(calls) >= plan.n_buffers + 1


@pytest.mark.parametrize("budget", ["4kB", "6kB", "8kB"])
@pytest.mark.parametrize("threads", [2, 4])
def test_threads_copying_after_the_handout_store_what_zarr_stores(budget, threads, setitem_calls):
    """Several buffers, kept chunks assembled in the reused array, pieces: the store is zarr's."""
    a = _values("f4", 0)
    ours, theirs = _make(MemoryStore(), 3, "f4", "zstd", 0), _make(MemoryStore(), 3, "f4", "zstd", 0)
    plan, counters = _resplit(ours, a, budget=budget, threads=threads)
    assert plan.n_buffers > 1 and counters.chunk_writes > 0
    assert len(setitem_calls) == counters.piece_writes
    theirs[...] = a
    assert _store_bytes(ours) == _store_bytes(theirs)
