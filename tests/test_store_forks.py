"""``store.fork()`` / ``store.merge()``: writes from dask workers, committed by the client as one version.

The oracle is the single-process path: ``ds.to_zarr(store)`` + ``commit`` on
a writable store, whose chunks (every key's bytes, read back through a
read-only store) the fork path must reproduce exactly.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import pickle
from urllib.parse import quote

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import Buffer
from zarr.core.sync import _collect_aiterator, sync
from zarr.testing.store import StoreTests

from xarray_vhdf5.errors import ConflictError
from xarray_vhdf5.store import StoreFork, VersionStore

pytestmark = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata is currently not part:UserWarning",
)


def data(n_days: int = 8, seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    ds = xr.Dataset(
        {
            "sst": (("time", "y", "x"), rng.normal(20, 3, (n_days, 6, 5)).astype("float32"), {"units": "degC"}),
            "n": (("time",), np.arange(n_days, dtype="int32")),
        },
        coords={
            "time": np.datetime64("2000-01-01", "ns") + np.arange(n_days).astype("m8[D]"),
            "y": np.arange(6.0),
            "x": np.arange(5),
        },
        attrs={"title": "forks"},
    )
    ds["sst"].encoding["chunks"] = (2, 6, 5)
    ds["n"].encoding["chunks"] = (2,)
    return ds


def chunk_hashes(path, version=None) -> dict[str, str]:
    """SHA-256 of every key of a version, read through a read-only store (chunks decoded by the store)."""
    store = VersionStore(path, version)
    proto = default_buffer_prototype()
    keys = sync(_collect_aiterator(store.list()))
    out = {k: hashlib.sha256(sync(store.get(k, proto)).to_bytes()).hexdigest() for k in keys if "/c" in k}
    store.close()
    return out


def single_process(path, ds) -> str:
    store = VersionStore(path, read_only=False)
    ds.to_zarr(store, mode="w")
    return store.commit()


def test_fork_pickles_writes_and_merges(tmp_path):
    ds = data()
    single_process(tmp_path / "one.h5", ds)
    store = VersionStore(tmp_path / "two.h5", read_only=False)
    fork = pickle.loads(pickle.dumps(store.fork()))
    assert isinstance(fork, StoreFork)
    ds.chunk({"time": 2}).to_zarr(fork, mode="w")  # dask tasks, each through its copy of the fork
    assert not store.pending
    store.merge(fork)
    assert store.pending
    store.commit()
    assert not os.path.exists(f"{tmp_path / 'two.h5'}.forks")  # spools removed once committed
    with xr.open_dataset(tmp_path / "two.h5", engine="vhdf5") as got:
        xr.testing.assert_identical(got.load(), ds)
    assert chunk_hashes(tmp_path / "two.h5") == chunk_hashes(tmp_path / "one.h5")


def test_fork_sees_the_store_and_its_pending_writes(tmp_path):
    path = tmp_path / "f.h5"
    ds = data()
    single_process(path, ds)
    store = VersionStore(path, read_only=False)
    zarr.open_group(store, mode="a").attrs["title"] = "pending"  # not committed yet
    fork = store.fork()
    assert zarr.open_group(fork, mode="r").attrs["title"] == "pending"
    np.testing.assert_array_equal(zarr.open_array(fork, path="sst", mode="r")[...], ds.sst.values)
    patch = (ds[["sst"]].isel(time=slice(4, 6)) * 0 - 1).drop_vars(["time", "y", "x"])
    patch.chunk({"time": 2}).to_zarr(fork, region={"time": slice(4, 6)})
    store.merge(fork)
    store.commit()
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert got.attrs["title"] == "pending"
        assert (got.sst.isel(time=slice(4, 6)) == -1).all() and (got.sst.isel(time=0) == ds.sst.isel(time=0)).all()


def test_conflicting_forks_raise_and_merge_nothing(tmp_path):
    path = tmp_path / "c.h5"
    ds = data()
    single_process(path, ds)
    store = VersionStore(path, read_only=False)
    a, b, c = store.fork(), store.fork(), store.fork()
    arr_a, arr_b, arr_c = (zarr.open_array(f, path="sst", mode="r+") for f in (a, b, c))
    arr_a[0] = 1.0
    arr_b[0] = 2.0  # the same chunk, other bytes
    arr_c[0] = 1.0  # the same bytes as a: no conflict
    with pytest.raises(ConflictError, match="two forks wrote 'sst/c/0/0/0' with different bytes") as info:
        store.merge(a, b)
    assert info.value.keys == ["sst/c/0/0/0"] and not store.pending
    store.merge(a, c)
    zarr.open_array(store, path="sst", mode="r+")[0] = 3.0
    with pytest.raises(ConflictError, match="changed by the store after fork"):
        store.merge(b)
    with pytest.raises(ValueError, match="merged already"):
        store.merge(a)
    store.commit()
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert (got.sst.isel(time=0) == 3.0).all()


def test_large_new_arrays_stream_through_dask(tmp_path, monkeypatch):
    from xarray_vhdf5.store import _staged

    monkeypatch.setattr(_staged, "STREAM_BYTES", 0)  # every array committed as a dask array
    ds = data()
    single_process(tmp_path / "s.h5", ds)
    with xr.open_dataset(tmp_path / "s.h5", engine="vhdf5") as got:
        xr.testing.assert_identical(got.load(), ds)


def test_local_cluster_through_forks_commits_the_same_bytes(tmp_path):
    distributed = pytest.importorskip("distributed")
    ds = data(12)
    single_process(tmp_path / "one.h5", ds)
    store = VersionStore(tmp_path / "two.h5", read_only=False)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as client,
    ):
        fork = store.fork()
        ds.chunk({"time": 2}).to_zarr(fork, mode="w")
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids
        store.merge(fork)
        store.commit(message="from the cluster")
        with pytest.raises(Exception) as info:  # a writable store does not travel; distributed wraps the error
            client.submit(lambda s: s, store).result()
        chain, error = [], info.value
        while error is not None:
            chain.append(str(error))
            error = error.__cause__ or error.__context__
        assert any("store.fork()" in text for text in chain), chain
    assert chunk_hashes(tmp_path / "two.h5") == chunk_hashes(tmp_path / "one.h5")
    with xr.open_dataset(tmp_path / "two.h5", engine="vhdf5") as got:
        xr.testing.assert_identical(got.load(), ds)


# -- zarr's conformance kit on a fork ---------------------------------------------------------------
class TestStoreForkKit(StoreTests[StoreFork, Buffer]):
    """The kit on a fork of ``VersionStore(new path, read_only=False)``; it pickles, unlike its store."""

    store_cls = StoreFork
    buffer_cls = Buffer

    @pytest.fixture
    def store_kwargs(self, tmp_path) -> dict:
        fork = VersionStore(tmp_path / "kit.h5", read_only=False).fork()
        return {"path": fork.path, "version": fork.version, "group": fork.group, "spool": fork.spool}

    @pytest.fixture
    def store(self, open_kwargs) -> StoreFork:
        return sync(self.store_cls.open(**open_kwargs))

    @pytest.fixture
    def store_not_open(self, store_kwargs) -> StoreFork:
        return self.store_cls(**store_kwargs)

    async def set(self, store, key, value) -> None:  # behind the store's methods: into its spool
        with open(os.path.join(store.spool, "k", quote(key, safe="")), "wb") as f:
            f.write(value.to_bytes())

    async def get(self, store, key) -> Buffer:
        with open(os.path.join(store.spool, "k", quote(key, safe="")), "rb") as f:
            return self.buffer_cls.from_bytes(f.read())

    def test_store_repr(self, store) -> None:
        assert repr(store) == f"StoreFork({store.path!r}, version=None, spool={store.spool!r})"

    def test_store_supports_writes(self, store) -> None:
        assert store.supports_writes and store.supports_deletes

    def test_store_supports_listing(self, store) -> None:
        assert store.supports_listing

    def test_get_raises(self, store) -> None:
        sync(StoreTests.test_get_raises(self, store))


def _synced(fn):
    @functools.wraps(fn)
    def run(self, *args, **kwargs):
        return sync(fn(self, *args, **kwargs))

    return run


for _name, _fn in vars(StoreTests).items():
    if _name.startswith("test_") and inspect.iscoroutinefunction(_fn) and _name not in vars(TestStoreForkKit):
        setattr(TestStoreForkKit, _name, _synced(_fn))
del _name, _fn
