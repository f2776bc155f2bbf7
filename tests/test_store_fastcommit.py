"""The writable store's fast commit (:mod:`xarray_vhdf5.store._fastcommit`) against the ``xr`` path.

Each workload runs twice from the same first version: once with the fast
path (the default), once with ``_staged.FAST_COMMIT = False`` (every commit
through :func:`~xarray_vhdf5.xr._stage.commit_staged`). The two files must
store the same thing: per dataset the same hash-table entries (the SHA-256
of every chunk written, and their row ranges), raw_data of the same shape,
and per version the same datasets, values, dtypes, attributes and
``xr.open_dataset(engine="vhdf5")`` result. ``plan_fast_commit`` must say
which path a commit takes.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr

from xarray_vhdf5._versions import VersionedHDF5File
from xarray_vhdf5.store import VersionStore, _staged
from xarray_vhdf5.store._fastcommit import plan_fast_commit

pytestmark = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata is currently not part:UserWarning",
    "ignore:Failed to open Zarr store with consolidated metadata:RuntimeWarning",
    "ignore:Numcodecs codecs are not in the Zarr version 3 specification:UserWarning",
)


def days(n: int, start: int = 0, seed: int = 0) -> xr.Dataset:
    """Daily (time, y, x) float32 with a NaN, an int16 variable, coordinates; chunks of 2 days."""
    rng = np.random.default_rng(seed + start)
    sst = rng.normal(20, 3, (n, 6, 4)).astype("float32")
    sst[0, 0, 0] = np.nan
    ds = xr.Dataset(
        {
            "sst": (
                ("time", "y", "x"),
                sst,
                {"units": "degC", "long_name": "sea surface temperature", "scale": np.float32(0.1)},
            ),
            "count": (("time", "y"), rng.integers(0, 9, (n, 6)).astype("int16")),
        },
        coords={
            "time": np.datetime64("2000-01-01", "ns") + np.arange(start, start + n).astype("m8[D]"),
            "y": np.linspace(0, 1, 6),
            "x": np.arange(4, dtype="int32"),
        },
        attrs={"title": "days"},
    )
    for name in ("sst", "count"):
        ds[name].encoding["chunks"] = (2, *ds[name].shape[1:])
    return ds


def base_file(path, compression=None) -> None:
    ds = days(5)
    if compression is None:
        for name in ds.variables:
            ds[name].encoding["compression"] = None
    ds.vhdf5.commit("v1", path=str(path))


def commit(path, write, *, numcodecs: bool = False, expect_fast: bool | None = None) -> str:
    """``write(store)`` into a writable store over the current version, then commit it."""
    store = VersionStore(str(path), read_only=False, numcodecs=numcodecs)
    try:
        write(store)
        if expect_fast is not None:
            plan = plan_fast_commit(store._ensure_state(), store._session.overlay)
            assert (not isinstance(plan, str)) == expect_fast, plan
        return store.commit(message="m")
    finally:
        store.close()


def hash_tables(path) -> dict[str, tuple]:
    """Per dataset: its hash table's entries, sorted (SHA-256, row range), and raw_data's shape."""
    out = {}
    with h5py.File(path, "r") as f:
        data = f["_version_data"]
        for name in data:
            if name == "versions" or "hash_table" not in data[name]:
                continue
            table = data[name]["hash_table"][()]
            entries = sorted((bytes(row["hash"]), tuple(int(v) for v in row["shape"])) for row in table)
            out[name] = (entries, data[name]["raw_data"].shape)
    return out


def _attrs(obj) -> dict:
    out = {}
    for key, value in obj.attrs.items():
        if key in ("DIMENSION_LIST", "REFERENCE_LIST", "timestamp"):
            out[key] = "present"  # object references: their targets differ per file
            continue
        out[key] = repr(value.tolist() if isinstance(value, np.ndarray) else value)  # repr: NaN equals NaN
    return out


def versions_content(path) -> dict:
    """Per version: per dataset (shape, dtype, values, attributes), the version group's attributes."""
    out = {}
    with VersionedHDF5File.open(str(path)) as reader:
        names = list(reader.versions)
    with h5py.File(path, "r") as f:
        for name in names:
            if name == "__first_version__":
                continue
            group = f[f"_version_data/versions/{name}"]
            entry = {"": _attrs(group)}

            def visit(key, obj, entry=entry):
                if isinstance(obj, h5py.Dataset):
                    entry[key] = (obj.shape, obj.dtype.str, obj[()].tobytes(), _attrs(obj))
                else:
                    entry[key] = _attrs(obj)

            group.visititems(visit)
            out[name] = entry
    return out


def run_both(tmp_path, writes, monkeypatch, *, compression=None, numcodecs=False, expect_fast=True):
    """Apply ``writes`` (functions of a store, one commit each) on the fast and the xr path; compare."""
    paths = {}
    for fast in (True, False):
        path = tmp_path / f"{'fast' if fast else 'xr'}.h5"
        base_file(path, compression)
        monkeypatch.setattr(_staged, "FAST_COMMIT", fast)
        for write in writes:
            commit(path, write, numcodecs=numcodecs, expect_fast=expect_fast if fast else None)
        paths[fast] = path
    assert hash_tables(paths[True]) == hash_tables(paths[False])
    fast_content, xr_content = versions_content(paths[True]), versions_content(paths[False])
    assert list(fast_content) == list(xr_content)
    for version in fast_content:
        assert fast_content[version] == xr_content[version], version
        with (
            xr.open_dataset(paths[True], engine="vhdf5", version=version) as a,
            xr.open_dataset(paths[False], engine="vhdf5", version=version) as b,
        ):
            xr.testing.assert_identical(a.load(), b.load())
    return paths


def append(start: int, n: int = 1):
    def write(store):
        ds = days(n, start=start)
        for name in ds.variables:
            ds[name].encoding.pop("chunks", None)
        ds.to_zarr(store, mode="a", append_dim="time", consolidated=False)

    return write


def test_daily_appends_same_chunks_both_paths(tmp_path, monkeypatch):
    # one day at a time: partial chunks of 2 days along time, the time coordinate grows too
    paths = run_both(tmp_path, [append(5 + i) for i in range(5)], monkeypatch)
    with xr.open_dataset(paths[True], engine="vhdf5") as ds:
        expected = xr.concat([days(5)] + [days(1, start=5 + i) for i in range(5)], "time")
        np.testing.assert_array_equal(ds["sst"].values, expected["sst"].values)
        np.testing.assert_array_equal(ds["time"].values, expected["time"].values)


def test_several_days_appended_at_once(tmp_path, monkeypatch):
    run_both(tmp_path, [append(5, 3), append(8, 4)], monkeypatch)


def test_region_write(tmp_path, monkeypatch):
    def write(store):
        ds = days(2, start=2, seed=7)[["sst", "count"]].drop_vars(["time", "y", "x"])
        ds.to_zarr(store, region={"time": slice(2, 4)}, consolidated=False)

    run_both(tmp_path, [write], monkeypatch)


def test_partial_chunk_written_through_zarr(tmp_path, monkeypatch):
    def write(store):
        arr = zarr.open_array(store, path="sst", mode="r+", zarr_format=3)
        arr[3, 1:3, 2] = np.float32(-5.5)  # inside one chunk: zarr reads, modifies, writes it

    run_both(tmp_path, [write], monkeypatch)


def test_attribute_changes(tmp_path, monkeypatch):
    def write(store):
        arr = zarr.open_array(store, path="sst", mode="r+", zarr_format=3)
        attrs = dict(arr.attrs)
        attrs["long_name"] = "SST"
        attrs["comment"] = "checked"
        attrs["level"] = 3
        attrs["scale"] = 0.1  # JSON changes (0.10000000149011612 was float32's), the value does not
        arr.attrs.put(attrs)
        arr[0, 0, 0] = np.float32(1.25)
        x = zarr.open_array(store, path="x", mode="r+", zarr_format=3)  # an index coordinate
        x.attrs["long_name"] = "column"

    run_both(tmp_path, [write], monkeypatch)


def test_a_group_of_the_version(tmp_path, monkeypatch):
    paths = {}
    for fast in (True, False):
        path = tmp_path / f"{'fast' if fast else 'xr'}.h5"
        ds = days(4)
        for name in ds.variables:
            ds[name].encoding["compression"] = None
        ds.vhdf5.commit("v1", path=str(path), group="sub")
        monkeypatch.setattr(_staged, "FAST_COMMIT", fast)
        for i in range(3):
            store = VersionStore(str(path), group="sub", read_only=False)
            try:
                append(4 + i)(store)
                plan = plan_fast_commit(store._ensure_state(), store._session.overlay)
                assert not isinstance(plan, str), plan  # the fast path applies to a subgroup too
                store.commit()
            finally:
                store.close()
        paths[fast] = path
    assert hash_tables(paths[True]) == hash_tables(paths[False])
    assert versions_content(paths[True]) == versions_content(paths[False])
    with (
        xr.open_dataset(paths[True], engine="vhdf5", group="sub") as a,
        xr.open_dataset(paths[False], engine="vhdf5", group="sub") as b,
    ):
        xr.testing.assert_identical(a.load(), b.load())
        assert a.sizes["time"] == 7


def test_compressed_base_through_numcodecs(tmp_path, monkeypatch):
    # deflate + shuffle served as numcodecs.zlib / numcodecs.shuffle chunks: decoded by numcodecs
    run_both(tmp_path, [append(5), append(6)], monkeypatch, compression="gzip", numcodecs=True)


def test_compressed_base_decoded_by_the_store(tmp_path, monkeypatch):
    run_both(tmp_path, [append(5)], monkeypatch, compression="gzip")


def test_deleted_chunk_filled(tmp_path, monkeypatch):
    def write(store):
        arr = zarr.open_array(store, path="count", mode="r+", zarr_format=3)
        fill = arr.fill_value
        arr[2:4] = fill  # a whole chunk of fill value: zarr deletes its key (write_empty_chunks=False)

    paths = run_both(tmp_path, [write], monkeypatch)
    with xr.open_dataset(paths[True], engine="vhdf5", mask_and_scale=False) as ds:
        assert (ds["count"].values[2:4] == ds["count"].encoding.get("_FillValue", 0)).all()


@pytest.mark.parametrize("case", ["new variable", "root attributes", "deleted variable", "cf attribute"])
def test_other_writes_take_the_xr_path(tmp_path, monkeypatch, case):
    def write(store):
        if case == "new variable":
            ds = days(5)[["time"]].assign(extra=(("time",), np.arange(5.0)))
            ds.to_zarr(store, mode="a", consolidated=False)
        elif case == "root attributes":
            group = zarr.open_group(store, mode="r+", zarr_format=3)
            group.attrs["title"] = "changed"
        elif case == "deleted variable":
            group = zarr.open_group(store, mode="r+", zarr_format=3)
            del group["count"]
        else:
            arr = zarr.open_array(store, path="sst", mode="r+", zarr_format=3)
            arr.attrs["units"] = "K"

    run_both(tmp_path, [write], monkeypatch, expect_fast=False)
