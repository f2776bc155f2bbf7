"""``ds.vhdf5.commit(name, path=..., append_dim=...)``: the daily append in one call (issue 19)."""

from __future__ import annotations

import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (the accessor)
from xarray_vhdf5.errors import IncompatibleDataError, StaleVersionError, VHDF5Error


def _day(t: int) -> xr.Dataset:
    rng = np.random.default_rng(t)
    return xr.Dataset(
        {"sst": (("time", "lat", "lon"), rng.normal(20, 2, (1, 6, 8)).astype("f4"))},
        coords={
            "time": pd.date_range("2024-01-01", periods=1) + pd.Timedelta(days=t),
            "lat": np.arange(6.0),
            "lon": np.arange(8.0),
        },
    )


def test_days_appended_in_one_call_equal_their_concatenation(tmp_path):
    path = tmp_path / "sst.h5"
    days = [_day(t) for t in range(5)]
    for t, day in enumerate(days):  # the first call creates the file
        assert day.vhdf5.commit(f"d{t}", path=path, append_dim="time") == f"d{t}"
    for t in range(5):
        with xr.open_dataset(path, engine="vhdf5", version=f"d{t}") as got:
            xr.testing.assert_identical(got.load(), xr.concat(days[: t + 1], dim="time"))


def test_only_the_new_day_is_stored(tmp_path):
    path = tmp_path / "sst.h5"
    first = _day(0)
    first["sst"].encoding["chunks"] = (1, 6, 8)
    first.vhdf5.commit("d0", path=path)
    _day(1).vhdf5.commit("d1", path=path, append_dim="time")
    with h5py.File(path, "r") as f:
        assert f["_version_data/sst/raw_data"].shape[0] == 2  # one chunk a day, nothing rewritten


def test_an_empty_file_gets_its_first_version(tmp_path):
    path = tmp_path / "empty.h5"
    h5py.File(path, "w").close()
    _day(0).vhdf5.commit("d0", path=path, append_dim="time")
    with xr.open_dataset(path, engine="vhdf5") as got:
        xr.testing.assert_identical(got.load(), _day(0))


def test_the_append_checks_hold(tmp_path):
    path = tmp_path / "sst.h5"
    _day(5).vhdf5.commit("d5", path=path, append_dim="time")
    _day(6).vhdf5.commit("d6", path=path, append_dim="time")
    with pytest.raises(IncompatibleDataError):  # labels going backwards
        _day(2).vhdf5.commit("d2", path=path, append_dim="time")
    _day(2).vhdf5.commit("d2", path=path, append_dim="time", allow_unsorted=True)
    other = _day(7).rename(sst="other")
    with pytest.raises(VHDF5Error):  # a variable the file does not have
        other.vhdf5.commit("x", path=path, append_dim="time")
    with pytest.raises(ValueError, match="not a dimension"):
        _day(8).vhdf5.commit("x", path=path, append_dim="depth")
    with pytest.raises(ValueError, match="prev_version"):
        _day(8).vhdf5.commit("x", path=path, append_dim="time", prev_version="d5")
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert got.sizes["time"] == 3  # the refused appends wrote nothing
        assert got.encoding["vhdf5_version"] == "d2"


def test_a_stale_append_is_refused_or_rebased(tmp_path, monkeypatch):
    """Another writer commits between the open and the commit: StaleVersionError, or a merge with rebase.

    The general path (open, stage, append, commit); the one-open path has no
    such window (``test_append_fastpath``) and is switched off here.
    """
    from xarray_vhdf5.xr import _accessor as accessor
    from xarray_vhdf5.xr import _append

    monkeypatch.setattr(_append, "commit_appended", lambda *args, **kwargs: None)

    path = tmp_path / "sst.h5"
    _day(0).vhdf5.commit("d0", path=path)
    real_open = xr.open_dataset
    state = {"done": False, "n": 0}

    def racing_open(*args, **kwargs):
        ds = real_open(*args, **kwargs)
        if not state["done"]:
            state["done"] = True
            with real_open(path, engine="vhdf5") as cur:
                fixed = cur.load()
            fixed["sst"][0, 0, 0] = -float(state["n"] + 1)
            state["n"] += 1
            fixed.vhdf5.commit(f"qc{state['n']}", path=path)
        return ds

    monkeypatch.setattr(accessor.xr, "open_dataset", racing_open)
    with pytest.raises(StaleVersionError):
        _day(1).vhdf5.commit("d1", path=path, append_dim="time")
    state["done"] = False
    _day(1).vhdf5.commit("d1b", path=path, append_dim="time", rebase=True)
    monkeypatch.undo()
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert got.sizes["time"] == 2
        assert got["sst"].values[0, 0, 0] == -2.0  # the other writer's (second) edit kept
