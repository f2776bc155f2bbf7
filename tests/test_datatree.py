"""DataTree: open_datatree / open_groups over a version's groups, commit_datatree, the accessor."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5.xr import commit_datatree


def _tree(scale: float = 1.0) -> xr.DataTree:
    rng = np.random.default_rng(7)
    return xr.DataTree.from_dict(
        {
            "/": xr.Dataset(
                coords={"time": ("time", np.datetime64("2020-01-01", "ns") + np.arange(5) * np.timedelta64(1, "D"))},
                attrs={"title": "model run"},
            ),
            "/ocean": xr.Dataset(
                {"sst": (("time", "cell"), scale * rng.normal(size=(5, 40)).astype("f4"), {"units": "degC"})},
                coords={"cell": ("cell", np.arange(40))},
                attrs={"realm": "ocean"},
            ),
            "/ocean/bottom": xr.Dataset({"temp": (("time", "cell"), rng.normal(size=(5, 40)))}),
            "/atmosphere": xr.Dataset({"tas": ("time", rng.normal(size=5)), "co2": ((), 415.0)}),
        }
    )


def _rows(path) -> dict[str, int]:
    with h5py.File(path) as f:
        out = {}
        f["_version_data"].visititems(
            lambda p, o: out.__setitem__(p, int(o.attrs["largest_index"])) if p.endswith("hash_table") else None
        )
        return out


@pytest.fixture
def committed(tmp_path):
    path = tmp_path / "tree.h5"
    tree = _tree()
    assert tree.vhdf5.commit("v1", path=path, message="first run") == "v1"
    return path, tree


def test_open_datatree_round_trip(committed):
    path, tree = committed
    with xr.open_datatree(path, engine="vhdf5", version="v1") as got:
        xr.testing.assert_identical(got, tree)
        assert got["ocean/bottom"].encoding["vhdf5_group"] == "/ocean/bottom"
        assert got.encoding["vhdf5_version"] == "v1"
        # inherited coordinates are stored once, in the parent's group
        with h5py.File(path) as f:
            assert "time" in f["_version_data/versions/v1"] and "time" not in f["_version_data/versions/v1/ocean"]


def test_open_groups_lists_every_group(committed):
    path, tree = committed
    groups = xr.open_groups(path, engine="vhdf5")
    try:
        assert list(groups) == ["/", "/ocean", "/ocean/bottom", "/atmosphere"]
        xr.testing.assert_identical(groups["/ocean"], tree["ocean"].to_dataset(inherit=False))
        assert "time" not in groups["/ocean"].coords  # not inherited in the flat view
    finally:
        for ds in groups.values():
            ds.close()


def test_open_datatree_from_a_group_and_lazily(committed):
    path, tree = committed
    with xr.open_datatree(path, engine="vhdf5", group="ocean") as got:
        assert set(got.children) == {"bottom"}
        xr.testing.assert_identical(
            got["bottom"].to_dataset(inherit=False), tree["ocean/bottom"].to_dataset(inherit=False)
        )
        assert not got["sst"].variable._in_memory
    with xr.open_datatree(path, engine="vhdf5", chunks={}) as got:
        assert got["ocean/sst"].chunks is not None
        xr.testing.assert_identical(got.compute(), tree)


def test_open_dataset_group_still_works(committed):
    path, tree = committed
    with xr.open_dataset(path, engine="vhdf5", group="ocean/bottom") as got:
        xr.testing.assert_identical(got, tree["ocean/bottom"].to_dataset(inherit=False))


def test_second_commit_dedups_and_replaces_the_tree(committed):
    path, tree = committed
    before = _rows(path)
    same = _tree()
    commit_datatree(same, path, "v2")
    assert _rows(path) == before  # nothing new
    edited = xr.DataTree.from_dict(
        {k: v.to_dataset(inherit=False) for k, v in _tree().subtree_with_keys if k != "atmosphere"}
    )
    edited["ocean/sst"][0, 0] = 100.0
    edited.vhdf5.commit("v3", path=path)
    after = _rows(path)
    assert after["ocean/sst/hash_table"] == before["ocean/sst/hash_table"] + 1
    with xr.open_datatree(path, engine="vhdf5") as got:
        assert "atmosphere" not in got.children
        xr.testing.assert_identical(got, edited)
    with xr.open_datatree(path, engine="vhdf5", version="v1") as old:
        xr.testing.assert_identical(old, tree)


def test_commit_datatree_under_a_group_keeps_other_groups(committed):
    path, tree = committed
    sub = xr.DataTree.from_dict({"/": xr.Dataset({"h": ("k", np.arange(3))}), "/deep": xr.Dataset({"g": 1.5})})
    commit_datatree(sub, path, "v2", group="land")
    with xr.open_datatree(path, engine="vhdf5") as got:
        assert set(got.children) == {"ocean", "atmosphere", "land"}
        xr.testing.assert_identical(got["land"].to_dataset(inherit=False), sub.to_dataset())
        xr.testing.assert_identical(got["land/deep"].to_dataset(inherit=False), sub["deep"].to_dataset())
        xr.testing.assert_identical(got["ocean"], tree["ocean"])


def test_datatree_accessor_errors(committed, tmp_path):
    path, tree = committed
    with pytest.raises(TypeError, match="needs path="):
        tree.vhdf5.commit("x")
    with pytest.raises(xv.VersionExistsError):
        tree.vhdf5.commit("v1", path=path)
    with pytest.raises(xv.VersionNotFoundError):
        xr.open_datatree(path, engine="vhdf5", version="nope")
    with pytest.raises(KeyError, match="no group"):
        xr.open_datatree(path, engine="vhdf5", group="sea")
