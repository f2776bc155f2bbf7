"""Dimension scales are part of the commit: a failure while attaching them commits nothing (issue 23).

The xarray writer (``xr/_writer.py``), the staged commit (``xr/_stage.py``) and the
one-open append (``xr/_append.py``) attach netCDF-4 dimension scales through
``stage_version(..., finish=...)`` (``xr._writer.staged_version``),
which runs before the version is marked ``committed=True``. An exception
raised there, or the process killed there, must leave no version behind
(let alone one without its scales), the file readable, and the previous
version as it was, both through the engine and through netCDF's view.
"""

from __future__ import annotations

import inspect
import signal
import subprocess
import sys

import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (the accessor)
from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._backend.layout import VERSION_DATA, VERSIONS
from xarray_vhdf5._versions.check import check_file
from xarray_vhdf5.xr import _dimscales, _writer


def _day(t: int) -> xr.Dataset:
    rng = np.random.default_rng(t)
    ds = xr.Dataset(
        {"sst": (("time", "lat", "lon"), rng.normal(20, 2, (1, 6, 8)).astype("f4"))},
        coords={
            "time": pd.date_range("2024-01-01", periods=1) + pd.Timedelta(days=t),
            "lat": np.arange(6.0),
            "lon": np.arange(8.0),
        },
    )
    ds["sst"].encoding["chunks"] = (1, 6, 8)
    return ds


class ScalesFailed(RuntimeError):
    pass


def _attach_then_raise(group: h5py.Group) -> int:
    """The real attachment, whole, then a failure: the worst case for leftovers."""
    _dimscales.attach_dimension_scales(group)
    raise ScalesFailed("interrupted after the scales were attached")


def _raise_halfway(group: h5py.Group) -> int:
    """A failure after the first group's scales are set but before any is attached to a variable."""
    real = h5py.h5ds.attach_scale

    def fail(*args):
        raise ScalesFailed("interrupted while attaching scales")

    h5py.h5ds.attach_scale = fail
    try:
        return _dimscales.attach_dimension_scales(group)
    finally:
        h5py.h5ds.attach_scale = real


def _snapshot(path) -> tuple[list[str], str, dict]:
    with h5py.File(path, "r") as f:
        vf = VersionedHDF5File(f)
        versions, current = vf.versions, vf.current_version
        groups = sorted(f[f"{VERSION_DATA}/{VERSIONS}"])
    with xr.open_dataset(path, engine="vhdf5") as ds:
        values = {name: ds[name].values.copy() for name in ds.variables}
    return [*versions, "|", *groups], current, values


def _assert_unchanged(path, before) -> None:
    versions, current, values = before
    assert _snapshot(path)[:2] == (versions, current)  # no version and no half-made group
    with xr.open_dataset(path, engine="vhdf5") as ds:
        assert ds.encoding["vhdf5_version"] == current
        for name, expected in values.items():
            np.testing.assert_array_equal(ds[name].values, expected)
    # netCDF's view of the previous version still has its scales
    with xr.open_dataset(path, engine="h5netcdf", group=f"/{VERSION_DATA}/{VERSIONS}/{current}") as nc:
        assert nc.sizes["time"] == len(values["time"])
        np.testing.assert_array_equal(nc["sst"].values, values["sst"])
    report = check_file(path)
    assert not report.errors, report.errors


@pytest.mark.parametrize("failure", [_attach_then_raise, _raise_halfway])
def test_a_failed_attachment_in_a_staged_commit_commits_nothing(tmp_path, monkeypatch, failure):
    path = tmp_path / "staged.h5"
    _day(0).vhdf5.commit("d0", path=path)
    _day(1).vhdf5.commit("d1", path=path, append_dim="time")
    before = _snapshot(path)
    monkeypatch.setattr(_writer, "attach_dimension_scales", failure)  # every commit from xarray stages through it
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        staged = staged.vhdf5.append(_day(2), dim="time")
        with pytest.raises(ScalesFailed):
            staged.vhdf5.commit("d2")
        staged.close()
    _assert_unchanged(path, before)
    with pytest.raises(ScalesFailed):  # the one-open append (xr._append)
        _day(2).vhdf5.commit("d2", path=path, append_dim="time")
    _assert_unchanged(path, before)
    monkeypatch.undo()
    with xr.open_dataset(path, engine="vhdf5") as ds:  # the next commit works, scales and all
        staged = ds.vhdf5.stage().vhdf5.append(_day(2), dim="time")
        staged.vhdf5.commit("d2")
        staged.close()
    with xr.open_dataset(path, engine="h5netcdf", group=f"/{VERSION_DATA}/{VERSIONS}/d2") as nc:
        assert nc.sizes["time"] == 3


@pytest.mark.parametrize("failure", [_attach_then_raise, _raise_halfway])
def test_a_failed_attachment_in_a_written_commit_commits_nothing(tmp_path, monkeypatch, failure):
    path = tmp_path / "written.h5"
    _day(0).vhdf5.commit("d0", path=path)
    before = _snapshot(path)
    monkeypatch.setattr(_writer, "attach_dimension_scales", failure)
    with pytest.raises(ScalesFailed):  # a whole Dataset written (commit_dataset)
        xr.concat([_day(0), _day(1)], dim="time").vhdf5.commit("both", path=path)
    with pytest.raises(ScalesFailed):  # a DataTree (commit_datatree)
        xr.DataTree.from_dict(
            {"/": _day(0).drop_vars(["sst", "time"]), "/b": _day(1).drop_vars(["lat", "lon"])}
        ).vhdf5.commit("tree", path=path)
    _assert_unchanged(path, before)


#: Child process (a script: a spawned child could not import this test module from an
#: installed package's test run): a staged append whose commit is killed inside the scales'
#: attachment, after what it wrote was flushed (the worst case a kill can leave).
_KILLED_COMMIT = """
import os, signal, sys
import numpy as np, pandas as pd, xarray as xr
import xarray_vhdf5
from xarray_vhdf5.xr import _dimscales, _writer

{day}

def kill(group):
    _dimscales.attach_dimension_scales(group)  # written, not yet marked committed
    group.file.flush()
    os.kill(os.getpid(), signal.SIGKILL)

_writer.attach_dimension_scales = kill
with xr.open_dataset(sys.argv[1], engine="vhdf5") as ds:
    staged = ds.vhdf5.stage().vhdf5.append(_day(2), dim="time")
    staged.vhdf5.commit("d2")
"""


def test_a_kill_inside_the_attachment_leaves_no_version(tmp_path):
    path = tmp_path / "killed.h5"
    _day(0).vhdf5.commit("d0", path=path)
    _day(1).vhdf5.commit("d1", path=path, append_dim="time")
    before = _snapshot(path)
    code = _KILLED_COMMIT.format(day=inspect.getsource(_day))
    child = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    with xr.open_dataset(path, engine="vhdf5") as ds:  # through the engine: the journal is rolled back
        assert ds.encoding["vhdf5_version"] == "d1"
    _assert_unchanged(path, before)
    _day(2).vhdf5.commit("d2", path=path, append_dim="time")
    with xr.open_dataset(path, engine="h5netcdf", group=f"/{VERSION_DATA}/{VERSIONS}/d2") as nc:
        assert nc.sizes["time"] == 3
