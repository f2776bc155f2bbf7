"""Transfer many n-dimensional slice pairs from an array-like into a numpy array.

This is the data mover of the staging engine (versioned-hdf5's ``staged_changes.rst``,
"read_many_slices"): every ``__getitem__``, ``__setitem__``, ``resize()`` and
``load()`` is broken into slice pairs, each covering at most one chunk, and
each group of pairs between one source and one destination is moved by one
call to :func:`read_many_slices`.

Two implementations, with identical results:

- compiled (``"cython"``, the default): :mod:`xarray_vhdf5._ext.slicetools`.
  From an ``h5py.Dataset`` a C loop of ``H5Sselect_hyperslab`` (source),
  ``H5Sselect_hyperslab`` (destination), ``H5Dread`` without the GIL; from a
  numpy array a strided C copy (one ``memcpy`` per contiguous run).
- reference (``"python"``): :func:`read_many_slices_reference`, one numpy /
  h5py slicing assignment per slice pair.

Select one for the whole process with :func:`set_kernel_backend`, for a block
of code with :func:`kernel_backend`, or at import with the environment
variable ``XARRAY_VHDF5_KERNELS=python`` (or ``cython``).  Even with the
compiled backend selected, transfers the C code cannot do route to the
reference path: object / variable-length string dtypes, 0-d arrays, sources
and destinations that may share memory, and HDF5 reads into a destination
that is not C-contiguous or whose dtype h5py cannot map to an HDF5 type.

Units: every start, count and stride is in points (array elements), never in
bytes; a stride is the step between selected points (1 = contiguous), not a
numpy byte stride.

The unsigned-underflow caveat: the kernels take ``hsize_t`` (unsigned 64-bit)
indices and do no bounds checking, so a negative index would silently become a
huge one.  This module rejects negative values and checks every bound with
vectorised numpy operations *before* any kernel runs.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import h5py
import numpy as np
from numpy.typing import ArrayLike

from ..errors import ClosedFileError, UnsupportedError
from ._kernels import slicetools as _slicetools  # None if not built: every use is behind the backend check
from ._kernels import slicetools_error as _slicetools_error

__all__ = [
    "KERNELS_ENV_VAR",
    "KERNEL_BACKENDS",
    "get_kernel_backend",
    "kernel_backend",
    "read_many_slices",
    "read_many_slices_reference",
    "set_kernel_backend",
]

KernelBackend = Literal["cython", "python"]

#: The valid kernel backends.
KERNEL_BACKENDS: tuple[str, ...] = ("cython", "python")
#: Environment variable read once, at import, to pick the initial backend.
KERNELS_ENV_VAR = "XARRAY_VHDF5_KERNELS"

# HDF5 dataspaces have at most H5S_MAX_RANK axes.
_H5S_MAX_RANK = 32


def _source_checkout() -> Path | None:
    """The source checkout this package was imported from, if it was (None: an installed copy).

    Imported from the checkout, the package has no compiled kernels unless the
    checkout is installed editable (meson-python's loader then imports them from
    its build directory). The checkout is told by the build files beside the
    package directory.
    """
    package = Path(__file__).resolve().parent.parent
    root = package.parent
    if not ((root / "meson.build").is_file() and (root / "pyproject.toml").is_file() and (root / "_ext").is_dir()):
        return None
    spec = getattr(sys.modules.get(package.name), "__spec__", None)
    if spec is not None and "editable" in type(spec.loader).__module__:
        return None  # an editable install: its build failed, the generic message applies
    return root


def _installed_copy(root: Path) -> str | None:
    """Where an installed copy of the package is, on sys.path after ``root`` (which shadows it)."""
    here = root.resolve()
    others = [p for p in sys.path if Path(p or os.curdir).resolve() != here]
    spec = importlib.machinery.PathFinder.find_spec(Path(__file__).resolve().parents[1].name, others)
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def _missing_kernels_message() -> str:
    message = f"the compiled kernels (xarray_vhdf5._ext.slicetools) are unavailable: {_slicetools_error}. "
    root = _source_checkout()
    if root is None:
        return message + (
            f"Rebuild the package, or select the pure-Python reference kernels with "
            f"{KERNELS_ENV_VAR}=python or set_kernel_backend('python')."
        )
    installed = _installed_copy(root)
    shadows = f"shadows the installed copy in {installed} and " if installed else ""
    return message + (
        f"xarray_vhdf5 was imported from the source checkout {root}, which {shadows}holds no "
        "compiled kernels (they are built when the package is installed). Run Python from "
        f"another directory, or install the checkout editable: pip install meson-python meson "
        f"ninja cython numpy && pip install --no-build-isolation -e {root}"
    )


def _require_compiled() -> None:
    if _slicetools is None:
        raise ImportError(_missing_kernels_message()) from _slicetools_error


def _check_backend_name(name: object, source: str) -> KernelBackend:
    if name not in KERNEL_BACKENDS:
        raise ValueError(f"{source} must be one of {KERNEL_BACKENDS}, got {name!r}")
    return name  # type: ignore[return-value]


_backend: KernelBackend = _check_backend_name(
    os.environ.get(KERNELS_ENV_VAR, "cython").strip().lower() or "cython",
    f"environment variable {KERNELS_ENV_VAR}",
)
if _backend == "cython":
    _require_compiled()


def get_kernel_backend() -> KernelBackend:
    """Return the kernel backend in use: ``"cython"`` or ``"python"``."""
    return _backend


def set_kernel_backend(name: KernelBackend) -> KernelBackend:
    """Select the kernel implementation for the whole process.

    Applies to :func:`read_many_slices` and
    :func:`xarray_vhdf5._backend.chunkmap.build_slab_indices_and_offsets`.  The
    setting is process-wide, not per thread.

    Parameters
    ----------
    name : {"cython", "python"}
        ``"cython"``: the compiled kernels; ``"python"``: the pure-Python
        reference implementations (slow; for debugging and as a test oracle).

    Returns
    -------
    str
        The previous backend.

    Raises
    ------
    ValueError
        ``name`` is not one of :data:`KERNEL_BACKENDS`.
    ImportError
        ``"cython"`` was asked for but the compiled extension is unavailable.
    """
    global _backend
    name = _check_backend_name(name, "kernel backend")
    if name == "cython":
        _require_compiled()
    previous, _backend = _backend, name
    return previous


@contextlib.contextmanager
def kernel_backend(name: KernelBackend) -> Iterator[None]:
    """Context manager selecting a kernel backend for the duration of a block.

    Process-wide like :func:`set_kernel_backend`; the previous backend is
    restored on exit, also when the block raises.

    Examples
    --------
    >>> with kernel_backend("python"):
    ...     pass  # every transfer in here uses the reference implementation
    """
    previous = set_kernel_backend(name)
    try:
        yield
    finally:
        set_kernel_backend(previous)


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _index_array(name: str, value: ArrayLike, ndim: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.size == 0 and arr.ndim == 1:
        arr = arr.reshape(0, ndim)  # e.g. [] for no slice pairs
    if arr.size == 0 and arr.dtype.kind not in "iu":
        arr = arr.astype(np.uint64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an array of integers, got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[1] != ndim:
        raise ValueError(
            f"{name} must have shape (nslices, {ndim}) for {ndim}-dimensional arrays, got shape {arr.shape}"
        )
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        i = int((arr < 0).any(axis=1).argmax())
        raise ValueError(f"{name} row {i} has negative values: {arr[i].tolist()}")
    return np.ascontiguousarray(arr, dtype=np.uint64)


def _check_bounds(
    side: str,
    shape: tuple[int, ...],
    start: np.ndarray,
    count: np.ndarray,
    stride: np.ndarray,
) -> None:
    """Raise IndexError for the first non-empty slice pair reaching beyond ``shape``.

    Overflow-free in uint64: a pair is inside iff, on every axis,
    ``start < shape`` and ``count - 1 <= (shape - 1 - start) // stride``
    (where ``start >= shape`` the wrapped difference is masked by the first
    test; where ``count == 0`` the pair is skipped).
    """
    if not shape:
        return
    shp = np.array(shape, dtype=np.uint64)
    inside = start < shp
    inside &= count - np.uint64(1) <= (shp - np.uint64(1) - start) // stride
    if inside.all():
        return
    bad = ~inside.all(axis=1)
    bad &= count.all(axis=1)  # pairs with a zero count are skipped, never checked
    if bad.any():
        i = int(bad.argmax())
        st, c, sd = start[i].tolist(), count[i].tolist(), stride[i].tolist()
        last = [a + (n - 1) * s for a, n, s in zip(st, c, sd)]
        raise IndexError(
            f"slice pair {i} is out of bounds for the {side} of shape {tuple(shape)}: "
            f"{side}_start={st}, count={c}, {side}_stride={sd} (last point {last})"
        )


def _prepare(
    src: Any,
    dst: np.ndarray,
    src_start: ArrayLike,
    dst_start: ArrayLike,
    count: ArrayLike,
    src_stride: ArrayLike | None,
    dst_stride: ArrayLike | None,
) -> tuple[Any, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Validate every argument; return the source and the five uint64 arrays."""
    if not isinstance(dst, np.ndarray):
        raise TypeError(f"dst must be a numpy.ndarray, got {type(dst).__name__}")
    if not dst.flags.writeable:
        raise ValueError("dst is read-only; pass a writeable numpy array")
    if isinstance(src, h5py.Dataset):
        if not src.id.valid:
            raise ClosedFileError("cannot read from a closed h5py dataset (its file was closed); reopen it")
        if src.shape is None:
            raise UnsupportedError("h5py.Empty (null dataspace) datasets have no data to read")
    else:
        src = np.asarray(src)
        if src.dtype != dst.dtype:
            raise TypeError(
                f"src and dst must have the same dtype, got {src.dtype} and {dst.dtype}; "
                "convert one of them first (astype)"
            )
    ndim = dst.ndim
    if len(src.shape) != ndim:
        raise ValueError(f"src and dst must have the same number of dimensions, got shapes {src.shape} and {dst.shape}")

    s_start = _index_array("src_start", src_start, ndim)
    nslices = s_start.shape[0]
    d_start = _index_array("dst_start", dst_start, ndim)
    cnt = _index_array("count", count, ndim)
    strides: list[np.ndarray | None] = []
    for name, value in (("src_stride", src_stride), ("dst_stride", dst_stride)):
        if value is None:
            strides.append(None)
            continue
        arr = _index_array(name, value, ndim)
        if arr.size and not arr.all():
            i = int((~arr.all(axis=1)).argmax())
            raise ValueError(f"{name} row {i} has a zero stride: {arr[i].tolist()}")
        strides.append(arr)
    named = [("dst_start", d_start), ("count", cnt), *zip(("src_stride", "dst_stride"), strides)]
    for name, given in named:
        if given is not None and given.shape[0] != nslices:
            raise ValueError(f"src_start has {nslices} slice pairs but {name} has {given.shape[0]}")
    s_stride, d_stride = (np.ones((nslices, ndim), dtype=np.uint64) if arr is None else arr for arr in strides)
    _check_bounds("src", tuple(src.shape), s_start, cnt, s_stride)
    _check_bounds("dst", dst.shape, d_start, cnt, d_stride)
    if src_stride is not None or dst_stride is not None:
        # A stride is irrelevant where count == 1: normalise it to 1 so that
        # a huge (valid) stride never reaches the kernels' pointer arithmetic.
        single = cnt == 1
        if single.any():
            s_stride = np.where(single, np.uint64(1), s_stride)
            d_stride = np.where(single, np.uint64(1), d_stride)
    return src, (s_start, d_start, cnt, s_stride, d_stride)


# ---------------------------------------------------------------------------
# Implementations
# ---------------------------------------------------------------------------


def _reference_loop(
    src: Any,
    dst: np.ndarray,
    src_start: np.ndarray,
    dst_start: np.ndarray,
    count: np.ndarray,
    src_stride: np.ndarray,
    dst_stride: np.ndarray,
) -> None:
    for i in range(count.shape[0]):
        c = count[i].tolist()
        if not all(c):
            continue
        src_idx = tuple(
            slice(a, a + (n - 1) * s + 1, s) for a, n, s in zip(src_start[i].tolist(), c, src_stride[i].tolist())
        )
        dst_idx = tuple(
            slice(a, a + (n - 1) * s + 1, s) for a, n, s in zip(dst_start[i].tolist(), c, dst_stride[i].tolist())
        )
        dst[dst_idx] = src[src_idx]


def _is_fixed_size(dtype: np.dtype) -> bool:
    return not dtype.hasobject and dtype.kind != "T" and dtype.itemsize > 0


def _hdf5_mem_type(src: h5py.Dataset, dst: np.ndarray) -> h5py.h5t.TypeID | None:
    """The HDF5 memory type for ``dst``, or None when the C path cannot read into it."""
    if not (_is_fixed_size(src.dtype) and _is_fixed_size(dst.dtype)):
        return None  # variable-length data: h5py converts to Python objects
    if not dst.flags.c_contiguous or dst.ndim > _H5S_MAX_RANK:
        return None
    try:
        return h5py.h5t.py_create(dst.dtype)
    except TypeError:  # no HDF5 equivalent (e.g. datetime64)
        return None


def read_many_slices_reference(
    src: h5py.Dataset | ArrayLike,
    dst: np.ndarray,
    src_start: ArrayLike,
    dst_start: ArrayLike,
    count: ArrayLike,
    src_stride: ArrayLike | None = None,
    dst_stride: ArrayLike | None = None,
) -> None:
    """Pure-Python reference implementation of :func:`read_many_slices`.

    Same parameters, validation and result; transfers one slice pair at a time
    with plain numpy / h5py slicing (``dst[dst_sel] = src[src_sel]``).  Used
    for object dtypes, as the ``"python"`` kernel backend and as the oracle of
    ``tests/test_kernels.py``.
    """
    src, arrays = _prepare(src, dst, src_start, dst_start, count, src_stride, dst_stride)
    _reference_loop(src, dst, *arrays)


def read_many_slices(
    src: h5py.Dataset | ArrayLike,
    dst: np.ndarray,
    src_start: ArrayLike,
    dst_start: ArrayLike,
    count: ArrayLike,
    src_stride: ArrayLike | None = None,
    dst_stride: ArrayLike | None = None,
) -> None:
    """Copy many n-dimensional strided slices of ``src`` into ``dst``, in place.

    For every slice pair ``i`` (row ``i`` of the index arrays)::

        dst[tuple(slice(dst_start[i, d], dst_start[i, d] + count[i, d] * dst_stride[i, d],
                        dst_stride[i, d]) for d in range(ndim))] = \\
            src[same with src_start, src_stride]

    Slice pairs are applied in order; pairs with a zero count on any axis are
    skipped.  Invariants kept by ``tests/test_kernels.py`` (compiled ==
    reference == numpy indexing, on random slice sets).

    Parameters
    ----------
    src : h5py.Dataset or array_like
        The source, ``ndim`` dimensions.  An ``h5py.Dataset`` (chunked,
        compressed or virtual) is read through libhdf5, which converts its
        dtype to ``dst.dtype`` as ``H5Dread`` does.  Anything else is
        converted with :func:`numpy.asarray` (read-only and broadcast views
        with zero strides are fine) and must have exactly ``dst.dtype``.
    dst : numpy.ndarray
        The destination, writeable, ``ndim`` dimensions, any memory layout.
    src_start, dst_start : array_like of int, shape (nslices, ndim)
        First point of each selection along each axis, in points (not bytes).
    count : array_like of int, shape (nslices, ndim)
        Number of points of each selection along each axis (the same on both
        sides).  0 skips the slice pair.
    src_stride, dst_stride : array_like of int, shape (nslices, ndim), optional
        Step between selected points along each axis, in points (1 =
        contiguous; not numpy's byte strides), >= 1.  Default: all 1.

    All index arrays must be non-negative integers; they are converted to
    C-contiguous ``uint64`` (``hsize_t``) before reaching the kernel.

    Raises
    ------
    TypeError
        ``dst`` is not a numpy array; a numpy source's dtype differs from
        ``dst.dtype``; an index array is not of an integer dtype.
    ValueError
        ``dst`` is read-only; ``src`` and ``dst`` differ in number of
        dimensions; an index array has the wrong shape, a negative value, or a
        zero stride.
    IndexError
        A non-empty slice pair reaches beyond ``src.shape`` or ``dst.shape``
        (raised before any data moves; the message names the row).
    xarray_vhdf5.errors.ClosedFileError
        ``src`` is an h5py dataset whose file was closed.
    xarray_vhdf5.errors.UnsupportedError
        ``src`` is an ``h5py.Empty`` (null dataspace) dataset.
    xarray_vhdf5.errors.HDF5Error
        libhdf5 failed (e.g. a corrupt chunk, a missing filter, a type it
        cannot convert); the message names the HDF5 function and the slice
        pair.  Slice pairs before the failing one have been transferred.
    """
    src, arrays = _prepare(src, dst, src_start, dst_start, count, src_stride, dst_stride)
    if arrays[0].shape[0] == 0 or dst.size == 0:
        return  # nothing to transfer
    if dst.ndim == 0 or _backend == "python":
        _reference_loop(src, dst, *arrays)
        return
    if isinstance(src, h5py.Dataset):
        mem_type = _hdf5_mem_type(src, dst)
        if mem_type is None:
            _reference_loop(src, dst, *arrays)
        else:
            # mem_type (an h5py TypeID) stays referenced, hence open, during the call.
            _slicetools.read_many_slices(src, dst, *arrays, mem_type.id)
        return
    if not _is_fixed_size(dst.dtype) or np.may_share_memory(src, dst):
        _reference_loop(src, dst, *arrays)
        return
    _slicetools.read_many_slices(src, dst, *arrays)
