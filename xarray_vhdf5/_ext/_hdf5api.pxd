# The one door to libhdf5: the symbol table every kernel calls through.
#
# Filled once, at import, by _ext/_hdf5api.pyx (dlsym into the libhdf5 h5py
# loaded); the kernels write ``from xarray_vhdf5._ext._hdf5api cimport H5`` and
# Cython imports that module before theirs, so they never see it unfilled.
# This file lives in the package, not beside the .pyx in _ext/, because a
# cimported module is imported by its dotted name at run time: the kernels must
# name it xarray_vhdf5._ext._hdf5api, which Cython looks up as this path.

from hdf5 cimport HDF5API

cdef HDF5API H5
