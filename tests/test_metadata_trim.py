"""Trimming libhdf5's metadata cache between commits (backend.mdc, VersionedHDF5File(metadata_trim_every=))."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._backend.mdc import trim_metadata_cache

CONFIG_FIELDS = ("max_size", "min_size", "incr_mode", "decr_mode", "epoch_length", "evictions_enabled")


def _commit_many(vf, n, start=0):
    for k in range(start, start + n):
        with vf.stage_version(f"v{k}") as g:
            if "x" not in g:
                g.create_dataset("x", data=np.zeros(1000), chunks=(10,))
            g["x"][k * 7 % 1000] = k


def test_trim_empties_the_cache_and_restores_its_configuration(tmp_path):
    with h5py.File(tmp_path / "f.h5", "w") as f:
        vf = VersionedHDF5File(f, metadata_trim_every=None)
        _commit_many(vf, 100)
        before = f.id.get_mdc_config()
        max_size, _, _, entries = f.id.get_mdc_size()
        left = trim_metadata_cache(f.id)
        assert left < entries / 2, (left, entries)  # open objects' headers stay
        after = f.id.get_mdc_config()
        assert [getattr(after, k) for k in CONFIG_FIELDS] == [getattr(before, k) for k in CONFIG_FIELDS]
        assert f.id.get_mdc_size()[0] == max_size  # its size limit as it was (adaptive resizing)
        _commit_many(vf, 5, start=100)  # commits go on as before
        np.testing.assert_array_equal(vf["v104"]["x"][[0, 7 * 104 % 1000]], [0, 104])


def test_versioned_file_trims_every_n_commits_and_not_when_disabled(tmp_path):
    counts = {}
    for every in (4, None, "default"):  # the default (256): not reached in 40 commits
        with h5py.File(tmp_path / f"{every}.h5", "w") as f:
            vf = VersionedHDF5File(f) if every == "default" else VersionedHDF5File(f, metadata_trim_every=every)
            _commit_many(vf, 40)
            counts[every] = f.id.get_mdc_size()[3]
            np.testing.assert_array_equal(vf["v39"]["x"][[0, 7 * 39 % 1000]], [0, 39])
    assert counts[4] < counts[None] / 2 and counts["default"] == counts[None], counts
    with h5py.File(tmp_path / "bad.h5", "w") as f:
        with pytest.raises(ValueError, match="metadata_trim_every"):
            VersionedHDF5File(f, metadata_trim_every=-1)
