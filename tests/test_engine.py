"""The vhdf5 xarray engine: lazy reads, CF decoding, versions, groups, dask, pickling."""

from __future__ import annotations

import datetime as dt
import io
import pickle

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5.xr._engine import VHDF5BackendEntrypoint


def _sample(n_time: int = 6) -> xr.Dataset:
    rng = np.random.default_rng(0)
    sst = rng.normal(15, 5, size=(n_time, 20, 30)).astype("f4")
    sst[:, :3, :] = np.nan  # "land"
    ds = xr.Dataset(
        {
            "sst": (("time", "lat", "lon"), sst, {"units": "degC", "long_name": "sea surface temperature"}),
            "flag": (("lat", "lon"), rng.integers(0, 4, size=(20, 30)).astype("i2")),
            "station": ("lat", np.array([f"s{i}" for i in range(20)])),
        },
        coords={
            "time": ("time", np.datetime64("2000-01-01", "ns") + np.arange(n_time) * np.timedelta64(1, "D")),
            "lat": ("lat", np.linspace(-40, 40, 20)),
            "lon": ("lon", np.linspace(0, 290, 30), {"units": "degrees_east"}),
            "height": ((), 2.0, {"units": "m"}),
        },
        attrs={"title": "sample", "history": "made in a test"},
    )
    ds["sst"].encoding.update({"_FillValue": np.float32(-1e34), "chunks": (1, 10, 30)})
    ds["time"].encoding.update({"units": "hours since 2000-01-01", "dtype": "f8"})
    return ds


@pytest.fixture
def committed(tmp_path):
    path = tmp_path / "sample.h5"
    ds = _sample()
    assert ds.vhdf5.commit("v1", path=path) == "v1"
    ds2 = ds.copy(deep=True)
    ds2["sst"][0, 5, 5] = 99.0
    ds2.vhdf5.commit("v2", path=path, message="fix one point")
    return path, ds, ds2


def test_round_trip_identical(committed):
    path, ds, ds2 = committed
    with xr.open_dataset(path, engine="vhdf5", version="v1") as got:
        xr.testing.assert_identical(got, ds)
    with xr.open_dataset(path, engine="vhdf5") as got:  # current = v2
        xr.testing.assert_identical(got, ds2)
        assert got.encoding["vhdf5_version"] == "v2"
        assert got.vhdf5.version == "v2"


def test_version_selection_by_index_and_time(committed):
    path, ds, _ds2 = committed
    with xr.open_dataset(path, engine="vhdf5", version=-1) as got:
        xr.testing.assert_identical(got, ds)
    with h5py.File(path) as f:
        ts = xv.VersionedHDF5File(f).version_info("v1").timestamp
    with xr.open_dataset(path, engine="vhdf5", version=ts + dt.timedelta(microseconds=1)) as got:
        assert got.encoding["vhdf5_version"] == "v1"


def test_cf_decoding_options(committed):
    path, _ds, _ = committed
    with xr.open_dataset(path, engine="vhdf5", version="v1", decode_times=False, mask_and_scale=False) as raw:
        assert raw["time"].dtype == np.float64
        assert raw["time"].attrs["units"] == "hours since 2000-01-01"
        assert raw["sst"].attrs["_FillValue"] == np.float32(-1e34)
        assert np.all(raw["sst"].values[:, :3, :] == np.float32(-1e34))
    with xr.open_dataset(path, engine="vhdf5", version="v1") as dec:
        assert np.issubdtype(dec["time"].dtype, np.datetime64)
        assert np.isnan(dec["sst"].values[:, :3, :]).all()


def test_variables_are_lazy(committed):
    path, _, _ = committed
    with xr.open_dataset(path, engine="vhdf5", mask_and_scale=False, decode_times=False) as got:
        var = got["sst"].variable
        assert not isinstance(var._data, np.ndarray)
        assert not var._in_memory


class _CountingFile(io.FileIO):
    """A file whose bytes read are counted (h5py's fileobj driver reads through it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.nread = 0

    def readinto(self, b):
        n = super().readinto(b)
        self.nread += n or 0
        return n


def test_reading_one_chunk_reads_about_one_chunk(tmp_path):
    path = tmp_path / "big.h5"
    ds = xr.Dataset({"v": (("t", "y", "x"), np.random.default_rng(1).random((20, 100, 100)))})
    ds["v"].encoding.update(chunks=(1, 100, 100), compression=None)  # bytes read = chunk bytes
    ds.vhdf5.commit("a", path=path)
    chunk_bytes = 100 * 100 * 8
    fo = _CountingFile(path, "rb")
    got = xr.open_dataset(fo, engine="vhdf5")
    try:
        opened = fo.nread
        assert opened < chunk_bytes  # opening reads metadata only
        values = got["v"][3, 10:20, 10:20].values
        one = fo.nread - opened
        np.testing.assert_array_equal(values, ds["v"].values[3, 10:20, 10:20])
        assert chunk_bytes <= one < 1.5 * chunk_bytes
        before = fo.nread
        got["v"][5:8].values
        assert 3 * chunk_bytes <= fo.nread - before < 3.5 * chunk_bytes
    finally:
        got.close()
        fo.close()


@pytest.mark.parametrize(
    "key",
    [
        (slice(None), 3, slice(2, 20, 3)),
        (np.array([4, 0, 2, 2]), slice(None), slice(None)),
        (slice(None, None, -2), slice(5, 1, -1), 7),
        (-1, np.array([19, 3, -1]), slice(None)),
    ],
)
def test_outer_indexing_matches_numpy(committed, key):
    path, ds, _ = committed
    with xr.open_dataset(path, engine="vhdf5", version="v1", mask_and_scale=False, decode_times=False) as got:
        expected = xr.conventions.encode_cf_variable(ds["sst"].variable).values[key]
        np.testing.assert_array_equal(got["sst"].variable[key].values, expected)


def test_vectorized_indexing(committed):
    path, ds, _ = committed
    with xr.open_dataset(path, engine="vhdf5", version="v1") as got:
        i = xr.DataArray([0, 3, 5], dims="p")
        j = xr.DataArray([4, 9, 1], dims="p")
        xr.testing.assert_identical(got["sst"].isel(lat=i, lon=j), ds["sst"].isel(lat=i, lon=j))


def test_dask_chunks_follow_hdf5_chunks(committed):
    pytest.importorskip("dask")
    path, ds, _ = committed
    with xr.open_dataset(path, engine="vhdf5", version="v1", chunks={}) as got:
        assert got["sst"].chunks == ((1,) * 6, (10, 10), (30,))
        xr.testing.assert_identical(got.compute(), ds)


def test_backend_array_pickles(committed):
    path, ds, _ = committed
    with xr.open_dataset(path, engine="vhdf5", version="v1") as got:
        clone = pickle.loads(pickle.dumps(got))
        xr.testing.assert_identical(clone.load(), ds)
        clone.close()


def test_guess_can_open(committed, tmp_path):
    path, _, _ = committed
    entry = VHDF5BackendEntrypoint()
    assert entry.guess_can_open(path)
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.arange(3)
    assert not entry.guess_can_open(plain)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert not entry.guess_can_open(text)
    assert not entry.guess_can_open(tmp_path / "missing.h5")
    # Registered through the entry point; xarray tries its own netCDF engines first
    # when guessing, so users pass engine="vhdf5" explicitly.
    assert isinstance(xr.backends.list_engines()["vhdf5"], VHDF5BackendEntrypoint)


def test_unknown_version_lists_existing(committed):
    path, _, _ = committed
    with pytest.raises(xv.VersionNotFoundError, match="'v1', 'v2'") as err:
        xr.open_dataset(path, engine="vhdf5", version="nope")
    assert isinstance(err.value, KeyError)


def test_names_that_are_not_committed_versions_are_not_opened(committed):
    """A version given by name is opened straight from its group (no registry): only a committed one.
    A group a crashed commit left (committed=False), one without a timestamp, the first version's
    placeholder and a path into a version are what the registry refuses too."""
    path, _, ds2 = committed
    with h5py.File(path, "r+") as f:
        versions = f["_version_data/versions"]
        versions.copy("v2", "half")
        versions["half"].attrs["committed"] = False
        versions.create_group("by_hand")
    for name in ("half", "by_hand", "__first_version__", "v2/sst", ""):
        with pytest.raises(xv.VersionNotFoundError):
            xr.open_dataset(path, engine="vhdf5", version=name)
    with xr.open_dataset(path, engine="vhdf5", version="v2") as got:
        assert got.encoding["vhdf5_version"] == "v2"
        xr.testing.assert_identical(got.drop_encoding(), ds2)


def test_not_versioned_file(tmp_path):
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(xv.NotVersionedError, match="not a versioned HDF5 file"):
        xr.open_dataset(plain, engine="vhdf5")


def _assert_not_hdf5(info, shown: str, what: str) -> None:
    err = info.value
    assert isinstance(err, xv.NotVersionedError) and isinstance(err, OSError) and isinstance(err, ValueError)
    assert str(err).startswith(f"{shown} is not an HDF5 file ({what}): engine='vhdf5' reads versioned HDF5 files")
    assert "engine='scipy'" in str(err) and "ds.vhdf5.commit(version, path=...)" in str(err)


@pytest.mark.parametrize(
    ("fmt", "what"),
    [("NETCDF3_CLASSIC", "a netCDF-3 classic file"), ("NETCDF3_64BIT", "a netCDF-3 64-bit offset file")],
)
def test_netcdf3_file_is_not_hdf5(tmp_path, fmt, what):
    """A netCDF-3 file: NotHDF5Error (a NotVersionedError and the OSError h5py raises)
    naming the file and its format, not libhdf5's "file signature not found"."""
    path = tmp_path / "classic.nc"
    xr.Dataset({"v": ("i", np.arange(3.0))}).to_netcdf(path, engine="scipy", format=fmt)
    with pytest.raises(xv.NotHDF5Error) as info:
        xr.open_dataset(path, engine="vhdf5")
    _assert_not_hdf5(info, repr(str(path)), what)
    with pytest.raises(xv.NotHDF5Error) as info:
        xr.open_datatree(path, engine="vhdf5")
    _assert_not_hdf5(info, repr(str(path)), what)
    with open(path, "rb") as fh, pytest.raises(xv.NotHDF5Error) as info:
        xr.open_dataset(fh, engine="vhdf5")
    _assert_not_hdf5(info, repr(str(path)), what)
    with pytest.raises(xv.NotHDF5Error) as info:
        xr.open_dataset(io.BytesIO(b"plain text, not HDF5"), engine="vhdf5")
    _assert_not_hdf5(info, "the BytesIO object", "it starts with b'plain te', not the HDF5 signature")


def test_noaa_netcdf3_file_is_not_hdf5(noaa_dir):
    path = noaa_dir / "etopo20.cdf"
    with pytest.raises(OSError) as info:
        xr.open_dataset(path, engine="vhdf5")
    _assert_not_hdf5(info, repr(str(path)), "a netCDF-3 classic file")


def test_other_files_that_are_not_hdf5(tmp_path):
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")
    with pytest.raises(xv.NotHDF5Error) as info:
        xr.open_dataset(empty, engine="vhdf5")
    _assert_not_hdf5(info, repr(str(empty)), "an empty file")
    text = tmp_path / "notes.h5"
    text.write_text("x" * 5000)
    with pytest.raises(xv.NotHDF5Error) as info:
        xr.open_dataset(text, engine="vhdf5")
    _assert_not_hdf5(info, repr(str(text)), "it starts with b'xxxxxxxx', not the HDF5 signature")


def test_damaged_or_missing_hdf5_file(tmp_path):
    """A damaged HDF5 file (signature found): CorruptFileError, an OSError naming it; missing: h5py's."""
    damaged = tmp_path / "damaged.h5"
    with h5py.File(damaged, "w") as f:
        f["x"] = np.arange(100)
    damaged.write_bytes(damaged.read_bytes()[:100])
    with pytest.raises(xv.CorruptFileError, match="damaged.h5") as info:
        xr.open_dataset(damaged, engine="vhdf5")
    assert isinstance(info.value, OSError) and "vhdf5 check" in str(info.value)
    with pytest.raises(FileNotFoundError):
        xr.open_dataset(tmp_path / "missing.h5", engine="vhdf5")


def test_hdf5_signature_after_a_user_block(tmp_path):
    from xarray_vhdf5._backend.signature import has_hdf5_signature

    path = tmp_path / "userblock.h5"
    with h5py.File(path, "w", userblock_size=1024) as f:
        f["x"] = np.arange(3)
    with open(path, "rb") as fh:
        fh.seek(7)
        assert has_hdf5_signature(fh) == (True, b"\0" * 8)
        assert fh.tell() == 7  # position restored
    with pytest.raises(xv.NotVersionedError, match="not a versioned HDF5 file") as info:
        xr.open_dataset(path, engine="vhdf5")
    assert not isinstance(info.value, xv.NotHDF5Error)


def test_groups(tmp_path):
    path = tmp_path / "groups.h5"
    ds = _sample()
    ds.vhdf5.commit("v1", path=path, group="ocean/surface")
    other = xr.Dataset({"z": ("k", np.arange(5.0))})
    other.vhdf5.commit("v2", path=path, group="atmosphere")
    with xr.open_dataset(path, engine="vhdf5", group="ocean/surface") as got:
        xr.testing.assert_identical(got, ds)
    with xr.open_dataset(path, engine="vhdf5", group="/atmosphere") as got:
        xr.testing.assert_identical(got, other)
    with xr.open_dataset(path, engine="vhdf5", version="v1") as root:
        assert len(root.data_vars) == 0
    with pytest.raises(KeyError, match="no group 'sea'"):
        xr.open_dataset(path, engine="vhdf5", group="sea")


def test_files_written_by_versioned_hdf5_open_with_phony_dims(tmp_path):
    vh = pytest.importorskip("versioned_hdf5")
    path = tmp_path / "ref.h5"
    with h5py.File(path, "w") as f:
        vf = vh.VersionedHDF5File(f)
        with vf.stage_version("r1") as g:
            g.create_dataset("a", data=np.arange(12.0).reshape(3, 4), chunks=(2, 2))
            g.create_dataset("b", data=np.arange(4), chunks=(3,))
            g["a"].attrs["units"] = "m"
    with xr.open_dataset(path, engine="vhdf5") as got:
        np.testing.assert_array_equal(got["a"].values, np.arange(12.0).reshape(3, 4))
        assert got["a"].dims == ("phony_dim_0", "phony_dim_1")
        assert got["b"].dims == ("phony_dim_1",)
        assert got["a"].attrs == {"units": "m"}


def _exact(value) -> tuple:
    """``value``'s type, dtype and bytes (NaN equals NaN; repr for strings and objects)."""
    arr = np.asarray(value)
    body = repr(value) if arr.dtype.hasobject or arr.dtype.kind in "US" else arr.tobytes()
    return type(value).__name__, arr.dtype.str, body


@pytest.mark.parametrize("n_time", [3, 130], ids=["decoded-mappings", "stored-map"])
def test_members_read_attributes_once_and_leave_references_unread(tmp_path, n_time):
    """The engine's view of each dataset holds h5py's attributes, in h5py's order, but for
    netCDF-4's object references, which no variable shows: those are never read."""
    from xarray_vhdf5._backend.h5attrs import UNREAD
    from xarray_vhdf5._backend.names import visible_attrs
    from xarray_vhdf5._versions import chunkmaps
    from xarray_vhdf5.xr._reading import _DatasetView, _StoredView, dataset_members, file_source, opened

    p = str(tmp_path / "members.h5")
    ds = xr.Dataset(
        {"sst": (("time", "lat"), np.arange(2.0 * n_time).reshape(n_time, 2), {"units": "K", "scale": 2.0})},
        coords={"time": np.arange(n_time), "lat": ("lat", [1.0, 2.0], {"units": "degrees_north"})},
    )
    ds["sst"].encoding["chunks"] = (1, 2)
    ds.vhdf5.commit("v1", path=p)
    source = file_source(p)
    with opened(source, p) as f:
        grp = f["_version_data/versions/v1"]
        members = dict(dataset_members(source, "v1", grp))
        assert (chunkmaps.load(f, "v1", "sst") is not None) == (n_time >= chunkmaps.MIN_CHUNKS)
        assert isinstance(members["sst"], _StoredView if n_time >= chunkmaps.MIN_CHUNKS else _DatasetView)
        assert isinstance(members["lat"], _DatasetView)
        for name, view in members.items():
            h5 = grp[name].attrs
            assert list(view.attrs) == list(h5)
            unread = [k for k, v in view.attrs.items() if v is UNREAD]
            assert unread == [k for k in h5 if k in ("DIMENSION_LIST", "REFERENCE_LIST")] and unread
            shown, expected = visible_attrs(view.attrs), visible_attrs(h5)
            assert list(shown) == list(expected)
            assert [_exact(shown[k]) for k in shown] == [_exact(expected[k]) for k in expected]
            assert view.raw.name == h5["raw_data"]
    with xr.open_dataset(p, engine="vhdf5") as back:
        xr.testing.assert_identical(back.load(), ds)
