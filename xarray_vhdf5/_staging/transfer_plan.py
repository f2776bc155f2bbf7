"""Slice transfers grouped by (source, destination) pair, and their execution.

A :class:`TransferPlan` is the last step of every plan (versioned-hdf5's ``staged_changes.rst``,
"General plans algorithm", steps 5-9): a list of :class:`Transfer`, each one
call of :func:`xarray_vhdf5._backend.transfer.read_many_slices` between one
source and one destination:

- a source is a slab index (full, base or staged slab) or :data:`VALUE`,
  the normalised ``__setitem__`` value;
- a destination is a slab index (always a staged slab) or :data:`OUT`, the
  normalised ``__getitem__`` result.

Execution (:func:`move`) takes the fast route to the compiled kernel of
:mod:`xarray_vhdf5._ext.slicetools` directly, skipping the argument
validation of the public ``read_many_slices``: plans only emit slice pairs
that are in bounds by construction (``tests/test_staging_model.py`` runs
every operation through the validating public function too, with the
``"python"`` kernel backend).  It routes to the public, validating function
whenever the compiled kernel cannot do the transfer (object and
variable-length string dtypes, 0-d arrays, overlapping memory, an HDF5 read
into a dtype without an HDF5 equivalent), and to a per-slice
``dst[...] = src[...]`` loop for sources that are neither numpy arrays nor
h5py datasets (e.g. ``h5py.Dataset.astype()`` views), which must not be
converted with ``numpy.asarray`` as a whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import h5py
import numpy as np

from .._backend import transfer
from .._backend._kernels import slicetools as _slicetools  # None if not built: every use checks
from .._backend.h5objects import memory_type
from ..errors import ClosedFileError

__all__ = ["OUT", "VALUE", "Transfer", "TransferPlan", "direct_copy_kernel", "move"]

#: Source index meaning the (normalised) ``__setitem__`` value.
VALUE = -1
#: Destination index meaning the (normalised) ``__getitem__`` result.
OUT = -2


class Transfer(NamedTuple):
    """One ``read_many_slices`` call: many n-d slice pairs between one source and one destination.

    Attributes
    ----------
    src : int
        Slab index, or :data:`VALUE`.
    dst : int
        Slab index, or :data:`OUT`.
    src_start, dst_start, count, src_stride, dst_stride : numpy.ndarray of uint64
        Each of shape ``(nslices, ndim)``, C-contiguous, in points; strides
        are steps (1 = contiguous), not byte strides.
    """

    src: int
    dst: int
    src_start: np.ndarray
    dst_start: np.ndarray
    count: np.ndarray  # type: ignore[assignment]  # shadows tuple.count: the kernel's argument name
    src_stride: np.ndarray
    dst_stride: np.ndarray

    @property
    def n_slices(self) -> int:
        return self.count.shape[0]

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(src_start, dst_start, count, src_stride, dst_stride)``."""
        return (self.src_start, self.dst_start, self.count, self.src_stride, self.dst_stride)

    def lines(self) -> list[str]:
        """One ``dst[...] = src[...]`` line per slice pair."""
        dst_name = _name(self.dst)
        src_name = _name(self.src)
        out = []
        for ss, ds, c, sst, dst in zip(
            self.src_start.tolist(),
            self.dst_start.tolist(),
            self.count.tolist(),
            self.src_stride.tolist(),
            self.dst_stride.tolist(),
        ):
            out.append(f"{dst_name}{_fmt(ds, c, dst)} = {src_name}{_fmt(ss, c, sst)}")
        return out


def _name(i: int) -> str:
    if i == VALUE:
        return "value"
    if i == OUT:
        return "out"
    return f"slabs[{i}]"


def _fmt(start: list[int], count: list[int], stride: list[int]) -> str:
    if not start:
        return "[()]"
    parts = []
    for a, n, s in zip(start, count, stride):
        if s == 1 or n <= 1:
            parts.append(f"{a}:{a + n}")
        else:
            parts.append(f"{a}:{a + (n - 1) * s + 1}:{s}")
    return "[" + ", ".join(parts) + "]"


class TransferPlan:
    """The transfers of a plan, in execution order.

    Parameters
    ----------
    transfers : list of Transfer
        Transfers with no slice pair are dropped.
    checked : bool
        The caller guarantees there is none: skip the filter (hot paths).
    """

    __slots__ = ("transfers",)

    def __init__(self, transfers: list[Transfer] | None = None, *, checked: bool = False):
        self.transfers: list[Transfer]
        if checked:  # the caller guarantees that no transfer is empty
            self.transfers = transfers if transfers is not None else []
        else:
            self.transfers = [t for t in (transfers or []) if t.n_slices]

    def append(self, t: Transfer) -> None:
        if t.n_slices:
            self.transfers.append(t)

    def __iter__(self) -> Iterator[Transfer]:
        return iter(self.transfers)

    def __len__(self) -> int:
        return len(self.transfers)

    @property
    def n_slices(self) -> int:
        """Total number of slice pairs."""
        return sum(t.n_slices for t in self.transfers)

    @property
    def n_pairs(self) -> int:
        """Number of distinct (source, destination) pairs."""
        return len({(t.src, t.dst) for t in self.transfers})

    def summary(self) -> str:
        return f"{self.n_slices} slice transfers among {self.n_pairs} slab pairs"

    def lines(self) -> list[str]:
        out = []
        for t in self.transfers:
            out.append(f"# {t.n_slices} transfers from {_name(t.src)} to {_name(t.dst)}")
            out.extend(t.lines())
        return out


# ---------------------------------------------------------------------------
# Execution
# ---------------------------------------------------------------------------


def _mem_type_id(dtype: np.dtype) -> int | None:
    """HDF5 memory type id for reading into ``dtype``; None if the C path cannot."""
    tid = memory_type(dtype)
    return None if tid is None else tid.id


def _slice_loop(src: Any, dst: np.ndarray, arrays: Sequence[np.ndarray]) -> None:
    """``dst[...] = src[...]`` per slice pair, for array-likes numpy cannot view."""
    for ss, ds, c, sst, dst_s in zip(*(a.tolist() for a in arrays)):
        if not all(c):
            continue
        src_idx = tuple(slice(a, a + (n - 1) * s + 1, s) for a, n, s in zip(ss, c, sst))
        dst_idx = tuple(slice(a, a + (n - 1) * s + 1, s) for a, n, s in zip(ds, c, dst_s))
        dst[dst_idx] = np.asarray(src[src_idx], dtype=dst.dtype)


def direct_copy_kernel(dst: np.ndarray) -> Any:
    """The compiled ``read_many_slices`` if numpy sources of ``dst.dtype`` may use it directly.

    That is: the compiled kernels are selected, ``dst`` has dimensions and a
    fixed-size dtype.  The caller must still check that the source is a
    numpy array of ``dst.dtype`` that cannot overlap ``dst``; everything
    else goes through :func:`move`.  Returns None otherwise.
    """
    if _slicetools is None or not dst.ndim or transfer.get_kernel_backend() != "cython":
        return None
    dtype = dst.dtype
    if dtype.hasobject or dtype.kind == "T":
        return None
    return _slicetools.read_many_slices


def move(src: Any, dst: np.ndarray, arrays: Sequence[np.ndarray], fresh: bool = False) -> None:
    """Execute one transfer: ``read_many_slices(src, dst, *arrays)``.

    Parameters
    ----------
    src : numpy.ndarray, h5py.Dataset or array-like
        The source; for numpy, of ``dst.dtype``.
    dst : numpy.ndarray
        Writeable destination.
    arrays : tuple of numpy.ndarray
        ``src_start, dst_start, count, src_stride, dst_stride`` (uint64,
        ``(nslices, ndim)``, C-contiguous; :attr:`Transfer.arrays`), in
        bounds of both ``src`` and ``dst`` (guaranteed by the plans).
    fresh : bool
        ``dst`` was just allocated, so it cannot share memory with ``src``
        (skips the overlap check).

    Raises
    ------
    xarray_vhdf5.errors.ClosedFileError
        ``src`` is an h5py dataset whose file was closed.
    xarray_vhdf5.errors.HDF5Error
        libhdf5 failed reading ``src``.
    """
    src_start, dst_start, count, src_stride, dst_stride = arrays
    if _slicetools is not None and dst.ndim and transfer.get_kernel_backend() == "cython":
        dtype = dst.dtype
        if type(src) is np.ndarray:
            if (
                src.dtype == dtype
                and not dtype.hasobject
                and dtype.kind != "T"
                and (fresh or not np.may_share_memory(src, dst))
            ):
                _slicetools.read_many_slices(src, dst, src_start, dst_start, count, src_stride, dst_stride)
                return
        elif isinstance(src, h5py.Dataset):
            mem_type = _mem_type_id(dtype) if not src.dtype.hasobject else None
            if mem_type is not None and dst.flags.c_contiguous:
                if not src.id.valid:
                    raise ClosedFileError("cannot read from a closed h5py dataset (its file was closed); reopen it")
                _slicetools.read_many_slices(src, dst, src_start, dst_start, count, src_stride, dst_stride, mem_type)
                return
    if not isinstance(src, (np.ndarray, h5py.Dataset)):
        _slice_loop(src, dst, arrays)
        return
    transfer.read_many_slices(src, dst, *arrays)
