"""Behaviours versioned-hdf5 2.6's own API tests check, run against both libraries.

Each test here was a failure of ``benchmarks/peer_suite.py`` (the versioned-hdf5 test
named in its docstring). Oracle: the real versioned-hdf5 2.6, run side by side with
this package on the same operations.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import xarray_vhdf5

versioned_hdf5 = pytest.importorskip("versioned_hdf5")

LIBS = {"versioned_hdf5": versioned_hdf5, "xarray_vhdf5": xarray_vhdf5}


@pytest.fixture(params=sorted(LIBS))
def vfile(request, tmp_path):
    with h5py.File(tmp_path / f"{request.param}.h5", "w") as f:
        yield LIBS[request.param].VersionedHDF5File(f)


def test_listing_version_data_shows_only_the_format(vfile):
    """test_replay.py::test_delete_version(s), test_modify_metadata_*: they list ``_version_data``."""
    with vfile.stage_version("v0") as g:
        g.create_dataset("x", data=np.arange(10.0), chunks=(4,))
        g.create_dataset("grp/y", data=np.arange(3), chunks=(2,))
    with vfile.stage_version("v1") as g:
        g["x"][0] = -1.0
    assert sorted(vfile.f["_version_data"]) == ["grp", "versions", "x"]


def test_top_level_versions_name_is_forbidden(vfile):
    """test_api.py::test_top_level_versions_dataset_name_rejected: the message names it forbidden.

    versioned-hdf5 raises when the version is committed, this package when the
    dataset is created; either way the stage_version block raises and nothing is committed.
    """
    with pytest.raises(ValueError, match="forbidden dataset or group name"):
        with vfile.stage_version("v1") as g:
            g.create_dataset("versions/x", data=np.arange(7), chunks=(3,))
    assert "v1" not in vfile


@pytest.mark.parametrize("how", ["setitem", "data", "0-d array", "shape"])
def test_scalar_datasets_are_not_implemented(vfile, how):
    """test_api.py::test_scalar_dataset: NotImplementedError whose message starts with "Scalar"."""
    with vfile.stage_version("v1") as g:
        with pytest.raises(NotImplementedError, match="Scalar"):
            if how == "setitem":
                g["x"] = 123
            elif how == "data":
                g.create_dataset("x", data=123)
            elif how == "0-d array":
                g.create_dataset("x", data=np.asarray(123))
            else:
                g.create_dataset("x", shape=())
