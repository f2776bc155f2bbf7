"""Type stub of the libhdf5 symbol table module (``_ext/_hdf5api.pyx``); private.

Its C-level table ``H5`` is for the kernels (``cimport``); Python sees only where
the symbols were resolved.
"""

__all__ = ["HDF5_LIBRARY_SOURCE"]

#: Path of the h5py extension whose libhdf5 the kernels resolved their symbols in.
HDF5_LIBRARY_SOURCE: str
#: Cython's C-API exports: ``{"H5": <capsule of the filled HDF5API struct>}``.
__pyx_capi__: dict[str, object]
