"""A committed version's dataset as a manifest of immutable byte ranges, read without libhdf5.

Committed chunks never change in place: raw_data only grows, and each of its
chunks is written once, whole (``docs/format.md``, "Layout"). So once a version's
virtual dataset is resolved, each of its chunks named by the file offset,
stored size and filter mask of the raw_data chunk it maps, its points can be
read with ``os.pread`` and decoded here, with no libhdf5 call, while another
process updates the file's HDF5 metadata in place::

    virtual dataset (one version)         manifest                      file
    chunk (0, 0) -> raw_data rows 0:10    slot 0: bytes 4016:5216   ->  [..chunk..]
    chunk (0, 1)    unmapped              slot -1: the fill value
    chunk (1, 0) -> raw_data rows 0:10    slot 0 (deduplicated)

Only rewriting raw_data invalidates a manifest: deleting versions (which
compacts it) and ``modify_metadata``; resolve again after those.

A manifest is made by :func:`~xarray_vhdf5._backend.manifest_resolve.resolve_manifest`,
the one libhdf5 step (:mod:`~xarray_vhdf5._backend.manifest_resolve`);
:meth:`ChunkManifest.read` then reads and decodes only the chunks a selection
touches, with the decoders of :mod:`~xarray_vhdf5._backend.decoders`.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import h5py
import numpy as np

from ..errors import CorruptFileError, UnsupportedError
from ._kernels import preadtools
from .decoders import DECODED_FILTERS
from .hashing import chunk_hash
from .transfer import get_kernel_backend

__all__ = ["ChunkManifest"]


def _normalize(key: Any, shape: tuple[int, ...]) -> list[tuple[np.ndarray, bool]]:
    """Per axis, the points selected (intp, in output order) and whether the axis is kept."""
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    at = next((i for i, k in enumerate(key) if k is Ellipsis), None)
    if at is not None:
        key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1 :]
    if len(key) > len(shape):
        raise IndexError(f"too many indices: {len(key)} for {len(shape)} dimensions")
    key = key + (slice(None),) * (len(shape) - len(key))
    out, arrays = [], 0
    for axis, (k, n) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            out.append((np.arange(*k.indices(n), dtype=np.intp), True))
            continue
        arr = np.asarray(k)
        if arr.dtype == bool and arr.ndim == 1:
            if arr.size != n:
                raise IndexError(f"boolean index of length {arr.size} for axis {axis} of length {n}")
            arr = np.flatnonzero(arr)
        if arr.dtype.kind not in "iu" or arr.ndim > 1:
            raise IndexError(f"axis {axis}: only integers, slices, '...' and 1-d integer arrays are valid, got {k!r}")
        if arr.ndim == 1:
            arrays += 1
        if arrays > 1:
            raise IndexError("at most one axis may be indexed by an array (outer indexing, one vector)")
        if arr.size and (arr.min() < -n or arr.max() >= n):
            raise IndexError(f"index out of bounds for axis {axis} of size {n}")
        out.append((np.where(arr < 0, arr + n, arr).astype(np.intp).reshape(-1), arr.ndim == 1))
    return out


def _as_slice(idx: np.ndarray) -> slice | np.ndarray:
    """``idx`` as an equivalent slice when it is an arithmetic progression of nonzero step, else itself."""
    if idx.size == 1:
        return slice(int(idx[0]), int(idx[0]) + 1)
    step = int(idx[1] - idx[0])
    if step == 0 or np.any(np.diff(idx) != step):
        return idx
    stop = int(idx[-1]) + step
    return slice(int(idx[0]), stop if stop >= 0 else None, step)


def _boxes(groups: list[list[tuple[int, Any, Any]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(in_start, out_start, counts)``, intp ``(n, ndim)``, of every chunk's part; None if one is not a box.

    ``groups``: per axis, :func:`_axis_groups`' list; the chunks are their
    product in ``itertools.product`` order (the last axis fastest), and a
    part is a box when each axis' parts are step-1 slices.
    """
    per_axis = []
    for axis in groups:
        rows = []
        for _, o, p in axis:
            if not (isinstance(o, slice) and isinstance(p, slice) and o.step in (None, 1) and p.step in (None, 1)):
                return None
            rows.append((p.start, o.start, p.stop - p.start))
        per_axis.append(np.array(rows, np.intp).reshape(-1, 3))
    which = np.indices([len(a) for a in per_axis]).reshape(len(per_axis), -1)
    boxes = np.stack([a[w] for a, w in zip(per_axis, which)], axis=1)  # (n, ndim, 3)
    return boxes[:, :, 0], boxes[:, :, 1], boxes[:, :, 2]


def _axis_groups(idx: np.ndarray, chunk: int) -> list[tuple[int, Any, Any]]:
    """``(chunk number, output positions, points within the chunk)`` per chunk the points touch.

    A run of consecutive points (a step-1 slice, the common case) is cut into
    chunks by arithmetic; any other selection by sorting its points by chunk.
    """
    n = idx.size
    if n > 1 and int(idx[-1]) - int(idx[0]) == n - 1 and bool((np.diff(idx) == 1).all()):
        lo, hi = int(idx[0]), int(idx[0]) + n
        return [
            (k, slice(a - lo, b - lo, 1), slice(a - k * chunk, b - k * chunk, 1))
            for k in range(lo // chunk, (hi - 1) // chunk + 1)
            for a, b in ((max(lo, k * chunk), min(hi, (k + 1) * chunk)),)
        ]
    number = idx // chunk
    order = np.argsort(number, kind="stable")
    cuts = np.flatnonzero(np.diff(number[order])) + 1
    groups = []
    for pos in np.split(order, cuts) if idx.size else []:
        k = int(number[pos[0]])
        groups.append((k, _as_slice(pos), _as_slice(idx[pos] - k * chunk)))
    return groups


class ChunkManifest:
    """Where every chunk of one version's dataset lies in its file, as immutable byte ranges.

    Made by :func:`~.manifest_resolve.resolve_manifest`; not meant to be constructed directly.
    Holds no HDF5 object and no open file while pickled: the file descriptor
    :meth:`read` needs is opened lazily from ``path`` (again after unpickling
    or in a forked process).

    Attributes
    ----------
    path : str
        Absolute path of the HDF5 file.
    name, raw_data : str
        Absolute HDF5 paths of the virtual dataset and of its raw_data.
    shape, chunks : tuple of int
        The dataset's shape and chunk shape, in points.
    dtype : numpy.dtype
        The dataset's dtype.
    fillvalue, raw_fillvalue : numpy.ndarray, 0-d
        What unmapped chunks read as (the virtual dataset's fill value) and
        what mapped but unallocated raw_data chunks read as (raw_data's), as
        libhdf5 reads them.
    filters : tuple of (int, int, tuple)
        raw_data's filter pipeline in HDF5 order: ``(filter id, flags, cd_values)``.
    slots : numpy.ndarray of int32, shape ``ceil(shape / chunks)``
        Per virtual chunk, its stored chunk (index into the arrays below), -1 unmapped.
    rows, offsets, nbytes : numpy.ndarray of uint64, shape ``(n,)``
        Per stored chunk: its first row of raw_data (points), its file offset
        and its stored size (bytes; 0: never allocated, reads as ``raw_fillvalue``).
    filter_masks : numpy.ndarray of uint32, shape ``(n,)``
        Per stored chunk, HDF5's filter mask (bit ``i``: filter ``i`` skipped).
    digests : numpy.ndarray of uint8, shape ``(n, 32)``, or None
        Per stored chunk, its SHA-256 digest from the hash table (``verify``).
    supported : bool
        Whether :meth:`read` can decode the chunks; ``reason`` says why not.
    gate : callable or None
        Called as ``gate(start, stop)`` before bytes ``[start, stop)`` of the file
        are read, when set (not pickled): a manifest over a file still being
        written waits there for its bytes (the in-place rewrite's side copy,
        :mod:`xarray_vhdf5._versions.sidecopy`). None: read at once.
    """

    def __init__(
        self,
        *,
        path,
        name,
        raw_data,
        shape,
        chunks,
        dtype,
        fillvalue,
        raw_fillvalue,
        filters,
        filter_names,
        slots,
        rows,
        offsets,
        nbytes,
        filter_masks,
        digests,
        verify,
        reason,
    ):
        self.path, self.name, self.raw_data = path, name, raw_data
        self.shape, self.chunks, self.dtype = tuple(shape), tuple(chunks), np.dtype(dtype)
        self.fillvalue, self.raw_fillvalue = fillvalue, raw_fillvalue
        self.filters, self.filter_names = filters, filter_names
        self.slots, self.rows, self.offsets, self.nbytes = slots, rows, offsets, nbytes
        self.filter_masks, self.digests, self.verify, self.reason = filter_masks, digests, verify, reason
        self._fd, self._pid, self._lock = None, None, threading.Lock()
        self.gate: Callable[[int, int], None] | None = None
        self._parent: ChunkManifest | None = None  # remapped(): whose file descriptor this one reads through

    def remapped(self, name: str, shape: tuple[int, ...], slots: np.ndarray) -> ChunkManifest:
        """A manifest of another dataset over the same stored chunks (another version of it).

        Parameters
        ----------
        name : str
            Absolute HDF5 path of that dataset's virtual dataset (for messages).
        shape : tuple of int
            Its shape, points.
        slots : numpy.ndarray of int
            Per chunk of its grid (``ceil(shape / chunks)``), the index of its
            stored chunk in this manifest's arrays, -1 unmapped.

        Returns
        -------
        ChunkManifest
            Sharing this one's arrays of stored chunks (not copied) and its
            file descriptor (opened at the first read of either; closed by
            this one's :meth:`close`, not the new one's).

        Raises
        ------
        ValueError
            ``slots`` does not have the grid's shape, or names a stored chunk this manifest lacks.
        """
        shape = tuple(int(n) for n in shape)
        grid = tuple(-(-n // c) for n, c in zip(shape, self.chunks, strict=True))
        if slots.shape != grid:
            raise ValueError(f"slots of shape {slots.shape} for a grid of {grid} chunks")
        if slots.size and int(slots.max()) >= len(self.rows):
            raise ValueError(f"slot {int(slots.max())} past the {len(self.rows)} stored chunks")
        state = self.__getstate__()
        state.update(name=name, shape=shape, slots=slots.astype(np.int32, copy=False))
        other = ChunkManifest.__new__(ChunkManifest)
        other.__setstate__(state)
        other._parent = self._parent or self
        return other

    supported = property(lambda self: self.reason is None, doc="Whether :meth:`read` can decode the chunks.")
    ndim = property(lambda self: len(self.shape), doc="Number of axes.")

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_fd", "_pid", "_lock", "gate")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_parent", None)
        self._fd, self._pid, self._lock = None, None, threading.Lock()
        self.gate = None

    def _descriptor(self) -> int:
        if self._parent is not None:
            return self._parent._descriptor()
        with self._lock:
            if self._fd is None or self._pid != os.getpid():
                if self._fd is not None:  # inherited through fork: the child's own copy
                    os.close(self._fd)
                self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                self._pid = os.getpid()
            return self._fd

    def _stored_bytes(self, slot: int) -> tuple[int, int]:
        """Stored chunk ``slot``'s (file offset, size), after waiting at :attr:`gate` for them."""
        at, n = int(self.offsets[slot]), int(self.nbytes[slot])
        if self.gate is not None:
            self.gate(at, at + n)
        return at, n

    def close(self) -> None:
        """Close the file descriptor, if open (a later :meth:`read` reopens it)."""
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = None

    def __del__(self):
        if getattr(self, "_lock", None) is not None:
            try:
                self.close()
            except OSError:  # already closed by someone else; nothing left to release
                pass

    def __repr__(self) -> str:
        filters = "+".join(self.filter_names) or "none"
        status = "supported" if self.supported else f"unsupported: {self.reason}"
        mapped = int(np.count_nonzero(self.slots >= 0))
        return (
            f"<ChunkManifest {self.name} in {self.path}: shape {self.shape} {self.dtype}, "
            f"chunks {self.chunks}, {mapped} of {self.slots.size} chunks mapped ({self.rows.size} "
            f"stored, {int(self.nbytes.sum())} bytes on disk), filters {filters}, {status}>"
        )

    def __getitem__(self, key: Any) -> np.ndarray:
        """``self.read(key)``, so a manifest can back ``dask.array.from_array``."""
        return self.read(key)

    def _fail(self, slot: int, where: tuple, what: str) -> CorruptFileError:
        row, off, n = int(self.rows[slot]), int(self.offsets[slot]), int(self.nbytes[slot])
        return CorruptFileError(
            f"{self.path}: dataset {self.name}, chunk {where} (raw_data {self.raw_data} rows "
            f"{row}:{row + self.chunks[0]}, bytes {off}:{off + n} of the file): {what}",
            path=self.path,
        )

    def _chunk(self, slot: int, where: tuple) -> np.ndarray:
        """Stored chunk ``slot`` (mapped at virtual chunk ``where``), decoded, of shape ``chunks``."""
        at, n = self._stored_bytes(slot)
        if n == 0:
            return np.broadcast_to(self.raw_fillvalue, self.chunks)
        data = os.pread(self._descriptor(), n, at)
        if len(data) < n:
            raise self._fail(slot, where, f"the file ends {len(data)} bytes into the chunk (truncated)")
        size = self.dtype.itemsize * int(np.prod(self.chunks))
        sizes = [size]  # sizes[i]: bytes out of decoding filter i (into filter i at write time)
        for i, (fid, _, _) in enumerate(self.filters[:-1]):
            applied = not (int(self.filter_masks[slot]) >> i) & 1
            sizes.append(sizes[-1] + (4 if applied and fid == h5py.h5z.FILTER_FLETCHER32 else 0))
        view = memoryview(data)
        for i in reversed(range(len(self.filters))):
            if (int(self.filter_masks[slot]) >> i) & 1:
                continue
            fid, _, cd = self.filters[i]
            try:
                view = memoryview(DECODED_FILTERS[fid](view, cd, sizes[i])).cast("B")
            except Exception as exc:  # every codec library raises its own class
                raise self._fail(slot, where, f"filter {self.filter_names[i]} failed: {exc}") from exc
        if view.nbytes != size:
            raise self._fail(slot, where, f"decoded to {view.nbytes} bytes, expected {size}")
        return np.frombuffer(view, self.dtype).reshape(self.chunks)

    def _slot(self, index: tuple[int, ...]) -> int:
        index = tuple(int(i) for i in index)
        if len(index) != len(self.shape) or not all(0 <= i < n for i, n in zip(index, self.slots.shape)):
            raise IndexError(f"chunk {index} is outside the chunk grid {self.slots.shape} of {self.name}")
        return int(self.slots[index])

    def stored_chunk(self, index: tuple[int, ...]) -> tuple[bytes, int] | None:
        """The bytes of the stored chunk mapped at chunk ``index``, as the file holds them.

        Parameters
        ----------
        index : tuple of int
            The chunk's position in the chunk grid (``ceil(shape / chunks)``).

        Returns
        -------
        (bytes, int) or None
            The chunk's bytes, encoded by raw_data's filter pipeline
            (:attr:`filters`) except the filters whose bit is set in the
            returned filter mask, and that mask; ``b""`` for a chunk never
            allocated (it reads as :attr:`raw_fillvalue`); None for an
            unmapped chunk (it reads as :attr:`fillvalue`). Not checked
            against the hash table's digest (see :meth:`decoded_chunk`).

        Raises
        ------
        IndexError
            ``index`` is outside the chunk grid.
        xarray_vhdf5.errors.CorruptFileError
            The file ends inside the chunk.
        """
        slot = self._slot(index)
        if slot < 0:
            return None
        at, n = self._stored_bytes(slot)
        if n == 0:
            return b"", 0
        data = os.pread(self._descriptor(), n, at)
        if len(data) < n:
            raise self._fail(slot, tuple(index), f"the file ends {len(data)} bytes into the chunk (truncated)")
        return data, int(self.filter_masks[slot])

    def read_chunk_into(self, index: tuple[int, ...], out: np.ndarray) -> bool:
        """Read stored chunk ``index`` into ``out`` when it needs no decoding; say whether it did.

        For a chunk stored unfiltered (no filter, or every filter skipped by its
        mask), mapped, allocated, and not verified: ``out`` (dtype :attr:`dtype`,
        writable, any strides, as many axes as the dataset, at most :attr:`chunks`
        points along each) receives the chunk's first ``out.shape`` points along
        each axis (the whole chunk, or an edge chunk trimmed to the dataset),
        through :meth:`read`'s own reader of unfiltered chunks (the compiled
        ``preadv`` straight into ``out`` where its last axis is contiguous). No
        array is made. Otherwise nothing is read and False is returned: use
        :meth:`decoded_chunk`.

        Raises
        ------
        IndexError
            ``index`` is outside the chunk grid.
        xarray_vhdf5.errors.CorruptFileError
            The file ends inside the chunk (``out`` is then partly overwritten).
        """
        slot = self._slot(index)
        if (
            slot < 0
            or self.verify
            or not self.supported
            or out.dtype != self.dtype
            or not out.flags.writeable
            or out.ndim != len(self.chunks)
            or any(n > c for n, c in zip(out.shape, self.chunks))
        ):
            return False
        mask = int(self.filter_masks[slot])
        if any(not (mask >> i) & 1 for i in range(len(self.filters))):
            return False
        if int(self.nbytes[slot]) != int(np.prod(self.chunks)) * self.dtype.itemsize:  # never allocated (0)
            return False
        if not out.size:
            return True
        if self._kernel_takes(out):  # the common case, kept lean: one call, no boxes to build
            self._stored_bytes(slot)  # waits at the gate
            zero = np.zeros((1, out.ndim), np.intp)
            self._kernel_read(out, [slot], zero, zero, np.array([out.shape], np.intp), lambda _: tuple(index))
        else:
            parts = tuple((int(k), slice(0, n), slice(0, n)) for k, n in zip(index, out.shape))
            self._read_unfiltered_reference([parts], [slot], out)
        return True

    def decoded_chunk(self, index: tuple[int, ...]) -> np.ndarray:
        """The points of chunk ``index``, decoded, of shape :attr:`chunks` (edge chunks padded as stored).

        Checked against the hash table's digest when the manifest verifies
        (:attr:`verify`). Raises as :meth:`stored_chunk`, and
        :class:`~xarray_vhdf5.errors.UnsupportedError` when :attr:`supported` is False.
        """
        if not self.supported:
            raise UnsupportedError(f"{self.name} in {self.path} cannot be read without libhdf5: {self.reason}")
        slot = self._slot(index)
        if slot < 0:
            return np.broadcast_to(np.asarray(self.fillvalue, self.dtype), self.chunks)
        if self.verify:
            return self._decode_batch([tuple((k, None, None) for k in index)], [slot], True, None)[slot]
        return self._chunk(slot, tuple(index))

    def read(self, key: Any = (), verify: bool | None = None, threads: int | None = None) -> np.ndarray:
        """Read the points ``key`` selects, decoding only the chunks it touches.

        Parameters
        ----------
        key : tuple
            Per axis an int (the axis is dropped), a slice of any step, or a
            1-d integer (or boolean) array; at most one array (xarray's
            ``OUTER_1VECTOR``: each axis indexed on its own, as h5py does);
            ``...`` stands for the axes not given, missing trailing axes are
            whole. Negative ints count from the end.
        verify : bool, optional
            Re-hash every chunk read (:func:`~xarray_vhdf5._backend.hashing.chunk_hash`
            of the chunk trimmed to the dataset's shape, the format's rule) and
            compare with the hash table's digest. Default: ``self.verify``.
        threads : int, optional
            Threads decoding chunks in parallel (a pool shared by all
            manifests): default as many as the machine has cores (at most 8)
            when the selection touches 4 stored chunks or more; unfiltered
            chunks read by the chunk-read kernel are split among them when
            they hold at least :data:`SPLIT_BYTES` (copying from the page
            cache, and the page faults of a new result, then run on every
            core); 0 or 1: this thread only. Decoded chunks are held 64 at a
            time.

        Returns
        -------
        numpy.ndarray
            Of ``dtype``, a new array; one axis per entry of ``key`` that is
            not an int, as long as its selection (possibly 0); 0-d when every
            axis is an int (h5py returns a numpy scalar there).

        Raises
        ------
        IndexError
            An index out of bounds, more than one array, or an unsupported kind of index.
        ValueError
            ``verify`` without digests (resolved with ``verify=False``).
        xarray_vhdf5.errors.UnsupportedError
            ``supported`` is False: read through h5py instead.
        xarray_vhdf5.errors.CorruptFileError
            A chunk past the end of the file, failing to decode (including a
            Fletcher-32 mismatch), of the wrong size, or (``verify``) whose
            digest differs from the hash table's.
        OSError
            The file cannot be opened or read.
        """
        if not self.supported:
            raise UnsupportedError(
                f"{self.name} in {self.path} cannot be read without libhdf5 (read it through h5py): {self.reason}"
            )
        verify = self.verify if verify is None else verify
        if verify and self.digests is None:
            raise ValueError("verify needs the hash table's digests: resolve the manifest with verify=True")
        point = self._point(key)
        if point is not None and not verify:  # one point: its chunk, no selection machinery
            slot = int(self.slots[tuple(i // c for i, c in zip(point, self.chunks))])
            if slot < 0:
                return np.array(self.fillvalue, self.dtype)
            where = tuple(i // c for i, c in zip(point, self.chunks))
            value = self._chunk(slot, where)[tuple(i % c for i, c in zip(point, self.chunks))]
            return np.array(value, self.dtype)  # numpy's scalars are native-endian: keep the stored order
        axes = _normalize(key, self.shape)
        final = tuple(idx.size for idx, kept in axes if kept)
        out = np.empty(tuple(idx.size for idx, _ in axes), self.dtype)
        if out.size == 0:
            return out.reshape(final)
        groups = [_axis_groups(idx, c) for (idx, _), c in zip(axes, self.chunks)]
        touched = list(itertools.product(*groups))
        slots = self.slots[np.ix_(*[[k for k, _, _ in axis] for axis in groups])].reshape(-1).tolist()
        if not self.filters and not verify:
            self._read_unfiltered(touched, slots, out, groups, threads)
            return out.reshape(final)
        pool = _pool(threads, len(set(slots) - {-1})) if self.filters or threads else None
        for start in range(0, len(touched), _BATCH):
            batch = range(start, min(start + _BATCH, len(touched)))
            decoded = self._decode_batch([touched[i] for i in batch], [slots[i] for i in batch], verify, pool)
            for i in batch:
                parts, slot = touched[i], slots[i]
                target = tuple(o for _, o, _ in parts)
                if slot < 0:
                    out[target] = self.fillvalue
                else:
                    out[target] = decoded[slot][tuple(i for _, _, i in parts)]
        return out.reshape(final)

    def _read_unfiltered(
        self, touched: list, slots: list[int], out: np.ndarray, groups: list, threads: int | None = None
    ) -> None:
        """Fill ``out`` from chunks stored as they are (no filter applied), with no decoding.

        Where every chunk's part is a box (step-1 slices on every axis) and
        ``out``'s last axis is contiguous, by the compiled kernel
        ``preadtools.read_chunks_into``: one ``preadv`` a chunk whose vectors
        point into ``out``, each byte copied once. Otherwise (or with the
        pure-Python kernels selected), by :meth:`_read_unfiltered_reference`.
        ``groups``: the per-axis parts ``touched`` is the product of;
        ``threads`` as for :meth:`read`.
        """
        boxes = _boxes(groups) if self._kernel_takes(out) else None
        if boxes is None:
            self._read_unfiltered_reference(touched, slots, out)
            return
        size = int(np.prod(self.chunks)) * self.dtype.itemsize
        which = np.asarray(slots, np.int64)
        stored = np.zeros(len(which), np.int64)
        mapped = which >= 0
        if self.gate is None:
            stored[mapped] = self.nbytes[which[mapped]]
        else:  # wait at the gate for each chunk, in order
            for i in np.flatnonzero(mapped).tolist():
                stored[i] = self._stored_bytes(slots[i])[1]
        bad = np.flatnonzero(mapped & (stored != 0) & (stored != size))
        if len(bad):
            i = int(bad[0])
            what = f"stored as {int(stored[i])} bytes, expected {size} (no filter)"
            raise self._fail(slots[i], tuple(k for k, _, _ in touched[i]), what)
        for i in np.flatnonzero(~mapped).tolist():
            out[tuple(o for _, o, _ in touched[i])] = self.fillvalue
        for i in np.flatnonzero(mapped & (stored == 0)).tolist():  # never allocated: raw_data's fill value
            out[tuple(o for _, o, _ in touched[i])] = self.raw_fillvalue
        read = np.flatnonzero(mapped & (stored == size))
        if not len(read):
            return
        in_start, out_start, counts = (box[read] for box in boxes)

        def index_of(j: int) -> tuple:
            return tuple(k for k, _, _ in touched[int(read[j])])

        self._kernel_read(out, which[read], in_start, out_start, counts, index_of, threads)

    @staticmethod
    def _kernel_takes(out: np.ndarray) -> bool:
        """Whether ``preadtools.read_chunks_into`` can fill ``out``: built, selected, last axis contiguous."""
        return (
            preadtools is not None
            and get_kernel_backend() == "cython"
            and (out.shape[-1] <= 1 or out.strides[-1] == out.itemsize)
            and min(out.strides, default=0) >= 0
        )

    def _kernel_read(self, out, slots, in_start, out_start, counts, where, threads: int | None = 1) -> None:
        """``preadtools.read_chunks_into`` of stored chunks ``slots`` (whole, unfiltered) into their boxes of ``out``.

        ``slots``: a list or int array; ``in_start``, ``out_start``, ``counts``:
        intp ``(len(slots), out.ndim)``, points; ``where(j)``: the chunk index
        of ``slots[j]``, for the message. ``threads``: as for :meth:`read`;
        the chunks are then split into as many runs, each read by the kernel
        (which holds no GIL) in a thread of the shared pool, when they hold
        :data:`SPLIT_BYTES` or more.

        Raises
        ------
        xarray_vhdf5.errors.CorruptFileError
            The file ends inside a chunk (``out`` is then partly written).
        OSError
            ``preadv`` failed.
        """
        fd = self._descriptor()
        offsets = self.offsets[slots]
        n = len(offsets)
        size = int(np.prod(self.chunks)) * self.dtype.itemsize
        pool = _pool(threads, n) if n * size >= SPLIT_BYTES else None
        if pool is None:
            failed = preadtools.read_chunks_into(fd, out, self.chunks, offsets, in_start, out_start, counts)
        else:
            parts = min(pool._max_workers, n, min(os.cpu_count() or 1, 8) if threads is None else int(threads))
            cuts = [n * i // parts for i in range(parts + 1)]
            runs = [(a, b) for a, b in itertools.pairwise(cuts) if b > a]
            futures = [
                pool.submit(
                    preadtools.read_chunks_into,
                    fd,
                    out,
                    self.chunks,
                    offsets[a:b],
                    in_start[a:b],
                    out_start[a:b],
                    counts[a:b],
                )
                for a, b in runs
            ]
            found = [f.result() for f in futures]
            failed = next((a + r for (a, _), r in zip(runs, found, strict=True) if r >= 0), -1)
        if failed >= 0:
            got = max(0, min(os.fstat(fd).st_size - int(offsets[failed]), size))
            raise self._fail(int(slots[failed]), where(failed), f"the file ends {got} bytes into the chunk (truncated)")

    def _read_unfiltered_reference(self, touched: list, slots: list[int], out: np.ndarray) -> None:
        """:meth:`_read_unfiltered` in Python: each chunk read into one reused buffer, then copied out.

        No decoding and no array made per chunk (``os.preadv`` into the
        buffer, then numpy's copy of the selected part into ``out``), which
        is what libhdf5 does for a chunked read too. Any selection.
        """
        buf = np.empty(self.chunks, self.dtype)
        view = buf.data.cast("B")
        fd = self._descriptor()
        held = -1  # the stored chunk in the buffer
        for parts, slot in zip(touched, slots, strict=True):
            target = tuple(o for _, o, _ in parts)
            if slot < 0:
                out[target] = self.fillvalue
                continue
            if slot != held:
                at, n = self._stored_bytes(slot)
                if n == 0:  # never allocated: raw_data's fill value
                    out[target] = self.raw_fillvalue
                    continue
                where = tuple(k for k, _, _ in parts)
                if n != buf.nbytes:
                    raise self._fail(slot, where, f"stored as {n} bytes, expected {buf.nbytes} (no filter)")
                got = os.preadv(fd, [view], at)
                if got < n:
                    held = -1
                    raise self._fail(slot, where, f"the file ends {got} bytes into the chunk (truncated)")
                held = slot
            out[target] = buf[tuple(i for _, _, i in parts)]

    def _point(self, key: Any) -> tuple[int, ...] | None:
        """The point ``key`` names when it is one int per axis (negatives counted from the end), else None."""
        key = key if isinstance(key, tuple) else (key,)
        if len(key) != len(self.shape) or not all(
            isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in key
        ):
            return None
        point = tuple(int(k) + n if k < 0 else int(k) for k, n in zip(key, self.shape))
        return point if all(0 <= i < n for i, n in zip(point, self.shape)) else None

    def _decode_batch(self, touched: list, slots: list[int], verify: bool, pool) -> dict[int, np.ndarray]:
        """Each stored chunk of ``slots`` decoded (and, ``verify``, checked) once, by ``pool``'s threads if any."""
        first: dict[int, tuple] = {}
        extents: dict[int, set] = {}
        for parts, slot in zip(touched, slots):
            if slot >= 0:
                where = tuple(k for k, _, _ in parts)
                first.setdefault(slot, where)
                extents.setdefault(slot, set()).add(
                    tuple(min(c, n - k * c) for k, c, n in zip(where, self.chunks, self.shape))
                )

        def decode(slot: int) -> np.ndarray:
            where = first[slot]
            data = self._chunk(slot, where)
            for extent in extents[slot] if verify else ():  # the format hashes chunks trimmed to the dataset
                trimmed = np.ascontiguousarray(data[tuple(map(slice, extent))])
                if chunk_hash(trimmed) != self.digests[slot].tobytes():
                    raise self._fail(slot, where, "its SHA-256 differs from the hash table's digest")
            return data

        if pool is None or len(first) < 2:
            return {slot: decode(slot) for slot in first}
        return dict(zip(first, pool.map(decode, first)))


#: Bytes of unfiltered chunks from which a read splits them among threads (:meth:`ChunkManifest.read`).
#: Below it a thread's start and hand-off cost more than the copy they share.
SPLIT_BYTES = 4 * 1024 * 1024

#: Chunks decoded at once by a threaded read (bounds the memory of decoded chunks held).
_BATCH = 64
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _forget_pool_in_child() -> None:
    """A forked child has none of the pool's threads: it makes its own pool (and lock)."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _pool(threads: int | None, chunks: int) -> ThreadPoolExecutor | None:
    """The shared thread pool when a read of ``chunks`` stored chunks should use threads, else None.

    ``threads`` None: as many as the machine has cores (at most 8) once a read
    touches 4 chunks or more; 0 or 1: none. zlib (through imagecodecs and
    numcodecs) and ``os.pread`` release the GIL, so chunks decode in parallel.
    """
    n = min(os.cpu_count() or 1, 8) if threads is None else int(threads)
    if n <= 1 or chunks < (4 if threads is None else 2):
        return None
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < n:
            _POOL = ThreadPoolExecutor(max_workers=n, thread_name_prefix="vhdf5-decode")
        return _POOL
