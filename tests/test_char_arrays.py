"""netCDF ``char`` arrays and strings through commit, stage, append and netCDF tools (issue 18).

xarray decodes a ``char`` array (``S1`` along a string dimension) to fixed-width
bytes, or to ``str`` with ``_Encoding``, recording ``dtype: S1`` and
``char_dim_name`` in ``encoding``; its netCDF-4 writers store them back as
``char`` arrays (``xarray.coding.strings.CharacterArrayCoder``). Committed
here they must read back identical, be ``char`` for netCDF-C (``ncdump``,
netCDF4-python) and be editable and appendable through ``ds.vhdf5.stage()``.
"""

from __future__ import annotations

import shutil
import subprocess
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (registers the accessor)
from xarray_vhdf5.errors import StringTooLongError

DATA = Path(__file__).parent / "data" / "cf"
VERSIONS = "/_version_data/versions"
NAMING = "String dimension naming mismatch"  # xarray's warning when a string dimension changes width


def _open(path, **kwargs) -> xr.Dataset:
    with xr.open_dataset(path, **kwargs) as ds:
        return ds.load()


def _group(path, version: str, engine: str = "netcdf4") -> xr.Dataset:
    return _open(path, engine=engine, group=f"{VERSIONS}/{version}")


@pytest.fixture
def records(tmp_path) -> Path:
    """A netCDF-4 file by xarray: bytes and UTF-8 ``str`` char arrays along ``time``, a ``string`` variable."""
    ds = xr.Dataset(
        {
            "flag": ("time", np.array([b"ok", b"bad", b"ok", b"ok", b"nan", b"ok"])),
            "label": ("time", np.array(["aé", "b", "c", "d", "e", "f"])),
            "note": ("time", np.array(["x", "yy", "zzz", "w", "v", "u"], dtype=object)),
            "sst": ("time", np.arange(6.0)),
        },
        coords={"time": np.arange(6)},
    )
    path = tmp_path / "records.nc"
    ds.to_netcdf(
        path,
        engine="netcdf4",
        encoding={"flag": {"dtype": "S1"}, "label": {"dtype": "S1", "_Encoding": "utf-8"}, "note": {"dtype": str}},
    )
    return path


def _ncdump_data(path, *args) -> str:
    ncdump = shutil.which("ncdump")
    if ncdump is None:
        pytest.skip("ncdump (Debian's netcdf-bin) not installed")
    done = subprocess.run([ncdump, *args, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _data_section(text: str, name: str) -> str:
    """The ``name = ... ;`` block of ``ncdump`` output, whitespace-normalized."""
    start = text.index(f" {name} =", text.index("data:"))
    return " ".join(text[start : text.index(";", start) + 1].split())


def test_bears_char_array_round_trips(tmp_path):
    """bears.nc's ``char bears(i, j, bears_len)``: identical decoded and raw, ``char`` for netCDF-C."""
    source = DATA / "bears.nc"
    path = tmp_path / "b.h5"
    _open(source, engine="netcdf4").vhdf5.commit("v0", path=path)
    xr.testing.assert_identical(_open(path, engine="vhdf5"), _open(source, engine="netcdf4"))
    raw = _open(path, engine="vhdf5", decode_cf=False)
    assert raw["bears"].dims == ("i", "j", "bears_len") and raw["bears"].dtype == np.dtype("S1")
    xr.testing.assert_identical(
        raw["bears"].variable, _open(source, engine="netcdf4", decode_cf=False)["bears"].variable
    )
    with h5py.File(path, "r") as f:  # netCDF-4's char: a fixed-length HDF5 string of one byte
        stored = f[f"{VERSIONS}/v0/bears"]
        assert stored.dtype == np.dtype("S1") and stored.id.get_type().get_size() == 1
    got = _group(path, "v0")
    assert got["bears"].values.tolist() == [[b"ind", b"ist", b"ing"], [b"uis", b"hab", b"le"]]
    header = _ncdump_data(path, "-h", "-g", f"{VERSIONS}/v0")
    assert "char bears(i, j, bears_len) ;" in header
    dumped = _ncdump_data(path, "-v", "bears", "-g", f"{VERSIONS}/v0")
    assert _data_section(dumped, "bears") == _data_section(_ncdump_data(source, "-v", "bears"), "bears")


def test_encoded_str_and_string_variables_round_trip(records, tmp_path):
    """``_Encoding`` char arrays decode to ``str``; ``string`` variables stay netCDF-4 strings."""
    path = tmp_path / "r.h5"
    _open(records, engine="netcdf4").vhdf5.commit("v0", path=path)
    for engine in ("netcdf4", "h5netcdf"):
        xr.testing.assert_identical(_open(path, engine="vhdf5"), _open(records, engine=engine))
    xr.testing.assert_identical(
        _open(path, engine="vhdf5", decode_cf=False), _open(records, engine="h5netcdf", decode_cf=False)
    )
    header = _ncdump_data(path, "-h", "-g", f"{VERSIONS}/v0")
    assert "char flag(time, string3) ;" in header and "char label(time, string3) ;" in header
    assert "string note(time) ;" in header and 'label:_Encoding = "utf-8" ;' in header
    got = _group(path, "v0")
    assert got["label"].values.tolist() == ["aé", "b", "c", "d", "e", "f"]
    assert got["flag"].values.tolist() == [b"ok", b"bad", b"ok", b"ok", b"nan", b"ok"]
    dumped = _ncdump_data(path, "-g", f"{VERSIONS}/v0")
    source = _ncdump_data(records)
    for name in ("flag", "label", "note"):
        assert _data_section(dumped, name) == _data_section(source, name)


def test_char_array_is_not_refused_but_fixed_width_overflow_is(tmp_path):
    """``S1`` in encoding asks for a char array (no StringTooLongError); ``S2`` still refuses 3 bytes."""
    ds = xr.Dataset({"c": ("x", np.array([b"abc", b"de"]))})
    ds["c"].encoding = {"dtype": "S1"}
    ds.vhdf5.commit("v0", path=tmp_path / "c.h5")
    assert _open(tmp_path / "c.h5", engine="vhdf5")["c"].values.tolist() == [b"abc", b"de"]
    assert _group(tmp_path / "c.h5", "v0")["c"].values.tolist() == [b"abc", b"de"]
    ds["c"].encoding = {"dtype": "S2"}
    with pytest.raises(StringTooLongError):
        ds.vhdf5.commit("v0", path=tmp_path / "s.h5")


def test_staged_station_name_edit(tmp_path):
    """A new station name of the same length, staged and committed: read back by us and netCDF-C."""
    path = tmp_path / "huc.h5"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", NAMING, UserWarning)  # maxStrlen64 holds 12 characters
        source = _open(DATA / "example_huc_eta.nc", engine="netcdf4")
        source.vhdf5.commit("v0", path=path)
    with xr.open_dataset(path, engine="vhdf5") as opened:
        staged = opened.vhdf5.stage()
        staged["station_name"][1] = b"030101030199"
        staged.vhdf5.commit("v1")
    expected = source.copy(deep=True)
    expected["station_name"][1] = b"030101030199"
    xr.testing.assert_identical(_open(path, engine="vhdf5"), expected)
    xr.testing.assert_identical(_open(path, engine="vhdf5", version="v0"), source)
    got = _group(path, "v1")
    assert got["station_name"].values.tolist() == [b"030101030106", b"030101030199"]
    assert got["et"].equals(source["et"])
    dumped = _ncdump_data(path, "-v", "station_name", "-g", f"{VERSIONS}/v1")
    assert _data_section(dumped, "station_name") == 'station_name = "030101030106", "030101030199" ;'


def test_staged_edits_and_append_of_char_arrays_along_the_record_dimension(records, tmp_path):
    source = _open(records, engine="netcdf4")
    path = tmp_path / "r.h5"
    source.isel(time=slice(0, 4)).vhdf5.commit("v0", path=path)
    with xr.open_dataset(path, engine="vhdf5") as opened:
        staged = opened.vhdf5.stage()
        staged["flag"][1] = b"BAD"
        staged["label"][0] = "zé"
        staged.vhdf5.commit("v1")
        grown = staged.vhdf5.append(source.isel(time=slice(4, 6)), dim="time")
        grown.vhdf5.commit("v2")
    expected = source.copy(deep=True)
    expected["flag"][1] = b"BAD"
    expected["label"][0] = "zé"
    xr.testing.assert_identical(_open(path, engine="vhdf5"), expected)
    xr.testing.assert_identical(_open(path, engine="vhdf5", version="v1"), expected.isel(time=slice(0, 4)))
    xr.testing.assert_identical(_open(path, engine="vhdf5", version="v0"), source.isel(time=slice(0, 4)))
    for version, n in (("v0", 4), ("v1", 4), ("v2", 6)):
        want = (source if version == "v0" else expected).isel(time=slice(0, n))
        got = _group(path, version)
        assert got["flag"].values.tolist() == want["flag"].values.tolist(), version
        assert got["label"].values.tolist() == want["label"].values.tolist(), version
        assert got["note"].values.tolist() == want["note"].values.tolist(), version
    dumped = _ncdump_data(path, "-v", "flag", "-g", f"{VERSIONS}/v2")
    assert _data_section(dumped, "flag") == 'flag = "ok", "BAD", "ok", "ok", "nan", "ok" ;'


def test_staged_char_array_widens_rather_than_truncates(records, tmp_path):
    """numpy would keep b"TOO" of b"TOOLONG" in a |S3 array; the staged char array widens to |S7."""
    path = tmp_path / "r.h5"
    _open(records, engine="netcdf4").vhdf5.commit("v0", path=path)
    with xr.open_dataset(path, engine="vhdf5") as opened:
        staged = opened.vhdf5.stage()
        assert staged["flag"].dtype == np.dtype("S3")
        staged["flag"][1] = b"TOOLONG"
        assert staged["flag"].dtype == np.dtype("S7") and staged["flag"].values[1] == b"TOOLONG"
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", NAMING, UserWarning)  # string3 becomes string7
            staged.vhdf5.commit("v1")
    assert _open(path, engine="vhdf5")["flag"].values[1] == b"TOOLONG"
    assert _group(path, "v1")["flag"].values[1] == b"TOOLONG"
    assert _open(path, engine="vhdf5", version="v0")["flag"].values[1] == b"bad"


def test_dask_char_array_commits(records, tmp_path):
    """A lazily opened (dask) char array is streamed as the S1 characters."""
    pytest.importorskip("dask")
    path = tmp_path / "r.h5"
    with xr.open_dataset(records, engine="netcdf4", chunks={}) as lazy:
        lazy.vhdf5.commit("v0", path=path)
    xr.testing.assert_identical(_open(path, engine="vhdf5"), _open(records, engine="netcdf4"))
    with h5py.File(path, "r") as f:
        assert f[f"{VERSIONS}/v0/flag"].dtype == np.dtype("S1") and f[f"{VERSIONS}/v0/flag"].shape == (6, 3)
    assert _group(path, "v0")["flag"].values.tolist() == [b"ok", b"bad", b"ok", b"ok", b"nan", b"ok"]
