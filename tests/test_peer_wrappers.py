"""The classes of committed and staged objects, as versioned-hdf5 2.6's own API tests check them.

Each test was a failure of ``benchmarks/peer_suite.py`` (the versioned-hdf5 test named
in its docstring). Oracle: the real versioned-hdf5 2.6, run side by side with this
package on the same operations; the tests marked "here" check what this package adds
(committed versions stay read-only, staged data is let go at the commit).
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import xarray_vhdf5
from xarray_vhdf5 import _wrappers

versioned_hdf5 = pytest.importorskip("versioned_hdf5")

#: name -> (VersionedHDF5File's module, the module of InMemoryGroup, DatasetWrapper, ...)
LIBS = {
    "versioned_hdf5": (versioned_hdf5, versioned_hdf5.wrappers),
    "xarray_vhdf5": (xarray_vhdf5, _wrappers),
}


@pytest.fixture(params=sorted(LIBS))
def lib(request):
    return LIBS[request.param]


@pytest.mark.parametrize("index", [slice(None), Ellipsis, (), slice(0, 100)])
def test_full_overwrite_swaps_to_an_array_dataset(lib, tmp_path, index):
    """test_api.py::test_datasetwrapper: a write of every point makes ``.dataset`` an InMemoryArrayDataset."""
    top, w = lib
    with h5py.File(tmp_path / "f.h5", "w") as f:
        vf = top.VersionedHDF5File(f)
        with vf.stage_version("r0") as sv:
            sv.create_dataset("bar", data=[1, 2, 3], chunks=(2,), fillvalue=9)
            sv["bar"].attrs["key"] = 0
        with vf.stage_version("r1") as sv:
            held = sv["bar"]
            held[0:2] = [7, 8]  # part of it: no swap
            assert isinstance(sv["bar"].dataset, w.InMemoryDataset)
            held.attrs["key"] = 1
            held[index] = [4, 5, 6]
            assert isinstance(sv["bar"], w.DatasetWrapper)
            assert isinstance(sv["bar"].dataset, w.InMemoryArrayDataset)
            assert (sv["bar"].attrs["key"], sv["bar"].chunks, sv["bar"].fillvalue) == (1, (2,), 9)
            held[1] = 50  # the object held is still the group's dataset
            held.resize((4,))
            np.testing.assert_array_equal(sv["bar"][:], [4, 50, 6, 9])
        r1 = vf["r1"]["bar"]
        np.testing.assert_array_equal(r1[:], [4, 50, 6, 9])
        assert (r1.attrs["key"], r1.chunks) == (1, (2,))
        np.testing.assert_array_equal(vf["r0"]["bar"][:], [1, 2, 3])
