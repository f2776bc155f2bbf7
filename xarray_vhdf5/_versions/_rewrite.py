"""Building a dataset's new chunks, version by version, for ``modify_metadata``.

:class:`_Rewriter` writes the new chunks of each version once per distinct
content (the module docs of :mod:`.metadata` explain the keys); a version whose
chunk shape changes goes through the resplit engine (:mod:`.rechunk`), one
whose shape is kept is cast chunk by chunk (``read_many_slices``, HDF5's
conversion). :class:`_OneSourceRewriter` reads every version's old chunks from
one source given to it: their copy in the side file (the in-place rewrite), or
raw_data's chunks where they lie in the file (a rewrite after the end). The target of a run (:class:`_Target`) and the
checks made before anything is written (casts, budget) are here too.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np
from h5py import h5t

from .._backend.chunks import chunk_grid_shape, chunk_slices, guess_chunks_h5py, normalize_chunks
from .._backend.hashing import is_vlen_string_dtype
from .._backend.manifest import ChunkManifest
from .._backend.raw_data import ChunkWriter, Filters
from .._backend.transfer import read_many_slices
from ..errors import IncompatibleDataError, MemoryBudgetError
from ..resplit import minimum_memory, parse_bytes
from .objects import read_chunk_map
from .rechunk import RechunkReport, resplit_version

__all__ = ["BATCH_BYTES", "UNCHANGED"]

#: Bytes of chunk data read (and queued for writing) per batch.
BATCH_BYTES = 1024 * 1024


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


#: Default of the filter arguments: keep the dataset's setting (None means "no filter").
UNCHANGED: Any = _Unchanged()


@dataclass(frozen=True)
class _Target:
    dtype: np.dtype
    chunks: tuple[int, ...]
    fillvalue: Any
    filters: Filters
    given_fill: Any  # the fill value the user gave (or the interrupted run's), else None


def _string_like(dtype: np.dtype) -> bool:
    return dtype.kind == "S" or is_vlen_string_dtype(dtype)


def _check_cast(src: np.dtype, dst: np.dtype) -> None:
    """Refuse casts HDF5's conversion (``H5Dread``) cannot do, before anything is written.

    Strings convert only to strings (fixed <-> variable length, through numpy).

    Raises
    ------
    IncompatibleDataError
        No conversion from ``src`` to ``dst`` (e.g. float -> bytes, float -> bool,
        complex <-> real, anything -> datetime64).
    """
    if _string_like(src) or _string_like(dst):
        if not (_string_like(src) and _string_like(dst)):
            raise IncompatibleDataError(f"cannot cast {src} data to {dst}: no conversion between strings and numbers")
        return
    buf = np.zeros(1, np.dtype((np.void, max(src.itemsize, dst.itemsize))))
    try:
        h5t.convert(h5t.py_create(src), h5t.py_create(dst), 1, buf)
    except (TypeError, ValueError) as exc:
        raise IncompatibleDataError(f"cannot cast {src} data to {dst}: {exc}") from None


def _numpy_cast(value: Any, dst: np.dtype) -> Any:
    """``value`` cast by numpy, as versioned-hdf5 casts the fill value of unstored chunks."""
    if value is None:  # variable-length strings: unstored points read as b""
        value = b""
    if is_vlen_string_dtype(dst):
        return value if isinstance(value, bytes) else str(value).encode()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.array(value).astype(dst)[()]


def _target(base: h5py.Dataset, interrupted: bool, shapes: list, chunks, dtype, fillvalue, filters: dict) -> _Target:
    """The new metadata: the arguments given, the rest from ``base`` (raw_data, or the interrupted run's)."""
    base_dtype = base.dtype
    if dtype is None:
        new_dtype = base_dtype
    else:
        new_dtype = np.dtype(dtype)
        if new_dtype.kind in "UT" or (new_dtype.kind == "O" and not is_vlen_string_dtype(new_dtype)):
            raise IncompatibleDataError(f"dtype {new_dtype} cannot be stored; use h5py.string_dtype()")
        if new_dtype.kind == "O" and h5py.check_string_dtype(new_dtype) is None:
            new_dtype = h5py.string_dtype()
    ndim = len(base.attrs["chunks"])
    if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool) and ndim == 1:
        chunks = (int(chunks),)  # an int for 1-d, as h5py takes it (versioned-hdf5 2.6 refuses it)
    if chunks is False or not (chunks is None or chunks is True or isinstance(chunks, tuple)):
        # versioned-hdf5 2.6's message.
        raise IncompatibleDataError(
            f"chunks must be a tuple of int (one per axis), True to choose one, or None to keep the current "
            f"one, got {chunks!r}" + (" (versioned datasets are always chunked)" if chunks is False else "")
        )
    if isinstance(chunks, tuple) and len(chunks) != ndim:
        raise IncompatibleDataError(
            f"shape and chunk_size must have the same dimensionality: the dataset has {ndim} "
            f"dimension(s), chunks {chunks!r}"
        )
    if chunks is None:
        new_chunks = tuple(int(c) for c in base.attrs["chunks"])
    elif chunks is True and ndim == 1:
        # versioned-hdf5 2.6 guesses for an empty 1-d dataset, i.e. for 1024 points.
        new_chunks = guess_chunks_h5py((0,), new_dtype.itemsize)
    else:
        largest = tuple(max([s[d] for s in shapes] or [1]) for d in range(ndim))
        new_chunks = normalize_chunks(chunks, largest, new_dtype)
    old = Filters.of(base)
    given = {k: v for k, v in filters.items() if v is not UNCHANGED}
    if "compression" in given and "compression_opts" not in given:
        given["compression_opts"] = old.compression_opts if given["compression"] == old.compression else None
    if given.get("compression", old.compression) is None:
        given["compression_opts"] = None
    given = {k: (bool(v) if k in ("shuffle", "fletcher32") else v) for k, v in given.items()}
    new_filters = dataclasses.replace(old, **given)
    if fillvalue is None and interrupted and not is_vlen_string_dtype(base_dtype):
        fillvalue = base.fillvalue  # finish the interrupted run
    if is_vlen_string_dtype(new_dtype):
        if not (fillvalue is None or (isinstance(fillvalue, (str, bytes, int)) and not fillvalue)):
            raise IncompatibleDataError(f"variable-length string datasets cannot have a fill value, got {fillvalue!r}")
        new_fill = fillvalue = None
    elif fillvalue is not None:
        new_fill = np.asarray(fillvalue).astype(new_dtype) if _string_like(new_dtype) else fillvalue
    elif is_vlen_string_dtype(base_dtype):
        new_fill = None
    else:
        new_fill = _numpy_cast(base.fillvalue, new_dtype)  # as h5py's create_dataset
    return _Target(new_dtype, new_chunks, new_fill, new_filters, fillvalue)


def _same_metadata(raw: h5py.Dataset, t: _Target) -> bool:
    chunks = tuple(int(c) for c in raw.attrs["chunks"])
    if raw.dtype != t.dtype or chunks != t.chunks or Filters.of(raw) != t.filters:
        return False
    if is_vlen_string_dtype(raw.dtype):
        return True
    return np.asarray(raw.fillvalue, raw.dtype).tobytes() == np.asarray(t.fillvalue, raw.dtype).tobytes()


class _Rewriter:
    """Builds the new chunks of every version, once per distinct content (see module doc)."""

    def __init__(self, h5file: h5py.Group, target: _Target, writer: ChunkWriter, resplit: RechunkReport | None = None):
        self.f, self.t, self.writer = h5file, target, writer
        self.memo: dict[tuple, tuple[int, int] | None] = {}
        self.chunks_read = 0
        self._fill_cache: dict[str, Any] = {}
        #: Budget, progress and report of the resplit of versions whose chunks change.
        self.resplit = resplit if resplit is not None else RechunkReport("", (), target.chunks)
        self.max_mem: int | str | None = None
        self.progress = False

    def _source_fill(self, src: h5py.Dataset) -> tuple[Any, Any, bool]:
        """(old fill, old fill cast to the new dtype, replace points equal to the old fill).

        ``src`` is the raw_data a version maps (or the version's dataset if not virtual).
        """
        if src.name not in self._fill_cache:
            t = self.t
            old = None if is_vlen_string_dtype(src.dtype) else src.fillvalue
            cast = _numpy_cast(old, t.dtype)
            replace = False
            if old is None and t.given_fill is not None and t.dtype.kind == "S":
                # Variable-length strings to fixed-width ones with a fill value: their
                # unstored points read as b"", which versioned-hdf5 2.6 takes as the old
                # fill value (stored b"" points become the new fill value too).
                old = b""
            if t.given_fill is not None and old is not None and not is_vlen_string_dtype(t.dtype):
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    replace = bool(np.asarray(t.given_fill != old))
            self._fill_cache[src.name] = (old, cast, replace)
        return self._fill_cache[src.name]

    def _source(self, vds: h5py.Dataset) -> h5py.Dataset:
        """The dataset holding the rows ``vds`` maps (its raw_data; itself when not virtual)."""
        return self.f[vds.attrs["raw_data"]] if vds.is_virtual else vds

    def version(self, vds: h5py.Dataset) -> tuple[np.ndarray, np.ndarray]:
        """Write the new chunks of one version; return its stored chunks (flat index, first row)."""
        shape, t = vds.shape, self.t
        src = self._source(vds)
        src_name = src.name
        src_chunks = tuple(int(c) for c in vds.attrs["chunks"])
        old_grid = chunk_grid_shape(shape, src_chunks)
        row_of = np.full(math.prod(old_grid), -1, np.int64)
        flat, starts = read_chunk_map(vds, src_chunks, src.name)
        row_of[flat] = starts.astype(np.int64)
        if src_chunks != t.chunks:  # each old chunk read once, within the budget (see .rechunk)
            old_fill, fill_cast, replace = self._source_fill(src)
            rows = resplit_version(
                src=src,
                shape=shape,
                src_chunks=src_chunks,
                row_of=row_of,
                chunks=t.chunks,
                dtype=t.dtype,
                fill_cast=fill_cast,
                replace=(old_fill, t.given_fill) if replace else None,
                memo=self.memo,
                add=self.writer.add,
                fillvalue=self.writer.fillvalue,
                max_mem=self.max_mem,
                counters=self.resplit.counters,
                plans=self.resplit.plans,
                progress=self.progress,
                desc=f"rechunk {vds.name}",
            )
            self.chunks_read = self.resplit.counters.input_reads
            flat = np.fromiter(sorted(rows), np.int64, len(rows))
            return flat, np.array([rows[i][0] for i in flat.tolist()], np.int64)
        # Unchanged chunks: each new chunk is its old one, cast (a key is the old chunk's row).
        out: dict[int, tuple[int, int]] = {}
        pending: list = []
        nbytes = math.prod(t.chunks) * max(t.dtype.itemsize, 8)
        for flat_new, index in enumerate(np.ndindex(*chunk_grid_shape(shape, t.chunks))):
            region = chunk_slices(index, shape, t.chunks)
            extent = tuple(r.stop - r.start for r in region)
            olds = [flat_new]
            key = (src_name, extent, int(row_of[flat_new]))
            if key in self.memo:
                known = self.memo[key]
                if known is not None:
                    out[flat_new] = known
                continue
            pending.append((flat_new, index, region, olds, key))
            if len(pending) * nbytes >= BATCH_BYTES:
                self._batch(src, src_chunks, old_grid, row_of, pending, out)
                pending = []
        if pending:
            self._batch(src, src_chunks, old_grid, row_of, pending, out)
        flat = np.fromiter(sorted(out), np.int64, len(out))
        return flat, np.array([out[i][0] for i in flat.tolist()], np.int64)

    def _batch(self, src, src_chunks, old_grid, row_of, pending, out) -> None:
        t = self.t
        c0 = t.chunks[0]
        buf = np.empty((len(pending) * c0, *t.chunks[1:]), dtype=t.dtype)
        old_fill, fill_cast, replace = self._source_fill(src)
        s_start, d_start, count = [], [], []
        for k, (_, _, region, olds, _) in enumerate(pending):
            for o in olds:
                idx = np.unravel_index(o, old_grid)
                lo = [max(r.start, i * c) for r, i, c in zip(region, idx, src_chunks)]
                hi = [min(r.stop, (i + 1) * c) for r, i, c in zip(region, idx, src_chunks)]
                dst = [k * c0 + lo[0] - region[0].start] + [a - r.start for a, r in zip(lo[1:], region[1:])]
                cnt = [b - a for a, b in zip(lo, hi)]
                if row_of[o] >= 0:
                    s_start.append(
                        [int(row_of[o]) + lo[0] - idx[0] * src_chunks[0]]
                        + [a - i * c for a, i, c in zip(lo[1:], idx[1:], src_chunks[1:])]
                    )
                    d_start.append(dst)
                    count.append(cnt)
                else:
                    buf[tuple(slice(a, a + n) for a, n in zip(dst, cnt))] = fill_cast
        if count:
            read_many_slices(src, buf, np.array(s_start), np.array(d_start), np.array(count))
            self.chunks_read += len(count)
        for k, (flat_new, index, region, _, key) in enumerate(pending):
            chunk = buf[
                (
                    slice(k * c0, k * c0 + region[0].stop - region[0].start),
                    *(slice(0, r.stop - r.start) for r in region[1:]),
                )
            ]
            if replace:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    chunk[chunk == old_fill] = t.given_fill
            rows = self.memo[key] = self.writer.add(index, chunk)
            if rows is not None:
                out[flat_new] = rows


def _check_budget(max_mem, old_chunks: tuple[int, ...], t: _Target) -> None:
    """Refuse a ``max_mem`` below the resplit's minimum, before anything is written.

    Raises
    ------
    MemoryBudgetError
        The budget is below that minimum (the message says it).
    """
    if max_mem is None or old_chunks == t.chunks:
        return
    budget = parse_bytes(max_mem)
    least = minimum_memory(old_chunks, t.chunks, max(t.dtype.itemsize, 1))
    if budget < least:
        raise MemoryBudgetError(
            f"max_mem {budget} B is below the minimum of this rechunk, {least} B: two chunks of "
            f"{old_chunks} (a buffer and one being read) and one of {t.chunks} points of {t.dtype}",
            least,
        )


class _OneSourceRewriter(_Rewriter):
    """A :class:`_Rewriter` reading every version's old chunks from one source.

    ``source``: the old raw_data's chunks, shape ``(rows, *chunks[1:])``, as a
    :class:`~xarray_vhdf5._backend.manifest.ChunkManifest` (read without
    libhdf5: the side file's copy, :func:`~.sidecopy.side_manifest`, or the
    chunks where they lie, :func:`~.sidecopy.file_manifest`) or as an
    ``h5py.Dataset`` (the ``H5Ocopy`` side copy). Only for a run whose versions
    all map the one raw_data.
    """

    def __init__(
        self, h5file, target, writer, source: h5py.Dataset | ChunkManifest, resplit: RechunkReport | None = None
    ):
        super().__init__(h5file, target, writer, resplit)
        self.source = source

    def _source(self, vds: h5py.Dataset) -> h5py.Dataset | ChunkManifest:
        return self.source
