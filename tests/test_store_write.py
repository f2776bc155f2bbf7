"""The writable :class:`~xarray_vhdf5.store.VersionStore`: ``to_zarr`` into a version, then ``commit``.

Oracle: the same ``to_zarr`` calls on a zarr ``MemoryStore``; after each
commit, ``xr.open_dataset(path, engine="vhdf5")`` and ``xr.open_zarr`` of the
store must equal ``xr.open_zarr(memory)`` (xarray's own zarr semantics, e.g.
an append replacing the group's attributes). Chunk addresses from the
version's :class:`~xarray_vhdf5._backend.manifest.ChunkManifest` show which
chunks a commit wrote. zarr's conformance kit runs on the writable mode.

The kit's tests are coroutines for pytest-asyncio, which this project does not
use: each is run through zarr's ``zarr.core.sync.sync``.
"""

from __future__ import annotations

import functools
import inspect
import os
import pickle
from urllib.parse import quote

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.core.buffer.cpu import Buffer
from zarr.core.sync import sync
from zarr.testing.store import StoreTests

import xarray_vhdf5
from xarray_vhdf5._versions import VersionedHDF5File
from xarray_vhdf5.errors import NothingToCommitError, ReadOnlyError, StaleVersionError
from xarray_vhdf5.store import VersionStore

DATA = os.path.join(os.path.dirname(xarray_vhdf5.__file__), "data", "coads_sst_airt.nc")

pytestmark = pytest.mark.filterwarnings(
    # zarr notes that consolidated metadata (which xarray writes) is not in the v3 spec
    "ignore:Consolidated metadata is currently not part:UserWarning",
)


def small(n_days: int = 6, start: int = 0, seed: int = 0) -> xr.Dataset:
    """Daily (time, y, x) float32 with NaNs, an int16 variable with a _FillValue, a 1-d coordinate."""
    rng = np.random.default_rng(seed)
    sst = rng.normal(20, 3, (n_days, 5, 4)).astype("float32")
    sst[0, 0, 0] = np.nan
    ds = xr.Dataset(
        {
            "sst": (("time", "y", "x"), sst, {"units": "degC", "scale": np.float32(0.5)}),
            "count": (("time", "y"), rng.integers(0, 9, (n_days, 5)).astype("int16")),
        },
        coords={
            "time": np.datetime64("2000-01-01", "ns") + np.arange(start, start + n_days).astype("m8[D]"),
            "y": np.linspace(0, 1, 5),
            "x": np.arange(4, dtype="int32"),
        },
        attrs={"title": "small", "version": 1},
    )
    ds["count"].encoding["_FillValue"] = np.int16(-1)
    for name in ("sst", "count"):
        ds[name].encoding["chunks"] = (2, *ds[name].shape[1:])
    return ds


def writable(path, **kw) -> VersionStore:
    return VersionStore(path, read_only=False, **kw)


def vhdf5(path, version=None, **kw) -> xr.Dataset:
    with xr.open_dataset(path, engine="vhdf5", version=version, **kw) as ds:
        return ds.load()


def oracle(memory, **kw) -> xr.Dataset:
    with xr.open_zarr(memory, **kw) as ds:
        return ds.load()


def chunk_offsets(path, version, name) -> dict[tuple[int, ...], int]:
    """Chunk index -> file offset of its stored chunk, from the version's manifest."""
    with VersionedHDF5File.open(path) as reader:
        m = reader[version][name].manifest
        return {idx: int(m.offsets[m.slots[idx]]) for idx in np.ndindex(*m.slots.shape) if m.slots[idx] >= 0}


# -- round trips ------------------------------------------------------------------------------
def test_mode_w_fresh_path_round_trip(tmp_path):
    path = tmp_path / "new.h5"
    ds = small()
    memory = zarr.storage.MemoryStore()
    ds.to_zarr(memory, mode="w")
    store = writable(path)
    ds.to_zarr(store, mode="w")
    assert not path.exists()  # nothing reaches the file before commit
    xr.testing.assert_identical(oracle(store), ds)  # zarr's mode="r" reads a view of the pending writes
    name = store.commit(message="first")
    got = vhdf5(path)
    xr.testing.assert_identical(got, ds)
    xr.testing.assert_identical(got, oracle(memory))
    xr.testing.assert_identical(oracle(VersionStore(path)), ds)
    with VersionedHDF5File.open(path) as reader:
        assert reader.current_version == name
        assert reader[name]["sst"].chunks == (2, 5, 4)  # zarr's chunk grid is the HDF5 one
    assert not store.pending and store.version == name


def test_coads_round_trip_and_versioned_hdf5(tmp_path):
    versioned_hdf5 = pytest.importorskip("versioned_hdf5")
    import h5py

    with xr.open_dataset(DATA, decode_times=False) as src:
        ds = src.load()
    for name in ds.variables:
        ds[name].encoding.pop("chunksizes", None)
        ds[name].encoding.pop("zlib", None)
    path = tmp_path / "coads.h5"
    memory = zarr.storage.MemoryStore()
    ds.to_zarr(memory, mode="w")
    store = writable(path)
    ds.to_zarr(store, mode="w")
    name = store.commit()
    expected = oracle(memory, decode_times=False)
    xr.testing.assert_identical(vhdf5(path, decode_times=False), expected)
    xr.testing.assert_identical(oracle(VersionStore(path), decode_times=False), expected)
    with h5py.File(path, "r") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        np.testing.assert_array_equal(vf[name]["SST"][()], np.asarray(memory_array(memory, "SST")))


def test_coads_monthly_appends_along_TIME(tmp_path):
    with xr.open_dataset(DATA, decode_times=False) as src:
        ds = src.load()
    # xarray's to_zarr(mode="a") decodes the stored TIME to encode the new labels alike;
    # the file's year 0 ("hour since 0000-01-01") decodes in no calendar it can use: moved to 1900
    ds["TIME"].attrs["units"] = "hours since 1900-01-01 00:00:00"
    for name in ds.variables:
        ds[name].encoding = {k: v for k, v in ds[name].encoding.items() if k in ("dtype", "_FillValue")}
        if ds[name].dims[:1] == ("TIME",):
            ds[name].encoding["chunks"] = (2, *ds[name].shape[1:])
    path = tmp_path / "coads_daily.h5"
    memory = zarr.storage.MemoryStore()
    store = writable(path)
    for target in (memory, store):
        ds.isel(TIME=slice(0, 9)).to_zarr(target, mode="w")
    versions = [store.commit()]
    for month in range(9, 12):
        before = chunk_offsets(path, versions[-1], "SST")
        for target in (memory, store):
            ds.isel(TIME=slice(month, month + 1)).to_zarr(target, mode="a", append_dim="TIME")
        versions.append(store.commit(message=f"month {month}"))
        after = chunk_offsets(path, versions[-1], "SST")
        touched = month // 2  # the chunk along TIME the new month falls into
        assert {i: o for i, o in after.items() if i[0] != touched} == {
            i: o for i, o in before.items() if i[0] != touched
        }  # every other chunk: same bytes, not rewritten
        xr.testing.assert_identical(vhdf5(path, decode_times=False), oracle(memory, decode_times=False))
    xr.testing.assert_identical(vhdf5(path, decode_times=False), ds)


def memory_array(memory, name):
    return zarr.open_array(memory, path=name, mode="r")[...]


# -- appends, regions, attributes: only written chunks change ----------------------------------
def test_daily_appends_write_only_new_chunks(tmp_path):
    pytest.importorskip("versioned_hdf5")
    import h5py
    import versioned_hdf5

    path = tmp_path / "daily.h5"
    memory = zarr.storage.MemoryStore()
    first = small(4)
    store = writable(path)
    for target in (memory, store):
        first.to_zarr(target, mode="w")
    versions = [store.commit()]
    for day in range(3):  # one day each: the last chunk along time is partly filled, then completed
        more = small(1, start=4 + day, seed=day + 1)
        before = chunk_offsets(path, versions[-1], "sst")
        for target in (memory, store):
            more.to_zarr(target, mode="a", append_dim="time")
        versions.append(store.commit(message=f"day {day}"))
        xr.testing.assert_identical(vhdf5(path), oracle(memory))
        after = chunk_offsets(path, versions[-1], "sst")
        last = (4 + day) // 2  # the chunk along time the new day fell into
        assert {i: o for i, o in after.items() if i[0] != last} == {i: o for i, o in before.items() if i[0] != last}
        assert after[(last, 0, 0)] != before.get((last, 0, 0))
    xr.testing.assert_identical(oracle(store.with_read_only(True)), oracle(memory))
    with h5py.File(path, "r") as f:  # versioned-hdf5 2.6 reads every version
        vf = versioned_hdf5.VersionedHDF5File(f)
        for i, name in enumerate(versions):
            assert vf[name]["sst"].shape == (4 + i, 5, 4)
        np.testing.assert_array_equal(vf[versions[-1]]["sst"][()], memory_array(memory, "sst"))


def test_region_write_changes_one_chunk(tmp_path):
    path = tmp_path / "region.h5"
    memory = zarr.storage.MemoryStore()
    ds = small(6)
    store = writable(path)
    for target in (memory, store):
        ds.to_zarr(target, mode="w")
    v1 = store.commit()
    patch = (ds[["sst"]].isel(time=slice(2, 4)) + 100).drop_vars(["y", "x", "time"])
    for target in (memory, store):
        patch.to_zarr(target, region={"time": slice(2, 4)})
    assert sorted(k for k in store._session.overlay.written if "/c/" in k) == ["sst/c/1/0/0"]
    v2 = store.commit()
    xr.testing.assert_identical(vhdf5(path), oracle(memory))
    before, after = chunk_offsets(path, v1, "sst"), chunk_offsets(path, v2, "sst")
    assert [i for i in before if before[i] != after[i]] == [(1, 0, 0)]
    assert chunk_offsets(path, v1, "count") == chunk_offsets(path, v2, "count")
    xr.testing.assert_identical(vhdf5(path, v1), ds)  # the parent is unchanged


def test_partial_chunk_read_modify_write(tmp_path):
    """zarr reads back a chunk it wrote to complete it: the store returns the bytes it was given."""
    path = tmp_path / "rmw.h5"
    ds = small(6)
    store = writable(path)
    ds.to_zarr(store, mode="w")
    store.commit()
    arr = zarr.open_array(store, path="sst", mode="r+")
    arr[3, 1, 1] = -5.0  # a base chunk: read from the file, written to the overlay
    arr[3, 2, 2] = -6.0  # the same chunk again: read from the overlay
    store.commit()
    expected = ds.sst.values.copy()
    expected[3, 1, 1], expected[3, 2, 2] = -5.0, -6.0
    np.testing.assert_array_equal(vhdf5(path).sst.values, expected)


def test_attribute_edits_keep_other_attributes_as_stored(tmp_path):
    path = tmp_path / "attrs.h5"
    ds = small()
    store = writable(path)
    ds.to_zarr(store, mode="w")
    v1 = store.commit()
    group = zarr.open_group(store, mode="a")
    group.attrs["title"] = "renamed"
    group["sst"].attrs["long_name"] = "sea surface temperature"
    v2 = store.commit(message="attrs")
    got = vhdf5(path)
    assert got.attrs["title"] == "renamed" and got.attrs["version"] == 1
    assert got.sst.attrs["long_name"] == "sea surface temperature"
    assert got.sst.attrs["units"] == "degC"
    assert chunk_offsets(path, v1, "sst") == chunk_offsets(path, v2, "sst")
    with VersionedHDF5File.open(path) as reader:
        a1, a2 = reader[v1]["sst"].attrs, reader[v2]["sst"].attrs
        assert a2["scale"] == a1["scale"] and a2["scale"].dtype == a1["scale"].dtype  # not re-read from JSON


def test_new_and_deleted_variables(tmp_path):
    path = tmp_path / "vars.h5"
    ds = small()
    store = writable(path)
    ds.to_zarr(store, mode="w")
    store.commit()
    extra = xr.Dataset({"flag": (("time",), np.arange(6, dtype="uint8"))}, coords={"time": ds.time})
    extra.to_zarr(store, mode="a")
    zarr.open_group(store, mode="a").__delitem__("count")
    store.commit()
    got = vhdf5(path)
    assert "count" not in got and got.flag.values.tolist() == list(range(6))
    xr.testing.assert_identical(got.sst, ds.sst)


def test_mode_w_over_a_version_replaces_it(tmp_path):
    path = tmp_path / "replace.h5"
    store = writable(path)
    small().to_zarr(store, mode="w")
    v1 = store.commit()
    other = small(3, seed=7).drop_vars("count")
    other.to_zarr(store, mode="w")
    v2 = store.commit()
    xr.testing.assert_identical(vhdf5(path), other)
    xr.testing.assert_identical(vhdf5(path, v1), small())
    assert v2 != v1


def test_a_group_of_the_version(tmp_path):
    path = tmp_path / "groups.h5"
    root = writable(path)
    small().to_zarr(root, mode="w")
    root.commit()
    sub = writable(path, group="g/h")  # a group the version lacks: an overlay over nothing
    small(4, seed=5).to_zarr(sub, mode="w")
    sub.commit()
    small(1, start=4, seed=6).to_zarr(sub, mode="a", append_dim="time")
    sub.commit()
    expected = xr.concat(
        [small(4, seed=5), small(1, start=4, seed=6)],
        "time",
        data_vars="minimal",
        coords="minimal",
        compat="override",
        join="outer",
    )
    xr.testing.assert_identical(vhdf5(path, group="g/h"), expected.assign_attrs(small(1).attrs))
    xr.testing.assert_identical(vhdf5(path), small())  # the root group is carried


def test_writes_past_the_memory_budget_spill_to_files(tmp_path, monkeypatch):
    from xarray_vhdf5.store import _overlay

    monkeypatch.setattr(_overlay, "MEMORY_BUDGET", 2000)  # bytes: a few chunks, then files
    path = tmp_path / "spill.h5"
    ds = small(12)
    store = writable(path)
    ds.to_zarr(store, mode="w")
    overlay = store._session.overlay
    spilled = [k for k, v in overlay.written.items() if isinstance(v, _overlay.Spooled)]
    assert spilled and overlay.nbytes <= 2000
    assert sorted(os.listdir(overlay.spill_dir)) == sorted(quote(k, safe="") for k in spilled)
    xr.testing.assert_identical(oracle(store), ds)  # read back from the files
    zarr.open_array(store, path="sst", mode="r+")[5] = 0.5  # a spilled chunk rewritten
    store.commit()
    expected = ds.copy(deep=True)
    expected["sst"][5] = 0.5
    xr.testing.assert_identical(vhdf5(path), expected)
    assert not os.path.exists(f"{path}.forks")  # removed by the commit


# -- the version it commits onto ---------------------------------------------------------------
def test_stale_parent_raises_and_keeps_writes(tmp_path):
    path = tmp_path / "stale.h5"
    ds = small()
    first = writable(path)
    ds.to_zarr(first, mode="w")
    first.commit()
    mine, theirs = writable(path), writable(path)
    (ds[["sst"]] + 1).to_zarr(mine, mode="a")
    (ds[["sst"]] + 2).to_zarr(theirs, mode="a")
    theirs.commit()
    with pytest.raises(StaleVersionError, match="current version is now"):
        mine.commit()
    assert mine.pending
    # ds.vhdf5.commit raises the same error in the same situation
    with xr.open_dataset(path, engine="vhdf5") as opened:
        staged = opened.vhdf5.stage()
        again = writable(path)
        (ds[["sst"]] + 3).to_zarr(again, mode="a")
        again.commit()
        staged["sst"][0, 0, 0] = 1.0
        with pytest.raises(StaleVersionError, match="current version is now"):
            staged.vhdf5.commit()
        staged.close()
    name = mine.commit(force=True)  # a branch from the base
    with VersionedHDF5File.open(path) as reader:
        assert reader.current_version == name


def test_stale_when_a_first_version_appears(tmp_path):
    path = tmp_path / "race.h5"
    mine = writable(path)
    sync(mine._open())
    small().to_zarr(mine, mode="w")
    other = writable(path)
    small(seed=3).to_zarr(other, mode="w")
    other.commit()
    with pytest.raises(StaleVersionError, match="file without versions"):
        mine.commit()


def test_read_only_and_empty_commits_refused(tmp_path):
    path = tmp_path / "ro.h5"
    with pytest.raises(NothingToCommitError, match="no Zarr v3 group"):
        writable(path).commit()
    store = writable(path)
    small().to_zarr(store, mode="w")
    store.commit()
    with pytest.raises(ReadOnlyError, match="read_only=False"):
        VersionStore(path).commit()
    with pytest.raises(NothingToCommitError):
        store.commit()


def test_writable_store_refuses_pickle_naming_fork(tmp_path):
    store = writable(tmp_path / "p.h5")
    with pytest.raises(TypeError, match=r"store\.fork\(\)"):
        pickle.dumps(store)
    with pytest.raises(TypeError, match=r"store\.fork\(\)"):
        pickle.dumps(store.with_read_only(True))  # a view of pending writes
    small().to_zarr(store, mode="w")
    name = store.commit()
    reader = pickle.loads(pickle.dumps(VersionStore(tmp_path / "p.h5")))
    assert reader.version == name


# -- zarr's conformance kit on the writable mode --------------------------------------------------
def _synced(fn):
    @functools.wraps(fn)
    def run(self, *args, **kwargs):
        return sync(fn(self, *args, **kwargs))

    return run


def _commit_a_version(path) -> None:
    store = writable(path)
    small(2).to_zarr(store, mode="w")
    store.commit()


NEEDS_A_VERSION = "a read-only store presents a committed version: the file gets one first"


class TestWritableVersionStoreKit(StoreTests[VersionStore, Buffer]):
    """The kit on ``VersionStore(new path, read_only=False)``: an overlay over nothing."""

    store_cls = VersionStore
    buffer_cls = Buffer

    @pytest.fixture
    def store_kwargs(self, tmp_path) -> dict:
        return {"path": str(tmp_path / "kit.h5"), "read_only": False}

    @pytest.fixture
    def store(self, open_kwargs) -> VersionStore:
        return sync(self.store_cls.open(**open_kwargs))

    @pytest.fixture
    def store_not_open(self, store_kwargs) -> VersionStore:
        return self.store_cls(**store_kwargs)

    async def set(self, store, key, value) -> None:  # behind the store's methods: into its overlay
        store._ensure_state()
        store._session.overlay.written[key] = value.to_bytes()

    async def get(self, store, key) -> Buffer:
        return self.buffer_cls.from_bytes(store._session.overlay.written[key])

    def test_store_repr(self, store) -> None:
        assert repr(store) == f"VersionStore({store.path!r}, version=None, read_only=False)"

    def test_store_supports_writes(self, store) -> None:
        assert store.supports_writes and store.supports_deletes

    def test_store_supports_listing(self, store) -> None:
        assert store.supports_listing

    @pytest.mark.parametrize("read_only", [True, False])
    def test_store_open_read_only(self, open_kwargs, read_only) -> None:
        if read_only:  # NEEDS_A_VERSION
            _commit_a_version(open_kwargs["path"])
        sync(StoreTests.test_store_open_read_only(self, open_kwargs, read_only))

    def test_read_only_store_raises(self, open_kwargs) -> None:
        _commit_a_version(open_kwargs["path"])  # NEEDS_A_VERSION
        sync(StoreTests.test_read_only_store_raises(self, open_kwargs))

    def test_with_read_only_store(self, open_kwargs) -> None:
        _commit_a_version(open_kwargs["path"])  # NEEDS_A_VERSION
        sync(StoreTests.test_with_read_only_store(self, open_kwargs))

    @pytest.mark.skip(
        reason="a writable store refuses to pickle by design (its writes live in this process); "
        "test_writable_store_refuses_pickle_naming_fork checks the message names fork()"
    )
    def test_serializable_store(self, store) -> None:
        pass

    def test_get_raises(self, store) -> None:
        sync(StoreTests.test_get_raises(self, store))


for _name, _fn in vars(StoreTests).items():
    if (
        _name.startswith("test_")
        and inspect.iscoroutinefunction(_fn)
        and _name not in vars(TestWritableVersionStoreKit)
    ):
        setattr(TestWritableVersionStoreKit, _name, _synced(_fn))
del _name, _fn
