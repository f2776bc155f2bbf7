"""The one door to libhdf5: the symbol table every kernel calls through (private).

HDF5 object ids (``dset.id.id``) are only meaningful inside the libhdf5
instance that h5py loaded, and h5py wheels bundle that library (under
``h5py.libs/``) without headers.  So at import this module
``dlopen()``-s the already loaded h5py extension ``h5py.defs``
(``RTLD_NOW | RTLD_LOCAL``; the library is already mapped, dlopen only bumps
its reference count) and resolves each function with ``dlsym()`` on that
handle.  ``dlsym`` searches the handle's object and its dependency tree, i.e.
exactly the libhdf5 h5py is linked against, whether it is the bundled copy of
a wheel or a system HDF5.  The function pointers live in the module-level C
struct ``H5`` (declared in ``xarray_vhdf5/_ext/_hdf5api.pxd``); their types
are declared by hand in ``_ext/hdf5.pxd`` (no HDF5 header is needed).  A
missing symbol raises ImportError at import.

The other kernels reach the struct with
``from xarray_vhdf5._ext._hdf5api cimport H5``: Cython exports it through this
module's ``__pyx_capi__`` and imports this module first, so the symbols are
resolved once per process, here, and nowhere else.  A new libhdf5 function
takes three lines: its pointer type in ``hdf5.pxd``, a field of ``HDF5API``
there, and one ``_sym`` line below.

Why not the functions h5py exports in ``h5py.defs.__pyx_capi__``?  Those
wrappers translate HDF5 errors into Python exceptions, so they must be called
with the GIL held (called without it they abort the interpreter on the first
error).  Calling libhdf5 directly lets the kernels' loops run entirely in C
without the GIL, with every return code checked by the kernel.

POSIX only (``dlopen``/``dlsym``); on other platforms the extension does not
build and the pure-Python reference paths must be selected.
"""

from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlerror, dlopen, dlsym

cimport hdf5

import os

import h5py.defs

__all__ = ["HDF5_LIBRARY_SOURCE"]

cdef void *_h5py_handle = NULL

#: Path of the object whose dependency tree the HDF5 symbols were resolved in.
HDF5_LIBRARY_SOURCE = h5py.defs.__file__


cdef void *_sym(void *handle, const char *name) except NULL:
    dlerror()  # clear any stale error
    cdef void *ptr = dlsym(handle, name)
    if ptr == NULL:
        err = dlerror()
        raise ImportError(
            f"xarray_vhdf5: libhdf5 symbol {name.decode()!r} not found through "
            f"{HDF5_LIBRARY_SOURCE!r} (the h5py extension whose libhdf5 the kernels "
            f"must share): {err.decode() if err != NULL else 'no dlerror message'}. "
            f"The h5py build is too old or unusual; set XARRAY_VHDF5_KERNELS=python "
            f"to use the pure-Python reference kernels."
        )
    return ptr


cdef int _load_hdf5_symbols() except -1:
    global _h5py_handle
    path = os.fsencode(HDF5_LIBRARY_SOURCE)
    cdef void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL)
    if handle == NULL:
        err = dlerror()
        raise ImportError(
            f"xarray_vhdf5: cannot dlopen {HDF5_LIBRARY_SOURCE!r} to reach h5py's "
            f"libhdf5: {err.decode() if err != NULL else 'no dlerror message'}"
        )
    if sizeof(hdf5.hsize_t) != 8 or sizeof(hdf5.hid_t) != 8:
        raise ImportError("xarray_vhdf5: unexpected HDF5 type sizes in _ext/hdf5.pxd")
    # The handle is kept for the life of the process (never dlclose()d): the
    # function pointers below point into libraries it keeps mapped.
    _h5py_handle = handle
    H5.H5Dget_space = <hdf5.H5Dget_space_ft>_sym(handle, b"H5Dget_space")
    H5.H5Dget_create_plist = <hdf5.H5Dget_create_plist_ft>_sym(handle, b"H5Dget_create_plist")
    H5.H5Dread = <hdf5.H5Dread_ft>_sym(handle, b"H5Dread")
    H5.H5Dwrite = <hdf5.H5Dwrite_ft>_sym(handle, b"H5Dwrite")
    H5.H5Screate_simple = <hdf5.H5Screate_simple_ft>_sym(handle, b"H5Screate_simple")
    H5.H5Sclose = <hdf5.H5Sclose_ft>_sym(handle, b"H5Sclose")
    H5.H5Sselect_hyperslab = <hdf5.H5Sselect_hyperslab_ft>_sym(handle, b"H5Sselect_hyperslab")
    H5.H5Sget_select_bounds = <hdf5.H5Sget_select_bounds_ft>_sym(handle, b"H5Sget_select_bounds")
    H5.H5Sget_select_npoints = <hdf5.H5Sget_select_npoints_ft>_sym(
        handle, b"H5Sget_select_npoints"
    )
    H5.H5Sget_simple_extent_ndims = <hdf5.H5Sget_simple_extent_ndims_ft>_sym(
        handle, b"H5Sget_simple_extent_ndims"
    )
    H5.H5Pclose = <hdf5.H5Pclose_ft>_sym(handle, b"H5Pclose")
    H5.H5Pget_virtual_count = <hdf5.H5Pget_virtual_count_ft>_sym(handle, b"H5Pget_virtual_count")
    H5.H5Pget_virtual_vspace = <hdf5.H5Pget_virtual_vspace_ft>_sym(
        handle, b"H5Pget_virtual_vspace"
    )
    H5.H5Pget_virtual_srcspace = <hdf5.H5Pget_virtual_srcspace_ft>_sym(
        handle, b"H5Pget_virtual_srcspace"
    )
    H5.H5Pget_virtual_dsetname = <hdf5.H5Pget_virtual_dsetname_ft>_sym(
        handle, b"H5Pget_virtual_dsetname"
    )
    H5.H5Pget_virtual_filename = <hdf5.H5Pget_virtual_filename_ft>_sym(
        handle, b"H5Pget_virtual_filename"
    )
    H5.H5Ewalk2 = <hdf5.H5Ewalk2_ft>_sym(handle, b"H5Ewalk2")
    H5.H5Pset_virtual = <hdf5.H5Pset_virtual_ft>_sym(handle, b"H5Pset_virtual")
    H5.H5Aexists = <hdf5.H5Aexists_ft>_sym(handle, b"H5Aexists")
    H5.H5Aopen = <hdf5.H5Aopen_ft>_sym(handle, b"H5Aopen")
    H5.H5Acreate2 = <hdf5.H5Acreate2_ft>_sym(handle, b"H5Acreate2")
    H5.H5Adelete = <hdf5.H5Adelete_ft>_sym(handle, b"H5Adelete")
    H5.H5Aclose = <hdf5.H5Aclose_ft>_sym(handle, b"H5Aclose")
    H5.H5Awrite = <hdf5.H5Awrite_ft>_sym(handle, b"H5Awrite")
    H5.H5Aread = <hdf5.H5Aread_ft>_sym(handle, b"H5Aread")
    H5.H5Aget_type = <hdf5.H5Aget_type_ft>_sym(handle, b"H5Aget_type")
    H5.H5Aget_space = <hdf5.H5Aget_space_ft>_sym(handle, b"H5Aget_space")
    H5.H5Tequal = <hdf5.H5Tequal_ft>_sym(handle, b"H5Tequal")
    H5.H5Tclose = <hdf5.H5Tclose_ft>_sym(handle, b"H5Tclose")
    H5.H5Tget_class = <hdf5.H5Tget_class_ft>_sym(handle, b"H5Tget_class")
    H5.H5Tis_variable_str = <hdf5.H5Tis_variable_str_ft>_sym(handle, b"H5Tis_variable_str")
    H5.H5Screate = <hdf5.H5Screate_ft>_sym(handle, b"H5Screate")
    H5.H5Sget_simple_extent_dims = <hdf5.H5Sget_simple_extent_dims_ft>_sym(handle, b"H5Sget_simple_extent_dims")
    H5.H5Sget_simple_extent_type = <hdf5.H5Sget_simple_extent_type_ft>_sym(handle, b"H5Sget_simple_extent_type")
    H5.H5free_memory = <hdf5.H5free_memory_ft>_sym(handle, b"H5free_memory")
    H5.H5Pcopy = <hdf5.H5Pcopy_ft>_sym(handle, b"H5Pcopy")
    H5.H5Sselect_all = <hdf5.H5Sselect_all_ft>_sym(handle, b"H5Sselect_all")
    H5.H5Dcreate2 = <hdf5.H5Dcreate2_ft>_sym(handle, b"H5Dcreate2")
    H5.H5Tget_size = <hdf5.H5Tget_size_ft>_sym(handle, b"H5Tget_size")
    H5.H5Tget_super = <hdf5.H5Tget_super_ft>_sym(handle, b"H5Tget_super")
    H5.H5Tget_nmembers = <hdf5.H5Tget_nmembers_ft>_sym(handle, b"H5Tget_nmembers")
    H5.H5Tget_member_type = <hdf5.H5Tget_member_type_ft>_sym(handle, b"H5Tget_member_type")
    H5.H5Aopen_by_idx = <hdf5.H5Aopen_by_idx_ft>_sym(handle, b"H5Aopen_by_idx")
    H5.H5Aget_name = <hdf5.H5Aget_name_ft>_sym(handle, b"H5Aget_name")
    H5.H5Tget_cset = <hdf5.H5Tget_cset_ft>_sym(handle, b"H5Tget_cset")
    H5.H5Aexists_by_name = <hdf5.H5Aexists_by_name_ft>_sym(handle, b"H5Aexists_by_name")
    H5.H5Aopen_by_name = <hdf5.H5Aopen_by_name_ft>_sym(handle, b"H5Aopen_by_name")
    return 0


_load_hdf5_symbols()
