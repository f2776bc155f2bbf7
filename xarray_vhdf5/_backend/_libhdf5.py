"""The libhdf5 functions called through ctypes, and their structs (private).

h5py wraps ``H5Oget_info`` asking for every field of an object's info (for a
virtual dataset libhdf5 then encodes its whole layout again) and does not wrap
``H5Gget_info``; these few calls go to libhdf5 directly through ctypes. They
are resolved in the libhdf5 h5py loaded: ``dlsym`` on one of h5py's extensions
searches its dependencies, i.e. exactly the library h5py uses (bundled or
system), as the compiled kernels' ``_ext/_hdf5api.pyx`` does. A function not
found is None, and its callers (:mod:`.h5objects`) take the h5py path.

The structs and constants are declared by hand from the HDF5 >= 1.12 public
headers (``H5Opublic.h``, ``H5Gpublic.h``); ``tests/test_hdf5_constants.py``
checks the constants against libhdf5. Call the functions holding
``h5py._objects.phil``, as h5py does.
"""

from __future__ import annotations

import ctypes

from h5py import h5o

__all__ = [
    "H5O_INFO_BASIC",
    "H5O_INFO_NUM_ATTRS",
    "H5Fget_eoa",
    "H5Fincrement_filesize",
    "H5G_info_t",
    "H5Gget_info",
    "H5O_info2_t",
    "H5O_token_t",
    "H5Oget_info3",
    "H5Oget_info_by_name3",
    "H5Oincr_refcount",
    "H5Oopen_by_token",
    "libhdf5_function",
]

#: ``fields`` of ``H5Oget_info3``: fileno, token, type, rc and the times (H5Opublic.h).
H5O_INFO_BASIC = 0x0001
#: ``fields`` of ``H5Oget_info3``: the number of attributes (H5Opublic.h, HDF5 >= 1.12).
H5O_INFO_NUM_ATTRS = 0x0004


class H5O_info2_t(ctypes.Structure):
    """``H5O_info2_t`` (H5Opublic.h, HDF5 >= 1.12); ``token``'s first 8 bytes are the address."""

    _fields_ = [
        ("fileno", ctypes.c_ulong),
        ("token", ctypes.c_uint8 * 16),
        ("type", ctypes.c_int),
        ("rc", ctypes.c_uint),
        ("atime", ctypes.c_long),
        ("mtime", ctypes.c_long),
        ("ctime", ctypes.c_long),
        ("btime", ctypes.c_long),
        ("num_attrs", ctypes.c_uint64),
    ]


class H5O_token_t(ctypes.Structure):
    """``H5O_token_t`` (H5public.h, HDF5 >= 1.12): 16 bytes; with the native file format the
    first 8 are the object's address, little-endian, the rest zero."""

    _fields_ = [("data", ctypes.c_uint8 * 16)]


class H5G_info_t(ctypes.Structure):
    """``H5G_info_t`` (H5Gpublic.h): storage type, number of links, max creation order, mounted."""

    _fields_ = [
        ("storage_type", ctypes.c_int),
        ("nlinks", ctypes.c_uint64),
        ("max_corder", ctypes.c_int64),
        ("mounted", ctypes.c_bool),
    ]


def libhdf5_function(name: str, argtypes: list, restype=ctypes.c_int):
    """A function of the libhdf5 h5py is linked with, through ctypes (None if not found).

    Parameters
    ----------
    name : str
        The C name, e.g. ``"H5Gget_info"``.
    argtypes : list of ctypes types
        The C signature's argument types (``hid_t`` is ``ctypes.c_int64``).
    restype : ctypes type, default ``ctypes.c_int``
        The return type (``herr_t`` is ``int``).

    Returns
    -------
    ctypes function or None
        None when h5py's library does not export ``name`` (an older HDF5).
    """
    try:
        fn = getattr(ctypes.CDLL(h5o.__file__), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = restype
    return fn


#: ``herr_t H5Oget_info3(hid_t obj, H5O_info2_t *info, unsigned fields)``, or None.
H5Oget_info3 = libhdf5_function("H5Oget_info3", [ctypes.c_int64, ctypes.POINTER(H5O_info2_t), ctypes.c_uint])
#: ``herr_t H5Oget_info_by_name3(hid_t loc, const char *name, H5O_info2_t *info,
#: unsigned fields, hid_t lapl)``, or None.
H5Oget_info_by_name3 = libhdf5_function(
    "H5Oget_info_by_name3",
    [ctypes.c_int64, ctypes.c_char_p, ctypes.POINTER(H5O_info2_t), ctypes.c_uint, ctypes.c_int64],
)
#: ``hid_t H5Oopen_by_token(hid_t loc, H5O_token_t token)``, or None.
H5Oopen_by_token = libhdf5_function("H5Oopen_by_token", [ctypes.c_int64, H5O_token_t], ctypes.c_int64)
#: ``herr_t H5Gget_info(hid_t group, H5G_info_t *info)``, or None.
H5Gget_info = libhdf5_function("H5Gget_info", [ctypes.c_int64, ctypes.POINTER(H5G_info_t)])
#: ``herr_t H5Oincr_refcount(hid_t object_id)``: one more hard link counted in the object's header, or None.
H5Oincr_refcount = libhdf5_function("H5Oincr_refcount", [ctypes.c_int64])
#: ``herr_t H5Fget_eoa(hid_t file, haddr_t *eoa)``: the file's end of allocation, or None.
H5Fget_eoa = libhdf5_function("H5Fget_eoa", [ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64)])
#: ``herr_t H5Fincrement_filesize(hid_t file, hsize_t increment)``: end of allocation set to
#: max(end of allocation, end of file) + increment (H5Fpublic.h, HDF5 >= 1.10), or None.
H5Fincrement_filesize = libhdf5_function("H5Fincrement_filesize", [ctypes.c_int64, ctypes.c_uint64])
