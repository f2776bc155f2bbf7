"""The per-commit fast paths of staged commits give the same versions as the slow paths.

- ``_rebase``: after a commit, staged arrays take the chunk map from the
  commit's report instead of reading the new virtual dataset back;
- ``_fill_group``: netCDF-4 phony scales are carried over unchanged and
  reused by ``attach_dimension_scales`` instead of being recreated;
- ``attach_dimension_scales`` on h5py's low-level ids.

Each is checked against what the file holds (mapping read back from the
virtual dataset) or against the same Dataset committed by the plain writer
(``ds.vhdf5.commit(path=...)``, which builds every scale from scratch), and
with h5netcdf reading the version group.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr

from xarray_vhdf5._backend.hashtable import hash_table_id, table_extends
from xarray_vhdf5._backend.layout import version_path
from xarray_vhdf5._versions.edit import stage_committed_dataset
from xarray_vhdf5.xr._staged_array import StagedVariableArray

CHUNKS = (4, 3, 5)
T1, T2 = np.datetime64("2026-01-01T00:00"), np.datetime64("2026-01-02T00:00")


def _step(t: int, n: int = 1, fill: bool = False) -> xr.Dataset:
    rng = np.random.default_rng(t)
    values = rng.standard_normal((n, 6, 10)).astype("f4")
    if fill:
        values[:] = np.nan
    sst = xr.Variable(("time", "lat", "lon"), values, encoding={"chunks": CHUNKS, "_FillValue": np.float32(np.nan)})
    return xr.Dataset({"sst": sst}, coords={"time": np.arange(t, t + n, dtype="f8")})


def _assert_map_matches_file(path, staged: xr.Dataset, name: str = "sst"):
    """The staged array's chunk map, shape and values are those of its version in the file."""
    arr = staged[name].variable._data
    assert isinstance(arr, StagedVariableArray)
    assert not arr.has_changes
    version = staged.encoding["vhdf5_version"]
    assert arr.origin.version == version
    with h5py.File(path, "r") as f:
        committed = stage_committed_dataset(f, version, name)
        expected, state = committed.array, committed.table_state
        # The hash table seen by the rebase is the file's, or one it extends (a carried variable's).
        assert arr.base_table_state is not None
        assert arr.base_table_state == state or table_extends(
            hash_table_id(f[arr.raw_path]), arr.base_table_state, state
        )
        np.testing.assert_array_equal(arr.staged.slab_indices, expected.slab_indices)
        np.testing.assert_array_equal(arr.staged.slab_offsets, expected.slab_offsets)
        assert arr.staged.shape == expected.shape
        stored = f[version_path(version)][name][()]
    np.testing.assert_array_equal(np.asarray(arr), stored)


def test_rebase_from_report_matches_the_file(tmp_path):
    path = tmp_path / "a.h5"
    _step(0).vhdf5.commit("r1", path=path)
    staged = xr.open_dataset(path, engine="vhdf5").vhdf5.stage()
    expected = _step(0)["sst"].values
    for t in range(1, 11):
        step = _step(t, fill=t in (4, 5, 6, 7))  # chunk 1 along time all fill value: not stored
        staged = staged.vhdf5.append(step, dim="time")
        staged.vhdf5.commit()
        expected = np.concatenate([expected, step["sst"].values])
        _assert_map_matches_file(path, staged)
    assert (staged["sst"].variable._data.staged.slab_indices[1] == 0).all()  # the fill chunk
    # an edit in the middle after the rebases: only that chunk is rewritten, the rest keep their rows
    staged["sst"][2, 1:3, 4:7] = 9.0
    expected[2, 1:3, 4:7] = 9.0
    staged.vhdf5.commit()
    _assert_map_matches_file(path, staged)
    staged.close()
    with xr.open_dataset(path, engine="vhdf5") as ds:
        np.testing.assert_array_equal(ds["sst"].values, expected)
        np.testing.assert_array_equal(ds["time"].values, np.arange(11.0))


def test_rebase_keeps_the_map_of_a_carried_variable(tmp_path):
    path = tmp_path / "a.h5"
    ds = _step(0, n=5)
    ds["other"] = xr.Variable(("lat", "lon"), np.arange(60.0).reshape(6, 10), encoding={"chunks": (3, 5)})
    ds.vhdf5.commit("r1", path=path)
    staged = xr.open_dataset(path, engine="vhdf5").vhdf5.stage()
    staged["sst"][0] = 1.0
    staged.vhdf5.commit()  # sst committed with a new map, other carried unchanged
    staged.vhdf5.commit(allow_empty=True)  # nothing changed: both carried
    for name in ("sst", "other"):
        _assert_map_matches_file(path, staged, name)
    staged.close()


def test_rebase_without_make_current(tmp_path):
    path = tmp_path / "a.h5"
    _step(0, n=5).vhdf5.commit("r1", path=path)
    staged = xr.open_dataset(path, engine="vhdf5").vhdf5.stage()
    staged = staged.vhdf5.append(_step(5), dim="time")
    name = staged.vhdf5.commit("side", make_current=False)
    assert name == "side"
    _assert_map_matches_file(path, staged)
    staged.close()


def _scales(group: h5py.Group) -> dict:
    """Per dataset: whether it is a scale, its NAME, _Netcdf4Dimid, and where its DIMENSION_LIST points."""
    out = {}
    for key, ds in group.items():
        attrs = ds.attrs
        refs = None
        if "DIMENSION_LIST" in attrs:
            refs = []
            for axis_refs in attrs["DIMENSION_LIST"]:
                targets = [group.file[r] for r in axis_refs]
                # references must address the version's own datasets, never the parent's
                assert all(t.parent.name == group.name for t in targets), (key, [t.name for t in targets])
                refs.append([t.name.rsplit("/", 1)[1] for t in targets])
        ref_list = None
        if "REFERENCE_LIST" in attrs:
            ref_list = sorted((group.file[r].name, int(axis)) for r, axis in attrs["REFERENCE_LIST"])
            assert all(n.startswith(group.name + "/") for n, _ in ref_list)
        out[key] = (
            h5py.h5ds.is_scale(ds.id),
            attrs.get("NAME") if h5py.h5ds.is_scale(ds.id) else None,
            attrs.get("_Netcdf4Dimid"),
            refs,
            ref_list and [(n.rsplit("/", 1)[1], a) for n, a in ref_list],
            ds.shape,
        )
    return out


def _h5netcdf(path, version) -> xr.Dataset:
    return xr.open_dataset(path, engine="h5netcdf", group=version_path(version)).load()


@pytest.mark.parametrize("edit", ["append", "shrink_lat", "drop_sst"])
def test_carried_phony_scales_equal_rebuilt_ones(tmp_path, edit):
    staged_path, plain_path = tmp_path / "staged.h5", tmp_path / "plain.h5"
    base = _step(0, n=3)
    for p in (staged_path, plain_path):
        base.vhdf5.commit("r1", path=p, timestamp=T1)
    staged = xr.open_dataset(staged_path, engine="vhdf5").vhdf5.stage()
    if edit == "append":
        staged = staged.vhdf5.append(_step(3), dim="time")
    elif edit == "shrink_lat":  # the phony "lat" changes length: replaced, not carried
        staged = staged.isel(lat=slice(0, 4)).load()
        staged["sst"].encoding["chunks"] = CHUNKS
    else:  # no variable along lat/lon any more: the phony scales go
        staged = staged.drop_vars("sst")
    expected = staged.load().copy()
    staged.vhdf5.commit("r2", timestamp=T2)
    staged.close()
    expected.vhdf5.commit("r2", path=plain_path, timestamp=T2)
    with h5py.File(staged_path, "r") as f, h5py.File(plain_path, "r") as g:
        fast, slow = _scales(f[version_path("r2")]), _scales(g[version_path("r2")])
        assert fast == slow
        if edit == "drop_sst":
            assert "lat" not in fast and "lon" not in fast
        else:
            assert fast["lat"][0] and fast["lat"][1].startswith(b"This is a netCDF dimension")
    xr.testing.assert_identical(_h5netcdf(staged_path, "r2"), _h5netcdf(plain_path, "r2"))
    with xr.open_dataset(staged_path, engine="vhdf5", version="r2") as a:
        xr.testing.assert_identical(a.load(), expected.load())
    # the parent version still reads with h5netcdf as before
    xr.testing.assert_identical(_h5netcdf(staged_path, "r1"), _h5netcdf(plain_path, "r1"))


def test_attach_reads_scales_written_with_either_string_padding(tmp_path):
    """Carried scales come back with null-padded CLASS/NAME (h5py's bytes); they are still recognised."""
    path = tmp_path / "a.h5"
    _step(0, n=2).vhdf5.commit("r1", path=path)
    staged = xr.open_dataset(path, engine="vhdf5").vhdf5.stage()
    for version in ("r2", "r3"):
        staged.vhdf5.commit(version, allow_empty=True)
    staged.close()
    with h5py.File(path, "r") as f:
        r3 = f[version_path("r3")]
        assert sorted(r3) == ["lat", "lon", "sst", "time"]  # no duplicate or renamed phony scales
        assert _scales(r3) == _scales(f[version_path("r1")])
