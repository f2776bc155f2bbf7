"""Round trips of real CF files (``tests/data/cf/``, sources in its README): ingest, edit, append, read back.

For each file: its first records are committed as ``v0`` (``ds.vhdf5.commit(path=...)``),
a few points are edited through ``ds.vhdf5.stage()`` and committed as ``v1``, and the
remaining records (or, for a file of one record, a made-up next record) are appended
along the record dimension with ``staged.vhdf5.append`` as ``v2``. Every version is then
read back:

- through ``engine="vhdf5"``, decoded and with ``decode_cf=False``. The oracle is the
  expected Dataset written by xarray's own netCDF-4 writer (``to_netcdf(engine="h5netcdf")``)
  and read back: it stores what xarray's writers store (a ``_FillValue`` of NaN on floats
  that had none, time units as xarray encodes them, packed values rounded as packing
  rounds). ``v0`` is also compared with the source file itself (decoded: identical; not
  decoded: the same stored numbers);
- as netCDF-4 groups (``/_version_data/versions/<v>``) by h5netcdf, netCDF4-python and
  ``ncdump`` (netCDF-C), modulo the attributes the format adds (``docs/format.md``).

The histories are built once per file and worker (``_history``); the whole module takes
a few seconds.
"""

from __future__ import annotations

import datetime as dt
import pickle
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (registers the accessor)
from xarray_vhdf5._backend.names import SCALAR_DIM
from xarray_vhdf5.xr._dimscales import netcdf_only_attrs

DATA = Path(__file__).parent / "data" / "cf"
VERSIONS = "/_version_data/versions"


@dataclass(frozen=True)
class Case:
    """A real file and the history made from it."""

    name: str
    engine: str  # the engine that reads the source (scipy: netCDF-3, h5netcdf: netCDF-4)
    record: str | None  # the record (time-like) dimension, appended along
    edits: tuple  # (variable, isel indexers, new decoded value)
    tail: int = 0  # records appended as v2 (0: a made-up next record)
    step: dt.timedelta | None = None  # spacing of the made-up record
    xfail: dict = field(default_factory=dict)  # test kind ("*": all) -> xfail reason


CASES = [
    # regular lat/lon grid, 4-D, packed int16 (scale_factor/add_offset, _FillValue + missing_value)
    Case(
        "sub.nc",
        "scipy",
        "time",
        (
            ("u", {"time": 0, "level": 1, "latitude": slice(2, 4), "longitude": 3}, 5.0),
            ("v", {"time": 6, "level": 0, "latitude": 0, "longitude": slice(0, 9)}, -2.25),
        ),
        tail=3,
    ),
    # station time series (station, time): _FillValue, auxiliary coordinates lat/lon/alt/num
    Case("timeseries.nc", "scipy", "time", (("pr", {"station": [1, 4], "time": 2}, 1.5e-5),), tail=5),
    # stations with char names (S1 x maxStrlen64), missing_value without _FillValue (int32 and floats)
    Case(
        "example_huc_eta.nc",
        "scipy",
        "time",
        (("et", {"station": 0, "time": slice(3, 6)}, 42), ("et", {"station": 1, "time": 0}, -999)),
        tail=5,
    ),
    # 2-D lat/lon (curvilinear ny x nx), missing_value without _FillValue, one record (unlimited)
    Case(
        "c201923412.out1_4.nc",
        "scipy",
        "time",
        (("wvh", {"time": 0, "ny": slice(40, 42), "nx": 50}, 1.5),),
        step=dt.timedelta(hours=3),
    ),
    # netCDF-4 classic (HDF5, deflate), Lambert conformal grid with a scalar grid_mapping variable
    Case(
        "lcc_km.nc",
        "h5netcdf",
        "time",
        (("prcp", {"time": 0, "y": 300, "x": slice(300, 303)}, 12.5),),
        step=dt.timedelta(days=1),
    ),
    # a daily record dimension named `day` (standard_name time), not unlimited, not named time
    Case(
        "metdata_day_subset.nc",
        "scipy",
        "day",
        (("precipitation_amount", {"day": 1, "lat": 3, "lon": slice(0, 4)}, 99.0),),
        tail=2,
    ),
    # char arrays decoded to fixed-width bytes (|S4), mixed int16/int32/float/double, no record dimension
    Case("bears.nc", "scipy", None, (("cross", {"i": 0, "j": 1}, -1.0), ("shot", {"i": 1, "j": 2}, 77))),
]


def _open_source(case: Case, **kwargs) -> xr.Dataset:
    with xr.open_dataset(DATA / case.name, engine=case.engine, **kwargs) as ds:
        return ds.load()


def _split(case: Case, src: xr.Dataset) -> tuple[xr.Dataset, xr.Dataset | None]:
    """The first version's records and the records appended later (None without a record dimension)."""
    if case.record is None:
        return src, None
    n = src.sizes[case.record]
    if case.tail:
        return src.isel({case.record: slice(0, n - case.tail)}), src.isel({case.record: slice(n - case.tail, n)})
    # one record: append a made-up next one (the record coordinate one step on, floats + 0.5)
    tail = src.isel({case.record: [n - 1]}).copy(deep=True)
    tail = tail.assign_coords({case.record: tail[case.record] + np.timedelta64(case.step)})
    for name, var in tail.data_vars.items():
        if case.record in var.dims and var.dtype.kind == "f":
            tail[name] = var + 0.5
            tail[name].attrs, tail[name].encoding = var.attrs, var.encoding
    return src, tail


def _edit(ds: xr.Dataset, edits) -> None:
    for name, index, value in edits:
        ds[name][index] = value


@dataclass
class History:
    path: Path
    expected: dict[str, xr.Dataset]  # version -> the Dataset committed (decoded, with the source's encoding)
    tmp: Path
    error: BaseException | None = None  # what stopped the history before its last version
    netcdf4: dict | None = None  # version -> Dataset read by netCDF4-python (_read_by_netcdf4)

    def first(self) -> xr.Dataset:
        """The Dataset committed as v0 (or the error that stopped its commit)."""
        if "v0" not in self.expected:
            raise self.error
        return self.expected["v0"]

    def versions(self):
        """The versions committed, then the error that stopped the history (the test fails on it)."""
        yield from self.expected
        if self.error is not None:
            raise self.error


_HISTORIES: dict[str, History] = {}


def _history(case: Case, tmp_path_factory) -> History:
    """Commit v0 (first records), v1 (edits through stage) and v2 (append) of ``case``; cached per worker.

    A step that raises ends the history there; tests of the later versions fail on its error
    (``History.versions``), those of the earlier ones still run.
    """
    if case.name in _HISTORIES:
        return _HISTORIES[case.name]
    tmp = tmp_path_factory.mktemp(case.name.replace(".", "_"))
    path = tmp / "history.h5"
    src = _open_source(case)
    base, tail = _split(case, src)
    history = _HISTORIES[case.name] = History(path, {}, tmp)
    with warnings.catch_warnings():
        # as xarray's writers (the oracle): a char array decoded shorter than its string dimension
        warnings.filterwarnings("ignore", "String dimension naming mismatch", UserWarning)
        _build(case, history, path, base, tail)
    return history


def _build(case: Case, history: History, path: Path, base: xr.Dataset, tail: xr.Dataset | None) -> None:
    try:
        assert base.vhdf5.commit("v0", path=path) == "v0"
        history.expected["v0"] = base
        with xr.open_dataset(path, engine="vhdf5") as opened:
            staged = opened.vhdf5.stage()
            _edit(staged, case.edits)
            assert staged.vhdf5.commit("v1", message="edits") == "v1"
        edited = base.copy(deep=True)
        _edit(edited, case.edits)
        history.expected["v1"] = edited

        if tail is not None:
            with xr.open_dataset(path, engine="vhdf5") as opened:
                grown = opened.vhdf5.stage().vhdf5.append(tail, dim=case.record)
                assert grown.vhdf5.commit("v2", message="append") == "v2"
            history.expected["v2"] = xr.concat(
                [edited, tail],
                dim=case.record,
                data_vars="minimal",
                coords="minimal",
                compat="override",
                join="exact",
            )
    except Exception as err:  # noqa: BLE001  (kept: the tests of the versions after it fail on it)
        history.error = err


def _written_by_xarray(history: History, version: str, **kwargs) -> xr.Dataset:
    """The expected Dataset of ``version`` written by xarray's netCDF-4 writer and read back (the oracle)."""
    path = history.tmp / f"oracle-{version}.nc"
    if not path.exists():
        with warnings.catch_warnings():
            # netCDF char arrays read with a shorter string than their dimension: xarray renames it
            warnings.filterwarnings("ignore", "String dimension naming mismatch", UserWarning)
            history.expected[version].to_netcdf(path, engine="h5netcdf")
    with xr.open_dataset(path, engine="h5netcdf", **kwargs) as ds:
        return ds.load()


def _vhdf5(history: History, version: str, **kwargs) -> xr.Dataset:
    with xr.open_dataset(history.path, engine="vhdf5", version=version, **kwargs) as ds:
        return ds.load()


def _read_by_netcdf4(history: History) -> dict[str, xr.Dataset]:
    """Every version group read by netCDF4-python, in one child process (cached)."""
    if history.netcdf4 is None:
        out = history.tmp / "netcdf4.pickle"
        script = (
            "import pickle, sys, xarray as xr\n"
            "got = {}\n"
            "for v in sys.argv[3:]:\n"
            f"    with xr.open_dataset(sys.argv[1], engine='netcdf4', group='{VERSIONS}/' + v) as ds:\n"
            "        got[v] = ds.load()\n"
            "pickle.dump(got, open(sys.argv[2], 'wb'))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, str(history.path), str(out), *history.expected],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, f"netCDF4-python: exit {done.returncode}, {done.stderr[-800:]}"
        with open(out, "rb") as f:
            history.netcdf4 = pickle.load(f)
    return history.netcdf4


def _group(history: History, version: str, engine: str) -> xr.Dataset:
    """Version group ``version`` read by a netCDF engine, without the attributes the format adds.

    netCDF4-python (netCDF-C) reads in a child process: it can crash the process (a
    segmentation fault reading fixed-length strings), which must fail one test, not the run.
    """
    group = f"{VERSIONS}/{version}"
    if engine == "netcdf4":
        ds = _read_by_netcdf4(history)[version]
    else:
        with xr.open_dataset(history.path, engine=engine, group=group) as ds:
            ds = ds.load()
    hidden = netcdf_only_attrs()
    if SCALAR_DIM in ds.dims:
        ds = ds.squeeze(SCALAR_DIM, drop=True)
    for var in ds.variables.values():
        for key in hidden["variable"]:
            var.attrs.pop(key, None)
    for key in hidden["group"]:
        ds.attrs.pop(key, None)
    return ds


def _params(test: str):
    """The cases, each marked for ``test``: a strict xfail for a known defect (``Case.xfail``)."""
    out = []
    for case in CASES:
        marks = []
        reason = case.xfail.get(test, case.xfail.get("*"))
        if reason is not None:
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


def test_every_file_is_small_and_documented():
    readme = (DATA / "README.md").read_text()
    files = sorted(p.name for p in DATA.glob("*.nc"))
    assert files == sorted(c.name for c in CASES)
    for name in files:
        assert f"`{name}`" in readme, f"{name} is not described in tests/data/cf/README.md"
        assert (DATA / name).stat().st_size < 200_000
    assert sum((DATA / n).stat().st_size for n in files) < 400_000


@pytest.mark.parametrize("case", _params("vhdf5"))
def test_first_version_is_the_source(case, tmp_path_factory):
    """v0 read back decoded is the source file's records as xarray decodes them, attributes included."""
    history = _history(case, tmp_path_factory)
    xr.testing.assert_identical(_vhdf5(history, "v0"), history.first())


@pytest.mark.parametrize("case", _params("vhdf5"))
def test_first_version_stores_the_source_numbers(case, tmp_path_factory):
    """v0 with decode_cf=False holds the numbers stored in the source (packed ints stay packed)."""
    history = _history(case, tmp_path_factory)
    raw = _open_source(case, decode_cf=False)
    if case.record is not None:
        raw = raw.isel({case.record: slice(0, history.first().sizes[case.record])})
    got = _vhdf5(history, "v0", decode_cf=False)
    for name, var in raw.variables.items():
        if var.dtype.kind == "S" and var.ndim and var.dims[-1] not in history.first().dims:
            continue  # a char array: its string dimension is decoded away (the decoded test covers it)
        assert got[name].dtype == var.dtype, name
        xr.testing.assert_equal(got[name].variable, var)


@pytest.mark.parametrize("case", _params("vhdf5"))
def test_every_version_reads_back_decoded(case, tmp_path_factory):
    history = _history(case, tmp_path_factory)
    for version in history.versions():
        xr.testing.assert_identical(_vhdf5(history, version), _written_by_xarray(history, version))


def _without_added_nan_fill(ds: xr.Dataset, source: xr.Dataset) -> xr.Dataset:
    """``ds`` without the ``_FillValue`` of NaN xarray's writers add to floats the source gave none."""
    ds = ds.copy()
    for name, var in ds.variables.items():
        fill = var.attrs.get("_FillValue")
        if name in source.variables and "_FillValue" not in source[name].attrs and fill is not None and np.isnan(fill):
            del var.attrs["_FillValue"]
    return ds


@pytest.mark.parametrize("case", _params("raw"))
def test_every_version_reads_back_encoded(case, tmp_path_factory):
    """decode_cf=False: the stored variables and attributes are the ones xarray's writer stores.

    Either way for a float variable without ``_FillValue`` in the source: xarray's writers
    add a ``_FillValue`` of NaN, keeping the source's attributes as they were is as good.
    """
    history = _history(case, tmp_path_factory)
    source = _open_source(case, decode_cf=False)
    for version in history.versions():
        xr.testing.assert_identical(
            _without_added_nan_fill(_vhdf5(history, version, decode_cf=False), source),
            _without_added_nan_fill(_written_by_xarray(history, version, decode_cf=False), source),
        )


@pytest.mark.parametrize("case", _params("vhdf5"))
def test_edits_and_appends_change_only_what_they_touch(case, tmp_path_factory):
    """The edited points differ from v0, nothing else does; the appended records are the tail's."""
    history = _history(case, tmp_path_factory)
    list(history.versions())  # every version was committed
    v0, v1 = _vhdf5(history, "v0"), _vhdf5(history, "v1")
    for name, index, _ in case.edits:
        assert not v1[name][index].equals(v0[name][index]), f"the edit of {name} is not in v1"
    changed = {name for name in v0.variables if not v0[name].equals(v1[name])}
    assert changed == {name for name, _, _ in case.edits}
    if "v2" in history.expected:
        v2 = _vhdf5(history, "v2")
        n = v1.sizes[case.record]
        xr.testing.assert_identical(v2.isel({case.record: slice(0, n)}), v1)
        assert v2.sizes[case.record] > n


@pytest.mark.parametrize("case", _params("h5netcdf"))
def test_version_groups_read_by_h5netcdf(case, tmp_path_factory):
    history = _history(case, tmp_path_factory)
    for version in history.versions():
        xr.testing.assert_identical(_group(history, version, "h5netcdf"), _written_by_xarray(history, version))


@pytest.mark.parametrize("case", _params("netcdf4"))
def test_version_groups_read_by_netcdf4(case, tmp_path_factory):
    pytest.importorskip("netCDF4")
    history = _history(case, tmp_path_factory)
    for version in history.versions():
        xr.testing.assert_identical(_group(history, version, "netcdf4"), _written_by_xarray(history, version))


@pytest.mark.parametrize("case", _params("ncdump"))
def test_version_groups_dump_with_ncdump(case, tmp_path_factory):
    """``ncdump -g <version group>`` (netCDF-C) exits 0 and prints every variable of every version."""
    ncdump = shutil.which("ncdump")
    if ncdump is None:
        pytest.skip("ncdump (Debian's netcdf-bin) not installed")
    history = _history(case, tmp_path_factory)
    for version in history.versions():
        ds = history.expected[version]
        done = subprocess.run(
            [ncdump, "-h", "-g", f"{VERSIONS}/{version}", str(history.path)], capture_output=True, text=True
        )
        assert done.returncode == 0, (version, done.returncode, done.stderr)
        for name in ds.variables:
            assert f" {name}(" in done.stdout or f" {name} ;" in done.stdout, (version, name)
