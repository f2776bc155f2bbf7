"""netCDF-4 dimension scales are written inside their version's commit, before ``committed=True``.

A commit is atomic as a whole (``docs/format.md``): a writer that dies after
marking the version committed must not leave it without its dimension scales.
The checks look at the version group at the moment ``committed`` turns True.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (the accessor)
import xarray_vhdf5._versions.commit as commit_module
from xarray_vhdf5._backend.layout import version_path


def _scales(group: h5py.Group) -> dict[str, tuple[bool, str | None]]:
    """``{dataset: (has DIMENSION_LIST, its CLASS)}`` for the datasets directly in ``group``."""
    out = {}
    for key, item in group.items():
        if isinstance(item, h5py.Dataset):
            cls = item.attrs.get("CLASS")
            out[key] = ("DIMENSION_LIST" in item.attrs, cls.decode() if isinstance(cls, bytes) else cls)
    return out


@pytest.fixture
def at_committed(monkeypatch) -> list[dict]:
    """The scales of each version group as ``committed=True`` is written into it."""
    seen: list[dict] = []
    write_attr = commit_module.write_attr

    def watching(obj_id, name, value):
        if name == "committed" and value is True:
            seen.append(_scales(h5py.Group(obj_id)))
        return write_attr(obj_id, name, value)

    monkeypatch.setattr(commit_module, "write_attr", watching)
    return seen


def _dataset() -> xr.Dataset:
    # "time" has a coordinate variable (its own scale); "x" has none (a phony scale)
    return xr.Dataset(
        {"t": (("time", "x"), np.arange(6.0).reshape(3, 2))},
        coords={"time": np.array([10, 20, 30])},
    )


def _stored(path, version: str) -> dict:
    with h5py.File(path, "r") as f:
        return _scales(f[version_path(version)])


def test_writer_commit_has_its_scales_when_marked_committed(tmp_path, at_committed):
    path = tmp_path / "a.h5"
    _dataset().vhdf5.commit("v1", path=path)
    assert len(at_committed) == 1
    got = at_committed[0]
    assert got["t"] == (True, None)  # attached to its scales
    assert got["time"] == (False, "DIMENSION_SCALE")
    assert got["x"] == (False, "DIMENSION_SCALE")  # the phony scale
    assert got == _stored(path, "v1")  # nothing added after


def test_staged_commit_has_its_scales_when_marked_committed(tmp_path, at_committed):
    path = tmp_path / "a.h5"
    _dataset().vhdf5.commit("v1", path=path)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        staged["t"][0, 0] = -1.0
        staged["u"] = staged["t"] * 2
        staged.vhdf5.commit("v2")
    assert len(at_committed) == 2
    got = at_committed[1]
    assert got["t"] == got["u"] == (True, None)
    assert got["time"] == got["x"] == (False, "DIMENSION_SCALE")
    assert got == _stored(path, "v2")
