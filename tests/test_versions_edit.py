"""``_versions.edit.stage_committed_dataset``: one dataset of a committed version, staged for editing.

Its array must be what the h5py-level stage (``stage_version``'s
``InMemoryDataset``) builds for the same dataset, whether the map comes from
the commit's stored chunk map or from the virtual dataset, and read the
version's values.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._backend.hashtable import hash_table_id, table_state
from xarray_vhdf5._versions import chunkmaps
from xarray_vhdf5._versions import edit as edit_module
from xarray_vhdf5._versions.edit import stage_committed_dataset

N = chunkmaps.MIN_CHUNKS + 10  # one chunk a row: enough for a stored map


def _file(path, n_versions: int = 3) -> np.ndarray:
    data = np.arange(N * 3, dtype="f4").reshape(N, 3)
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=data, chunks=(1, 3), fillvalue=-1.0)
            g.create_group("grp").create_dataset("y", data=np.arange(5, dtype="i8"), chunks=(2,))
        for i in range(1, n_versions):
            with vf.stage_version(f"v{i}") as g:
                g["x"][i, 0] = 100.0 + i
                data[i, 0] = 100.0 + i
                g["x"].resize((N + i, 3))  # new rows: fill value, unmapped
    out = np.full((N + n_versions - 1, 3), -1.0, dtype="f4")
    out[:N] = data
    return out


def _h5py_level(path, version: str, name: str):
    """The map InMemoryDataset builds for ``name`` when staged from ``version`` (after a write)."""
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with pytest.raises(RuntimeError), vf.stage_version("probe", prev_version=version) as g:
            arr = g[name].staged_array
            indices, offsets = arr.slab_indices.copy(), arr.slab_offsets.copy()
            raise RuntimeError("discard")  # nothing committed
    return indices, offsets


@pytest.mark.parametrize("stored_map", [True, False])
def test_staged_dataset_matches_the_h5py_level_stage_and_the_file(tmp_path, monkeypatch, stored_map):
    path = tmp_path / "a.h5"
    expected = _file(path)
    if not stored_map:
        monkeypatch.setattr(edit_module.chunkmaps, "load", lambda *a: None)
    with h5py.File(path, "r") as f:
        assert (chunkmaps.load(f, "v2", "x") is not None) == stored_map
        staged = stage_committed_dataset(f, "v2", "x")
        assert staged is not None
        assert staged.path == "x" and staged.raw_path == "/_version_data/x/raw_data"
        assert staged.shape == expected.shape and staged.ndim == 2 and staged.dtype == np.dtype("f4")
        assert int(staged.attrs["chunks"][0]) == 1
        assert staged.table_state == table_state(hash_table_id(f["/_version_data/x/raw_data"]))
        assert not staged.array.has_changes
        np.testing.assert_array_equal(staged.array[...], expected)
        np.testing.assert_array_equal(staged.array[N:], -1.0)  # unmapped rows read the fill value
        indices, offsets = staged.chunk_map.slab_indices, staged.chunk_map.slab_offsets
    h5_indices, h5_offsets = _h5py_level(path, "v2", "x")
    np.testing.assert_array_equal(indices, h5_indices)
    np.testing.assert_array_equal(offsets, h5_offsets)


def test_a_dataset_in_a_subgroup_and_a_missing_one(tmp_path):
    path = tmp_path / "b.h5"
    _file(path, n_versions=1)
    with h5py.File(path, "r") as f:
        staged = stage_committed_dataset(f, "v0", "grp/y")
        assert staged is not None
        np.testing.assert_array_equal(staged.array[...], np.arange(5))
        with pytest.raises(KeyError):
            stage_committed_dataset(f, "v0", "nothing")
