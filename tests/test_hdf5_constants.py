"""Every HDF5 constant we write down as a number, checked against h5py or libhdf5.

The kernels and the ctypes calls declare libhdf5's constants by hand (no HDF5
header is available with h5py's wheels): ``_ext/hdf5.pxd``, ``_ext/*.pyx``,
``xarray_vhdf5/_backend/_libhdf5.py``, a few in Python modules. The declarations
are found by parsing those sources (any ``H5x_NAME = <number>``, in code or in a
comment), so a constant declared tomorrow is checked too: against the same
constant of ``h5py.h5t`` / ``h5s`` / ``h5p`` / ``h5d`` / ``h5o`` / ``h5g`` /
``h5``, or, for the few h5py does not expose, by making libhdf5 use the value.
A declared constant with neither fails, asking for a check.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from h5py import h5, h5d, h5g, h5o, h5p, h5s, h5t

from xarray_vhdf5._backend import _libhdf5
from xarray_vhdf5._backend._libhdf5 import libhdf5_function

# The checkout's sources (an installed package holds no .pyx/.pxd): tests run from the repository.
PACKAGE = Path(__file__).resolve().parents[1] / "xarray_vhdf5"
KERNEL_SOURCES = PACKAGE.parent / "_ext"

# `H5T_STRING = 3`, `_H5S_MAX_RANK = 32`, `H5O_INFO_BASIC = 0x0001`, `H5_ITER_INC = 0`.
DECLARATION = re.compile(r"(?<![A-Za-z0-9])_?(H5[A-Z]?_[A-Z][A-Z0-9_]*)\s*=\s*(0[xX][0-9A-Fa-f]+|\d+)\b")
H5PY_MODULES = {"T": h5t, "S": h5s, "P": h5p, "D": h5d, "O": h5o, "G": h5g, "": h5}


def _sources() -> list[Path]:
    files = sorted(KERNEL_SOURCES.glob("*.pyx")) + sorted(KERNEL_SOURCES.glob("*.pxd"))
    files += sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.pxd"))
    return files


def declared_constants() -> dict[str, dict[int, list[str]]]:
    """``{name: {value: ["file:line", ...]}}`` of every hand-declared HDF5 constant."""
    found: dict[str, dict[int, list[str]]] = {}
    for path in _sources():
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for match in DECLARATION.finditer(line):
                name, value = match.group(1), int(match.group(2), 0)
                where = f"{path.relative_to(PACKAGE.parent)}:{lineno}"
                found.setdefault(name, {}).setdefault(value, []).append(where)
    return found


DECLARED = declared_constants()


def _declared(name: str) -> int:
    """The value the sources declare for ``name`` (checked by its own test case)."""
    return next(iter(DECLARED[name]))


def test_the_parser_finds_the_declarations():
    """The sources were found and read: the kernels' constant table is in them."""
    assert KERNEL_SOURCES.is_dir(), "tests run from a checkout: _ext/ is beside the package"
    for name in ("H5S_SELECT_SET", "H5P_DEFAULT", "H5T_STRING", "H5S_MAX_RANK", "H5O_INFO_BASIC"):
        assert name in DECLARED, name
    assert DECLARED["H5S_MAX_RANK"].keys() == {32}


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_one_value_per_constant(name):
    assert len(DECLARED[name]) == 1, f"{name} is declared with different values: {DECLARED[name]}"


# -- the few h5py does not expose: libhdf5 is made to use the value -------------------------


class _ErrorEntry(ctypes.Structure):  # H5E_error2_t (H5Epublic.h)
    _fields_ = [
        ("cls_id", ctypes.c_int64),
        ("maj_num", ctypes.c_int64),
        ("min_num", ctypes.c_int64),
        ("line", ctypes.c_uint),
        ("func_name", ctypes.c_char_p),
        ("file_name", ctypes.c_char_p),
        ("desc", ctypes.c_char_p),
    ]


_WALK_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ErrorEntry), ctypes.c_void_p)


def _c(name: str, argtypes: list, restype=ctypes.c_int):
    fn = libhdf5_function(name, argtypes, restype)
    assert fn is not None, f"libhdf5 does not export {name}"
    return fn


def _check_max_rank(value: int, tmp_path: Path) -> None:
    h5s.create_simple((1,) * value)  # the largest rank libhdf5 accepts ...
    with pytest.raises(ValueError):  # ... and one more it refuses
        h5s.create_simple((1,) * (value + 1))


def _check_default_plist(value: int, tmp_path: Path) -> None:
    create = _c(
        "H5Gcreate2", [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64], ctypes.c_int64
    )
    close = _c("H5Gclose", [ctypes.c_int64])
    with h5py.File(tmp_path / "plist.h5", "w") as f, h5py._objects.phil:
        gid = create(f.id.id, b"g", value, value, value)  # lcpl, gcpl, gapl: "the defaults"
        assert gid >= 0, f"H5Gcreate2 refused {value} as H5P_DEFAULT"
        assert close(gid) >= 0


def _walk(stack: int, direction: int) -> list[str]:
    walk = _c("H5Ewalk2", [ctypes.c_int64, ctypes.c_int, _WALK_CALLBACK, ctypes.c_void_p])
    names: list[str] = []

    @_WALK_CALLBACK
    def collect(n, entry, data):
        names.append(entry.contents.func_name.decode())
        return 0

    assert walk(stack, direction, collect, None) >= 0, f"H5Ewalk2 refused stack {stack}, direction {direction}"
    return names


def _failed_open_stack(tmp_path: Path, walk: Callable[[], list[str]]) -> list[str]:
    """Fail ``H5Gopen2`` on a missing name, then walk the error stack it left (under phil)."""
    open_ = _c("H5Gopen2", [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64], ctypes.c_int64)
    with h5py.File(tmp_path / "errors.h5", "w") as f, h5py._objects.phil:
        assert open_(f.id.id, b"missing", _declared("H5P_DEFAULT")) < 0
        return walk()


def _check_error_default(value: int, tmp_path: Path) -> None:
    names = _failed_open_stack(tmp_path, lambda: _walk(value, _declared("H5E_WALK_DOWNWARD")))
    assert names, f"stack {value} holds no entries after a failed call: it is not the default stack"


def _check_walk_downward(value: int, tmp_path: Path) -> None:
    # Downward starts at the API function the caller called (h5failure.pxd keeps
    # entry 0 as "the outermost"); upward starts at the innermost cause.
    down = _failed_open_stack(tmp_path, lambda: _walk(0, value))
    up = _failed_open_stack(tmp_path, lambda: _walk(0, 1 - value))
    assert len(down) >= 2 and down == up[::-1]
    assert down[0] == "H5Gopen2", down


def _object_info(tmp_path: Path, fields: int) -> tuple[int, int, int, int]:
    """``H5Oget_info_by_name3`` on a dataset with 3 attributes: (address, type, num_attrs, h5py's address)."""
    with h5py.File(tmp_path / "info.h5", "w") as f:
        dset = f.create_dataset("d", data=np.arange(4))
        for i in range(3):
            dset.attrs[f"a{i}"] = i
        info = _libhdf5.H5O_info2_t()
        fn = _libhdf5.H5Oget_info_by_name3
        assert fn is not None
        with h5py._objects.phil:
            assert fn(f.id.id, b"d", ctypes.byref(info), fields, 0) >= 0
        address = int.from_bytes(bytes(info.token)[:8], "little")
        return address, int(info.type), int(info.num_attrs), int(h5o.get_info(dset.id).addr)


def _check_info_basic(value: int, tmp_path: Path) -> None:
    address, kind, num_attrs, expected = _object_info(tmp_path, value)
    assert (address, kind, num_attrs) == (expected, h5o.TYPE_DATASET, 0)


def _check_info_num_attrs(value: int, tmp_path: Path) -> None:
    address, _, num_attrs, expected = _object_info(tmp_path, value)
    assert num_attrs == 3 and address != expected  # the count, and not the basic fields


BEHAVIOUR: dict[str, Callable[[int, Path], None]] = {
    "H5S_MAX_RANK": _check_max_rank,
    "H5P_DEFAULT": _check_default_plist,
    "H5E_DEFAULT": _check_error_default,
    "H5E_WALK_DOWNWARD": _check_walk_downward,
    "H5O_INFO_BASIC": _check_info_basic,
    "H5O_INFO_NUM_ATTRS": _check_info_num_attrs,
}


def _h5py_value(name: str) -> int | None:
    """The same constant in h5py (``H5T_STRING`` -> ``h5py.h5t.STRING``), or None if h5py has none."""
    prefix, _, rest = name[2:].partition("_")
    module = H5PY_MODULES.get(prefix)
    value = getattr(module, rest, None) if module is not None else None
    if isinstance(value, h5s.SpaceID):  # h5s.ALL is a dataspace object around H5S_ALL
        return int(value.id)
    return int(value) if isinstance(value, int) else None


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_constant_matches_hdf5(name, tmp_path):
    (value,) = DECLARED[name]  # test_one_value_per_constant reports several
    where = ", ".join(DECLARED[name][value])
    expected = _h5py_value(name)
    if expected is not None:
        assert value == expected, f"{name} = {value} ({where}), h5py says {expected}"
        assert name not in BEHAVIOUR, f"{name}: h5py exposes it, drop its behavioural check"
    elif name in BEHAVIOUR:
        BEHAVIOUR[name](value, tmp_path)
    else:
        pytest.fail(f"{name} = {value} ({where}): h5py has no such constant; add a check to BEHAVIOUR")
