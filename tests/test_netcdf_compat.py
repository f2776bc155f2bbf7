"""netCDF-4 readability of version groups (dimension scales), and that it confuses no one.

Oracle: ``xr.open_dataset(path, engine="h5netcdf", group="/_version_data/versions/<v>")``
must give what our engine gives, modulo the documented extra attributes
(docs/format.md, "What xarray_vhdf5 adds") and the length-1 dimension of scalars.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5._backend.names import NETCDF_NOT_A_VARIABLE, SCALAR_DIM
from xarray_vhdf5.xr._dimscales import DIMENSIONS_DATA, attach_dimension_scales, netcdf_only_attrs

VERSIONS = "/_version_data/versions"


def _sample() -> xr.Dataset:
    rng = np.random.default_rng(3)
    sst = rng.normal(15, 5, size=(4, 6, 8)).astype("f4")
    sst[:, :2] = np.nan
    ds = xr.Dataset(
        {
            "sst": (("time", "lat", "lon"), sst, {"units": "degC"}),
            "counts": (("station",), np.arange(5, dtype="i4")),  # a dimension without coordinate
            "grid": (("lat", "station"), rng.integers(0, 9, size=(6, 5)).astype("u1")),
            "name": (("lat",), np.array([f"p{i}" for i in range(6)], dtype=object)),
        },
        coords={
            "time": ("time", np.datetime64("2001-01-01", "ns") + np.arange(4) * np.timedelta64(6, "h")),
            "lat": ("lat", np.linspace(-50.0, 50.0, 6)),
            "lon": ("lon", np.arange(8.0), {"units": "degrees_east"}),
            "depth": ((), 5.0, {"units": "m"}),
        },
        attrs={"title": "compat"},
    )
    ds["sst"].encoding.update({"_FillValue": np.float32(-999.0), "chunks": (1, 3, 8)})
    return ds


def _via_netcdf(path, version: str, group: str = "", **kwargs) -> xr.Dataset:
    """A version read by h5netcdf, without the attributes netCDF shows and we do not."""
    hidden = netcdf_only_attrs()
    ds = xr.open_dataset(path, engine="h5netcdf", group=f"{VERSIONS}/{version}{group}", **kwargs)
    ds = ds.load()
    ds.close()
    if SCALAR_DIM in ds.dims:
        ds = ds.squeeze(SCALAR_DIM)
    for var in ds.variables.values():
        for key in hidden["variable"]:
            var.attrs.pop(key, None)
    if not group:
        for key in hidden["group"]:
            ds.attrs.pop(key, None)
    return ds


def _via_engine(path, version: str, group: str | None = None, **kwargs) -> xr.Dataset:
    with xr.open_dataset(path, engine="vhdf5", version=version, group=group, **kwargs) as ds:
        return ds.load()


def _references(f: h5py.File, obj: h5py.Dataset) -> list[str]:
    """Names of the objects a dataset's DIMENSION_LIST / REFERENCE_LIST point to."""
    names = []
    if "DIMENSION_LIST" in obj.attrs:
        for refs in obj.attrs["DIMENSION_LIST"]:
            names += [f[r].name for r in refs]
    if "REFERENCE_LIST" in obj.attrs:
        names += [f[r].name for r, _ in obj.attrs["REFERENCE_LIST"]]
    return names


@pytest.fixture
def two_versions(tmp_path):
    path = tmp_path / "compat.h5"
    ds = _sample()
    ds.vhdf5.commit("v1", path=path, message="first")
    ds2 = ds.copy(deep=True)
    ds2["sst"][1, 3, 4] = 30.0
    ds2["counts"][0] = -1
    ds2.vhdf5.commit("v2", path=path)
    return path, ds, ds2


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_h5netcdf_reads_each_version_like_the_engine(two_versions, version):
    path, ds, ds2 = two_versions
    got = _via_netcdf(path, version)
    ours = _via_engine(path, version)
    xr.testing.assert_identical(got, ours)
    xr.testing.assert_identical(ours, ds if version == "v1" else ds2)
    # the encoding attributes are really there for netCDF tools, and only those
    raw = xr.open_dataset(path, engine="h5netcdf", group=f"{VERSIONS}/{version}")
    try:
        assert set(raw["sst"].attrs) - set(ours["sst"].attrs) == {"_ARRAY_DIMENSIONS", "raw_data", "chunks"}
        assert {"committed", "prev_version", "timestamp"} <= set(raw.attrs)
        assert raw["depth"].dims == (SCALAR_DIM,)
    finally:
        raw.close()


def test_undecoded_values_match_too(two_versions):
    path, _, _ = two_versions
    kw = dict(mask_and_scale=False, decode_times=False)
    xr.testing.assert_identical(_via_netcdf(path, "v2", **kw), _via_engine(path, "v2", **kw))


def test_noaa_coads_reads_with_h5netcdf(noaa_dir, tmp_path):
    src = xr.open_dataset(noaa_dir / "coads_climatology.cdf", decode_times=False)
    path = tmp_path / "coads.h5"
    src.vhdf5.commit("v1", path=path)
    got = _via_netcdf(path, "v1", decode_times=False)
    xr.testing.assert_identical(got, _via_engine(path, "v1", decode_times=False))
    xr.testing.assert_identical(got, src)


def test_groups_read_with_h5netcdf(tmp_path):
    path = tmp_path / "groups.h5"
    ds = _sample()
    ds.vhdf5.commit("v1", path=path, group="ocean/surface")
    other = xr.Dataset({"z": ("k", np.arange(3.0))})
    other.vhdf5.commit("v2", path=path, group="air")  # ocean/surface carried over from v1
    for version in ("v1", "v2"):
        got = _via_netcdf(path, version, "/ocean/surface")
        xr.testing.assert_identical(got, _via_engine(path, version, "ocean/surface"))
        xr.testing.assert_identical(got, ds)
    xr.testing.assert_identical(_via_netcdf(path, "v2", "/air"), other)


def test_scale_layout(two_versions):
    path, _, _ = two_versions
    with h5py.File(path) as f:
        for version in ("v1", "v2"):
            g = f[f"{VERSIONS}/{version}"]
            # coordinate variables are their own scale, named like the dimension
            assert g["lat"].attrs["CLASS"] == b"DIMENSION_SCALE" and g["lat"].attrs["NAME"] == b"lat"
            # a dimension without coordinate: a phony scale, a versioned dataset with no chunk
            station = g["station"]
            assert station.attrs["NAME"].startswith(NETCDF_NOT_A_VARIABLE)
            assert station.shape == (5,) and station.is_virtual
            assert station.id.get_create_plist().get_virtual_count() == 0
            assert station.attrs["raw_data"] == f"/_version_data/{DIMENSIONS_DATA}/raw_data"
            assert g[SCALAR_DIM].shape == (1,)
            # no _Netcdf4Dimid: netCDF-C takes it as a file-wide id (tests/test_netcdf_tools.py)
            scales = [k for k, d in g.items() if h5py.h5ds.is_scale(d.id)]
            assert len(scales) == 5 and not any(
                "_Netcdf4Dimid" in d.attrs for d in g.values()
            )  # time, lat, lon, station, scalar
            # every reference points inside this version's own group
            for obj in g.values():
                assert all(name.startswith(g.name + "/") for name in _references(f, obj))
            assert [f[r[0]].name for r in g["grid"].attrs["DIMENSION_LIST"]] == [g.name + "/lat", g.name + "/station"]
        assert f[f"/_version_data/{DIMENSIONS_DATA}/raw_data"].shape[0] == 0  # nothing stored


def test_engine_hides_the_bookkeeping(two_versions):
    path, _ds, _ = two_versions
    ours = _via_engine(path, "v1")
    assert "station" not in ours.variables and SCALAR_DIM not in ours.dims
    for var in ours.variables.values():
        assert not {"CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST", "_Netcdf4Dimid"} & set(var.attrs)
    with h5py.File(path) as f:
        assert xv.VersionedHDF5File(f)["v1"]["station"].shape == (5,)  # still a dataset of the version


def test_a_coordinate_added_later_to_a_bare_dimension(tmp_path):
    path = tmp_path / "later.h5"
    ds = xr.Dataset({"a": ("x", np.arange(4.0))})
    ds.vhdf5.commit("v1", path=path)
    ds2 = ds.assign_coords(x=("x", np.array([10, 20, 30, 40], dtype="i8")))  # any dtype
    ds2.vhdf5.commit("v2", path=path)
    ds3 = xr.Dataset({"a": ("x", np.arange(6.0))})  # the bare dimension again, longer
    ds3.vhdf5.commit("v3", path=path)
    for version, want in [("v1", ds), ("v2", ds2), ("v3", ds3)]:
        xr.testing.assert_identical(_via_netcdf(path, version), want)
        xr.testing.assert_identical(_via_engine(path, version), want)


def test_versioned_hdf5_reads_and_stages_on_top(two_versions):
    vh = pytest.importorskip("versioned_hdf5")
    path, _ds, ds2 = two_versions
    with h5py.File(path, "a") as f:
        vf = vh.VersionedHDF5File(f)
        assert vf["v2"]["station"].shape == (5,)
        np.testing.assert_array_equal(vf["v2"]["counts"][:], ds2["counts"].values)
        with vf.stage_version("v3") as g:
            g["counts"][1] = 77
    expected = ds2.copy(deep=True)
    expected["counts"][1] = 77
    expected.attrs = {}  # versioned-hdf5 starts a version's root attrs empty
    xr.testing.assert_identical(_via_engine(path, "v3"), expected)
    with h5py.File(path) as f:
        assert xv.VersionedHDF5File(f).versions == ["v1", "v2", "v3"]
        # versioned-hdf5 copies the attributes as they are: its references still point
        # into v2 (h5netcdf resolves them by name, so it reads v3 all the same)
        refs = f[f"{VERSIONS}/v3/counts"].attrs["DIMENSION_LIST"]
        assert f[refs[0][0]].name == f"{VERSIONS}/v2/station"
    xr.testing.assert_identical(_via_netcdf(path, "v3"), expected)


def test_our_staging_on_top_drops_stale_references_then_rebuilds(two_versions):
    path, _ds, ds2 = two_versions
    with h5py.File(path, "a") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v3") as g:
            g["counts"][1] = 77
        v3 = f[f"{VERSIONS}/v3"]
        for obj in v3.values():
            # nothing may point into v2: no references are carried over at all
            assert "DIMENSION_LIST" not in obj.attrs and "REFERENCE_LIST" not in obj.attrs
        assert v3["lat"].attrs["CLASS"] == b"DIMENSION_SCALE"
        # v2 is untouched
        assert next(f[r[0]].name for r in f[f"{VERSIONS}/v2/sst"].attrs["DIMENSION_LIST"]) == f"{VERSIONS}/v2/time"
        assert attach_dimension_scales(v3) == 5
    expected = ds2.copy(deep=True)
    expected["counts"][1] = 77
    xr.testing.assert_identical(_via_engine(path, "v3"), expected)
    xr.testing.assert_identical(_via_netcdf(path, "v3"), expected)


def test_attach_refuses_read_only(two_versions):
    path, _, _ = two_versions
    with h5py.File(path, "r") as f, pytest.raises(ValueError, match="read-only"):
        attach_dimension_scales(f[f"{VERSIONS}/v1"])


def test_datatree_reads_with_h5netcdf(tmp_path):
    path = tmp_path / "tree.h5"
    tree = xr.DataTree.from_dict(
        {
            "/": xr.Dataset(coords={"x": ("x", np.arange(3.0))}, attrs={"title": "t"}),
            "/a": xr.Dataset({"u": ("x", np.array([1.0, 2.0, 3.0]))}),
            "/a/b": xr.Dataset({"w": (("x", "y"), np.ones((3, 2)))}, coords={"y": ("y", [5, 6])}),
        }
    )
    tree.vhdf5.commit("v1", path=path)
    got = xr.open_datatree(path, engine="h5netcdf", group=f"{VERSIONS}/v1")
    try:
        got = got.load()
        for key in netcdf_only_attrs()["group"]:
            got.attrs.pop(key, None)
        for node in got.subtree:
            for var in node.variables.values():
                for key in netcdf_only_attrs()["variable"]:
                    var.attrs.pop(key, None)
        xr.testing.assert_identical(got, tree)
    finally:
        got.close()


def test_user_attributes_named_like_scale_attributes_survive(tmp_path):
    path = tmp_path / "names.h5"
    ds = xr.Dataset({"a": ("x", np.arange(3.0), {"NAME": "my a", "CLASS": "B", "flags": [1, 2]})})
    ds.vhdf5.commit("v1", path=path)
    xr.testing.assert_identical(_via_engine(path, "v1"), ds)


def test_user_class_attribute_never_breaks_a_commit(tmp_path):
    # H5DSis_scale reads a variable-length CLASS attribute as pointer bytes: whether a
    # variable looked like a scale depended on the heap address. Such variables are left
    # unattached, so every one of many commits must succeed.
    path = tmp_path / "class.h5"
    for i in range(40):
        ds = xr.Dataset({f"v{j}": ("x", np.arange(3.0), {"CLASS": "B" * (j + 1)}) for j in range(4)})
        ds.vhdf5.commit(f"v{i}", path=path, allow_empty=True)
    with h5py.File(path, "r") as f:
        group = f["_version_data/versions/v39"]
        for j in range(4):
            assert "DIMENSION_LIST" not in group[f"v{j}"].attrs
            assert group[f"v{j}"].attrs["CLASS"] == "B" * (j + 1)
    xr.testing.assert_identical(_via_engine(path, "v39"), ds)


def test_coordinate_with_user_name_attribute_is_not_made_a_scale(tmp_path):
    path = tmp_path / "coordname.h5"
    ds = xr.Dataset(
        {"a": ("x", np.arange(3.0))},
        coords={"x": ("x", np.arange(3), {"NAME": "longitude", "CLASS": "grid"})},
    )
    ds.vhdf5.commit("v1", path=path)
    with h5py.File(path, "r") as f:
        x = f["_version_data/versions/v1/x"]
        assert x.attrs["NAME"] == "longitude" and x.attrs["CLASS"] == "grid"
    xr.testing.assert_identical(_via_engine(path, "v1"), ds)
