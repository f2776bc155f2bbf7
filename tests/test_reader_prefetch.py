"""A version's few datasets are resolved in the open that reads its tree; a damaged one is said at its use."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import xarray_vhdf5 as xv
from xarray_vhdf5._versions import reader as reader_module
from xarray_vhdf5.errors import CorruptFileError


def write(path) -> None:
    with h5py.File(path, "w") as f:
        with xv.VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("a", data=np.arange(100.0), chunks=(10,))
            g.create_dataset("b", data=np.arange(50, dtype="i4"), chunks=(10,))


def test_a_small_version_opens_the_file_once_for_its_tree_and_datasets(tmp_path, monkeypatch):
    path = tmp_path / "f.h5"
    write(path)
    with xv.VersionedHDF5File.open(path) as reader:
        opens = []
        handle = reader._shared.open
        monkeypatch.setattr(reader._shared, "open", lambda *a, **k: opens.append(1) or handle(*a, **k))
        group = reader["v1"]
        assert len(opens) == 1
        np.testing.assert_array_equal(group["a"][:5], np.arange(5.0))
        np.testing.assert_array_equal(group["b"][-3:], np.arange(47, 50))
        assert len(opens) == 1  # both datasets were resolved with the tree


def test_a_large_version_resolves_datasets_when_asked(tmp_path, monkeypatch):
    path = tmp_path / "f.h5"
    write(path)
    monkeypatch.setattr(reader_module, "PREFETCH", 1)
    with xv.VersionedHDF5File.open(path) as reader:
        opens = []
        handle = reader._shared.open
        monkeypatch.setattr(reader._shared, "open", lambda *a, **k: opens.append(1) or handle(*a, **k))
        group = reader["v1"]
        group["a"][0]
        assert len(opens) == 2


def test_a_damaged_dataset_does_not_stop_the_group_or_its_other_datasets(tmp_path):
    path = tmp_path / "f.h5"
    write(path)
    with h5py.File(path, "r+") as f:  # b then maps a chunk past its raw_data's end
        raw = f["_version_data/b/raw_data"]
        raw.resize((raw.shape[0] - 10,))
    with xv.VersionedHDF5File.open(path) as reader:
        group = reader["v1"]  # its tree reads; b's manifest cannot be resolved
        np.testing.assert_array_equal(group["a"][()], np.arange(100.0))
        with pytest.raises(CorruptFileError, match="past the end"):
            group["b"][()]
