"""The address of an HDF5 object, without what h5py's ``h5o.get_info`` also computes.

``h5py.h5o.get_info`` asks libhdf5 for every field of an object's info,
header statistics and attribute count included. For a virtual dataset just
created, that makes libhdf5 encode its whole layout message again on each
call: 0.8-1 ms for 400 mappings. The address alone (``H5O_INFO_BASIC``:
H5Oget_info3's token, whose first 8 bytes are the address with the native
file format) costs 30-50 us. The function is resolved in the libhdf5 h5py
loaded, as ``versions.index`` does for ``H5Gget_info``; without it, the h5py
call is used.
"""

from __future__ import annotations

import ctypes

import h5py
from h5py import h5o

__all__ = ["libhdf5_function", "object_address"]

_H5O_INFO_BASIC = 0x0001


class _Info2(ctypes.Structure):  # H5O_info2_t (HDF5 >= 1.12)
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


def libhdf5_function(name: str, argtypes: list, restype=ctypes.c_int):
    """A function of the libhdf5 h5py is linked with, through ctypes (None if not found).

    ``dlsym`` on one of h5py's extensions searches its dependencies, i.e.
    exactly the libhdf5 h5py loaded (bundled or system). Call it holding
    ``h5py._objects.phil``, as h5py does.
    """
    try:
        fn = getattr(ctypes.CDLL(h5o.__file__), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = restype
    return fn


_GET_INFO3 = libhdf5_function("H5Oget_info3", [ctypes.c_int64, ctypes.POINTER(_Info2), ctypes.c_uint])


def object_address(obj_id) -> int:
    """The file address of the object ``obj_id`` (an h5py ObjectID), as ``h5o.get_info(obj_id).addr``."""
    if _GET_INFO3 is not None:
        info = _Info2()
        with h5py._objects.phil:
            if _GET_INFO3(obj_id.id, ctypes.byref(info), _H5O_INFO_BASIC) >= 0:
                return int.from_bytes(bytes(info.token)[:8], "little")
    return int(h5o.get_info(obj_id).addr)
