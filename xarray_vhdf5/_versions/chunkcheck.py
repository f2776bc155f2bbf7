"""The per-dataset half of ``vhdf5 check``: raw_data, its hash table and each version's mappings.

:func:`~xarray_vhdf5._versions.check.check_file` walks the versions; this module
checks what they point at. For one versioned dataset (``_version_data/<path>``):

- :func:`inspect_dataset`: raw_data opens, its ``chunks`` attribute and HDF5
  chunk layout agree, its chunk index is readable and every stored chunk lies
  inside the file; the hash table opens, ``largest_index`` fits it, every row
  names whole rows inside raw_data, and no two rows give one raw_data chunk
  two digests.
- :meth:`DatasetState.check_mappings`: one version's virtual dataset has the
  dtype, fill value and ``chunks`` of raw_data, ``maxshape == shape``, and
  each mapping is chunk aligned, inside raw_data, on an allocated chunk and
  below ``largest_index`` (a chunk at or past it is one the hash table does
  not know: the next commit writes new chunks there).
- :meth:`DatasetState.rehash`: every mapped chunk (and every hash-table row
  no version maps) is read through h5py, so libhdf5 decompresses it, and its
  SHA-256 (:func:`~xarray_vhdf5._backend.hashing.chunk_hash`) compared with the
  hash table's digest for its rows.
- :meth:`DatasetState.locate`: which versions map the chunks found bad.

Nothing here raises on a damaged file: each failure is passed to the
``problem`` callback, ``problem(severity, what, version=None, dataset=None,
damages=True)``, in plain words (``damages=False``: an error of the version
that does not make it read wrong), and the caller decides what it means for
the versions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import h5py
import numpy as np

from .._backend.chunkmap import build_slab_indices_and_offsets, version_dataset_layout
from .._backend.chunks import chunk_grid_shape
from .._backend.hashing import chunk_hash, is_vlen_string_dtype
from .._backend.hashtable import placeholder_digest

__all__ = ["DAMAGE_ERRORS", "FILTER_MISSING", "DatasetState", "describe", "filter_unavailable", "inspect_dataset"]

#: What h5py and libhdf5 raise for an object they cannot read (with ``HDF5Error``, an
#: ``OSError``, from the compiled kernels); a checker takes any of them as damage.
DAMAGE_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, IndexError, OverflowError, MemoryError)

#: Fragments of libhdf5's messages (lower case) for a filter it cannot load: not damage.
FILTER_MISSING = ("can't open directory", "is not registered", "filter not available", "cannot find plugin")

#: Most chunks named in one problem's message.
SHOWN = 3
#: raw_data read in blocks of about this many bytes when rehashing.
BLOCK_BYTES = 32 * 2**20

Report = Callable[..., None]


def describe(exc: BaseException) -> str:
    """An exception as one line: its type and message (libhdf5's, for h5py's errors)."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def filter_unavailable(message: str) -> bool:
    """Whether libhdf5's ``message`` says a filter (a compression plugin) is not available here."""
    lowered = message.lower()
    return any(m in lowered for m in FILTER_MISSING)


def _is_named(digests: np.ndarray) -> np.ndarray:
    """Rows whose digest is a chunk's: not zeros (a deleted chunk) nor a placeholder (24 zero bytes, a slot)."""
    return np.asarray(digests[:, :24].any(axis=1)) if len(digests) else np.zeros(0, bool)


def _bits(value, dtype: np.dtype) -> bytes:
    """The bytes of a fill value as ``dtype`` stores it (a NaN fill matches the same NaN)."""
    return np.asarray(value, dtype=dtype).tobytes()


def _where(index: tuple[int, ...], start: int, stop: int) -> str:
    return f"chunk {index} (raw_data rows {start}:{stop})"


@dataclass
class DatasetState:
    """What :func:`inspect_dataset` learnt of one versioned dataset, and what its versions map.

    Attributes
    ----------
    path : str
        The dataset's path inside the versions (``"x"``, ``"grp/y"``).
    raw : h5py.Dataset or None
        Its raw_data; None when it cannot be opened (every version mapping it is damaged).
    chunks : tuple of int or None
        The chunk shape in points (raw_data's ``chunks`` attribute).
    allocated : numpy.ndarray of bool or None
        Per raw_data chunk (``chunks[0]`` rows), whether HDF5 stores it; None when unknown.
    largest_index : int or None
        Valid hash-table rows; None when the hash table cannot be read.
    digests : dict of int to set of bytes
        Per first raw_data row, the digests the hash table gives the chunk stored there.
    rows : dict of int to int
        Per first raw_data row named by a digest, the row after its chunk (``stop``).
    holders : list of (str, str)
        ``(version, path of the virtual dataset in it)`` of every version mapping raw_data.
    bad : dict of int to str
        raw_data chunks found damaged (first row -> what is wrong), filled by :meth:`rehash`.
    bad_rows : list of (int, bytes)
        ``(first row, digest)`` of hash-table rows no version maps whose chunk failed its check.
    past_end : int
        Where the last chunk HDF5's chunk index places past the end of the file
        ends (bytes; 0: none).
    """

    path: str
    raw: h5py.Dataset | None = None
    chunks: tuple[int, ...] | None = None
    allocated: np.ndarray | None = None
    largest_index: int | None = None
    digests: dict[int, set[bytes]] = field(default_factory=dict)
    rows: dict[int, int] = field(default_factory=dict)  # first row -> stop, of named hash-table rows
    holders: list[tuple[str, str]] = field(default_factory=list)
    bad: dict[int, str] = field(default_factory=dict)
    bad_rows: list[tuple[int, bytes]] = field(default_factory=list)
    past_end: int = 0
    _keys: list[np.ndarray] = field(default_factory=list)
    _pending: int = 0

    @property
    def usable(self) -> bool:
        """Whether versions' mappings can be checked against raw_data."""
        return self.raw is not None and self.chunks is not None

    @property
    def _raw_ok(self) -> h5py.Dataset:
        """:attr:`raw` of a :attr:`usable` dataset (the callers check that first)."""
        assert self.raw is not None, "checked by usable"
        return self.raw

    @property
    def _chunks_ok(self) -> tuple[int, ...]:
        """:attr:`chunks` of a :attr:`usable` dataset (the callers check that first)."""
        assert self.chunks is not None, "checked by usable"
        return self.chunks

    # -- one version's virtual dataset --------------------------------------------
    def check_mappings(
        self, vds: h5py.Dataset, version: str, vpath: str, problem: Report, keep: bool
    ) -> tuple[int, bool]:
        """Check the virtual dataset ``vds`` of ``version`` against raw_data.

        Parameters
        ----------
        vds : h5py.Dataset
            The version's dataset (at ``vpath`` in the version's group).
        version, vpath : str
            The version and the dataset's path in it (for messages).
        problem : callable
            Called for each problem found (see the module docstring).
        keep : bool
            Keep the mapped chunks for :meth:`rehash`.

        Returns
        -------
        (int, bool)
            Chunk mappings checked, and whether the version reads this dataset
            correctly as far as can be told without reading chunks.
        """
        self.holders.append((version, vpath))

        def bad(what: str) -> tuple[int, bool]:
            problem("error", what, version=version, dataset=vpath)
            return 0, False

        if not self.usable:
            return bad(
                f"its raw_data /_version_data/{self.path}/raw_data cannot be read (see the dataset's own problem)"
            )
        raw, chunks = self._raw_ok, self._chunks_ok
        try:
            vchunks, _ = version_dataset_layout(vds)
            shape, maxshape, dtype = vds.shape, vds.maxshape, vds.dtype
            virtual = vds.is_virtual
            vfill = None if is_vlen_string_dtype(dtype) else vds.fillvalue
        except DAMAGE_ERRORS as exc:
            return bad(f"the virtual dataset's attributes or properties cannot be read: {describe(exc)}")
        wrong = []
        if tuple(vchunks) != chunks:
            wrong.append(f"its 'chunks' attribute {tuple(vchunks)} differs from raw_data's {chunks}")
        if dtype != raw.dtype:
            wrong.append(f"its dtype {dtype} differs from raw_data's {raw.dtype}")
        if maxshape != shape:
            wrong.append(f"its maxshape {maxshape} differs from its shape {shape}")
        if vfill is not None and _bits(vfill, dtype) != _bits(raw.fillvalue, dtype):
            wrong.append(
                f"its fill value {vfill!r} differs from raw_data's {raw.fillvalue!r} "
                "(the chunks it does not store read wrong)"
            )
        if len(shape) != len(chunks):
            wrong.append(f"it has {len(shape)} axes, raw_data's chunks {len(chunks)}")
        if wrong:
            return bad("; ".join(wrong))
        if not virtual or vds.size == 0:
            return 0, True  # stores no chunk (old files' all-fill datasets, empty datasets)
        try:
            flat, starts = _chunk_map(vds, chunks, raw.name)
        except DAMAGE_ERRORS as exc:
            return bad(f"its mappings cannot be read as whole chunks of raw_data: {describe(exc)}")
        if flat.size == 0:
            return 0, True
        grid = chunk_grid_shape(shape, chunks)
        index = np.unravel_index(flat, grid)
        c0 = chunks[0]
        stops = starts + np.minimum(c0, shape[0] - index[0] * c0)
        slots = starts // c0
        n_raw = raw.shape[0]
        whole = True

        def report(mask: np.ndarray, what: str, damages: bool = True) -> None:
            nonlocal whole
            hits = np.flatnonzero(mask)
            if hits.size:
                whole = whole and not damages
                shown = ", ".join(
                    _where(tuple(int(a[i]) for a in index), int(starts[i]), int(stops[i])) for i in hits[:SHOWN]
                )
                more = f" and {hits.size - SHOWN} more" if hits.size > SHOWN else ""
                problem(
                    "error",
                    f"{hits.size} of {flat.size} chunks {what}: {shown}{more}",
                    version=version,
                    dataset=vpath,
                    damages=damages,
                )

        misaligned = (starts < 0) | (starts % c0 != 0)
        report(misaligned, f"map raw_data rows that are not whole chunks of {c0} rows")
        past = ~misaligned & (stops > n_raw)
        report(past, f"map rows past the end of raw_data ({n_raw} rows): they read as the fill value")
        inside = ~misaligned & ~past
        if self.largest_index is not None:
            # The version reads right today; rebuilding the hash table protects it.
            unknown = inside & (slots >= self.largest_index)
            report(
                unknown,
                f"map raw_data chunks the hash table does not know (at or past its "
                f"largest_index, {self.largest_index}): the next commit writes there "
                "(rebuild_hash_tables protects them)",
                damages=False,
            )
        if self.allocated is not None:
            unallocated = inside.copy()
            unallocated[inside] = ~self.allocated[slots[inside]]
            report(unallocated, "map raw_data chunks that were never written: they read as the fill value")
            inside &= ~unallocated
        if keep and inside.any():
            extents = [np.minimum(c, n - i * c) for c, n, i in zip(chunks[1:], shape[1:], index[1:])]
            keys = np.stack([starts, stops, *extents], axis=1)[inside]
            self._keys.append(keys)
            self._pending += len(keys)
            if self._pending > 2**20:
                self._compact()
        return int(flat.size), whole

    def _compact(self) -> np.ndarray:
        merged = np.unique(np.concatenate(self._keys), axis=0) if self._keys else np.empty((0, 2), np.int64)
        self._keys, self._pending = [merged], len(merged)
        return merged

    # -- reading and hashing chunks ---------------------------------------------------
    def rehash_count(self) -> int:
        """How many chunks :meth:`rehash` will read (distinct mapped regions, then unmapped named rows)."""
        if not self.usable:
            return 0
        keys = self._compact()
        mapped = set(keys[:, 0].tolist())
        return len(keys) + sum(1 for start in self.rows if start not in mapped)

    def rehash(
        self, problem: Report, advance: Callable[[int], None], touch: Callable[[str], bool] = lambda path: True
    ) -> int:
        """Read every mapped chunk and compare its SHA-256 with the hash table's digest.

        A chunk libhdf5 cannot read (a failed decompression, a damaged chunk
        index) or whose digest is not the one the hash table gives its rows is
        recorded in :attr:`bad` (versions are told by :meth:`locate`). A mapped
        chunk may be read trimmed in one version and whole in another; its
        rows are damaged only when no mapped extent, nor the extent of its
        hash-table row, hashes to a digest the table gives those rows. Rows
        of the hash table no version maps are checked too (a commit storing
        their data again would map them): those failing are recorded in
        :attr:`bad_rows`, reported as a dataset problem.

        Parameters
        ----------
        problem : callable
            Called for the dataset-level findings (see the module docstring).
        advance : callable
            Called with the number of chunks read after each block.
        touch : callable
            ``touch(path)`` before each block (``<raw_data path>[a:b]``): False
            when the block must not be read (libhdf5 crashed reading it before);
            its chunks are then damaged.

        Returns
        -------
        int
            Chunks read and hashed.
        """
        if not self.usable:
            return 0
        keys = self._compact()
        verified: set[int] = set()
        failed: dict[int, str] = {}
        mismatched: set[int] = set()
        unnamed, no_filter = 0, {}
        for key, digest, error in self._hash_regions(keys, advance, touch):
            start = int(key[0])
            if error is not None and filter_unavailable(error):
                no_filter[start] = error
            elif error is not None:
                failed[start] = error
            elif start not in self.digests:
                unnamed += 1
            elif digest in self.digests[start]:
                verified.add(start)
            else:
                failed.setdefault(start, "its SHA-256 differs from the hash table's digest for its rows")
                mismatched.add(start)
        mapped = set(keys[:, 0].tolist())
        # Chunks only read through a trimmed extent: hash them as their hash-table row says;
        # rows no version maps too. Along the other axes a chunk's extent is not recorded:
        # try the whole chunk and every extent a version maps.
        retry = [s for s in mismatched if s not in verified and s in self.rows]
        free = sorted(s for s in self.rows if s not in mapped)
        trailing = {tuple(int(e) for e in row) for row in keys[:, 2:]} | {tuple(int(n) for n in self._raw_ok.shape[1:])}
        extra = self._row_regions(retry + free, sorted(trailing))
        matched: set[int] = set()
        for key, digest, error in self._hash_regions(extra, lambda n: None, touch):
            if error is None and digest in self.digests.get(int(key[0]), ()):
                matched.add(int(key[0]))
        advance(len(free))
        verified |= matched
        unverified = [s for s in free if s not in matched]
        for start in unverified:
            self.bad_rows.extend((start, d) for d in self.digests[start])
        for start, what in failed.items():
            if start not in verified:
                self.bad[start] = what
        if no_filter:
            first = next(iter(no_filter.values()))
            problem(
                "warning",
                f"{len(no_filter)} chunks use a filter libhdf5 cannot load here, so were not "
                f"verified (for hdf5plugin's filters: pip install hdf5plugin): {first}",
                dataset=self.path,
            )
        if unnamed:
            problem(
                "warning",
                f"{unnamed} mapped chunks have no hash-table row naming them: their data was not verified",
                dataset=self.path,
            )
        if unverified:
            shown = ", ".join(f"rows {s}:{self.rows[s]}" for s in unverified[:SHOWN])
            more = f" and {len(unverified) - SHOWN} more" if len(unverified) > SHOWN else ""
            # Along axis 0 the row gives the extent: a mismatch is damage. On other axes a
            # chunk may have been trimmed to an extent no version maps any more.
            severity, verdict = (
                ("error", "do not match their digests")
                if self._raw_ok.ndim == 1
                else ("warning", "match their digests at no extent a version maps (damaged, or trimmed otherwise)")
            )
            problem(
                severity,
                f"{len(unverified)} raw_data chunks no version maps {verdict}: {shown}{more}; "
                "a commit storing their data again would map them (repair retires their rows)",
                dataset=self.path,
            )
        return len(keys) + len(free)

    def _row_regions(self, starts: list[int], trailing: list[tuple[int, ...]]) -> np.ndarray:
        """Regions ``[start, stop, *extents]`` of the hash-table rows at ``starts``, for each trailing extent."""
        n_raw = self._raw_ok.shape[0]
        rows = [[s, self.rows[s], *t] for s in starts if self.rows[s] <= n_raw for t in trailing]
        return np.array(rows, dtype=np.int64).reshape(-1, 1 + self._raw_ok.ndim)

    def _hash_regions(self, keys: np.ndarray, advance: Callable[[int], None], touch: Callable[[str], bool]):
        """Yield ``(key, digest or None, error or None)`` for each region ``key`` of raw_data, in row order.

        raw_data is read in blocks of whole rows of about :data:`BLOCK_BYTES`; a
        block libhdf5 cannot read is read again region by region, so one
        damaged chunk is told from its neighbours.
        """
        raw = self._raw_ok
        if not len(keys):
            return
        keys = keys[np.lexsort(keys.T[::-1])]
        row_bytes = max(1, int(np.prod(raw.shape[1:], dtype=np.int64)) * raw.dtype.itemsize)
        max_rows = max(1, BLOCK_BYTES // row_bytes)
        i = 0
        while i < len(keys):
            lo, hi, j = int(keys[i, 0]), int(keys[i, 1]), i
            while j + 1 < len(keys) and max(hi, int(keys[j + 1, 1])) - lo <= max_rows:
                j += 1
                hi = max(hi, int(keys[j, 1]))
            if not touch(f"{raw.name}[{lo}:{hi}]"):
                for key in keys[i : j + 1]:
                    yield key, None, f"not read: libhdf5 crashed the process reading raw_data rows {lo}:{hi}"
                advance(j + 1 - i)
                i = j + 1
                continue
            try:
                block = raw[lo:hi]
            except DAMAGE_ERRORS:
                block = None
            for key in keys[i : j + 1]:
                start, stop, trailing = int(key[0]), int(key[1]), [int(e) for e in key[2:]]
                try:
                    if block is not None:
                        region = block[(slice(start - lo, stop - lo), *(slice(0, e) for e in trailing))]
                    else:
                        region = raw[(slice(start, stop), *(slice(0, e) for e in trailing))]
                    yield key, chunk_hash(region), None
                except DAMAGE_ERRORS as exc:
                    yield key, None, f"libhdf5 cannot read it: {describe(exc)}"
            advance(j + 1 - i)
            i = j + 1

    def locate(self, versions: h5py.Group, problem: Report) -> set[str]:
        """Tell each version mapping a chunk of :attr:`bad` what is wrong; return those versions."""
        damaged: set[str] = set()
        if not self.bad:
            return damaged
        bad = np.array(sorted(self.bad), dtype=np.int64)
        c0 = self._chunks_ok[0]
        for version, vpath in self.holders:
            try:
                vds = versions[version][vpath]
                flat, starts = _chunk_map(vds, self._chunks_ok, self._raw_ok.name)
            except DAMAGE_ERRORS:
                continue  # reported by check_mappings already
            hits = np.flatnonzero(np.isin(starts, bad))
            if not hits.size:
                continue
            damaged.add(version)
            index = np.unravel_index(flat[hits], chunk_grid_shape(vds.shape, self._chunks_ok))
            shown = []
            for k in range(min(SHOWN, hits.size)):
                start = int(starts[hits[k]])
                chunk = tuple(int(a[k]) for a in index)
                stop = start + min(c0, vds.shape[0] - chunk[0] * c0)
                shown.append(f"{_where(chunk, start, stop)}: {self.bad[start]}")
            more = f"; and {hits.size - SHOWN} more" if hits.size > SHOWN else ""
            problem(
                "error", f"{hits.size} chunks are damaged: {'; '.join(shown)}{more}", version=version, dataset=vpath
            )
        return damaged


def _chunk_map(vds: h5py.Dataset, chunks: tuple[int, ...], raw_name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(flat chunk indices, first raw_data rows as int64)`` of the chunks ``vds`` maps, C order."""
    slab_indices, slab_offsets = build_slab_indices_and_offsets(vds, vds.shape, chunks, raw_name)
    flat = np.flatnonzero(slab_indices)
    return flat, slab_offsets.ravel()[flat].astype(np.int64)


def inspect_dataset(
    group: h5py.Group, path: str, filesize: int | None, problem: Report, *, allocated_end: int | None = None
) -> DatasetState:
    """Check one versioned dataset's raw_data and hash table (no version read yet).

    Parameters
    ----------
    group : h5py.Group
        ``_version_data/<path>``, holding ``raw_data`` and ``hash_table``.
    path : str
        The dataset's path inside the versions.
    filesize : int or None
        The file's size in bytes (stored chunks must lie inside it); None: not checked.
    problem : callable
        ``problem(severity, what, dataset=path)`` for each problem found.
    allocated_end : int, optional
        The file's end of allocation in bytes (``H5Fget_eoa``): stored chunks
        inside the file but past it are reported too (their bytes are whole;
        libhdf5 would place new objects over them).

    Returns
    -------
    DatasetState
        What the versions' mappings are then checked against.
    """
    problem = functools.partial(problem, dataset=path)
    state = DatasetState(path)
    try:
        raw = group["raw_data"]
        chunks = tuple(int(c) for c in np.atleast_1d(raw.attrs["chunks"]))
        shape, layout = raw.shape, raw.chunks
    except DAMAGE_ERRORS as exc:
        problem("error", f"raw_data or its 'chunks' attribute cannot be read: {describe(exc)}")
        return state
    if not chunks or any(c <= 0 for c in chunks) or len(chunks) != len(shape):
        problem("error", f"raw_data's 'chunks' attribute {chunks} is not a chunk shape for its {len(shape)} axes")
        return state
    state.raw, state.chunks = raw, chunks
    outside: list[tuple[int, int, str]] = []
    if layout != chunks:
        problem("error", f"raw_data is stored in HDF5 chunks {layout}, its 'chunks' attribute says {chunks}")
    elif tuple(shape[1:]) != chunks[1:]:
        problem(
            "error", f"raw_data has shape {shape}: one chunk {chunks[1:]} wide on the axes after the first is expected"
        )
    else:
        state.allocated, outside, beyond = _allocated(raw, chunks, filesize, allocated_end, problem)
        if beyond:
            state.past_end = max(end for end, _ in beyond)
            more = f" and {len(beyond) - SHOWN} more" if len(beyond) > SHOWN else ""
            problem(
                "error",
                f"{len(beyond)} raw_data chunks lie in the file but past its end of allocation ({allocated_end} "
                f"bytes), as a writer killed inside libhdf5's flush leaves them: "
                f"{', '.join(text for _, text in beyond[:SHOWN])}{more}; libhdf5 would place new objects over "
                "them (--repair moves the end of allocation past them)",
            )
    _inspect_hash_table(group, state, problem)
    if outside:
        _report_outside(outside, filesize, state, problem)
    return state


def _allocated(
    raw: h5py.Dataset, chunks: tuple[int, ...], filesize: int | None, allocated_end: int | None, problem: Report
) -> tuple[np.ndarray | None, list[tuple[int, int, str]], list[tuple[int, str]]]:
    """Per raw_data chunk, whether HDF5's chunk index stores it inside the file (one pass over the index).

    Also the chunks the index places past the end of the file: ``(chunk
    number, end byte, description)``; and those inside the file but past
    ``allocated_end``: ``(end byte, description)``.
    """
    c0 = chunks[0]
    allocated = np.zeros(-(-raw.shape[0] // c0), dtype=bool)
    outside: list[tuple[int, int, str]] = []
    beyond: list[tuple[int, str]] = []

    def visit(info) -> None:
        offset = info.chunk_offset
        if any(offset[1:]) or offset[0] % c0 or offset[0] // c0 >= len(allocated):
            return
        text = f"rows {offset[0]}:{offset[0] + c0} at byte {info.byte_offset}, {info.size} bytes"
        if filesize is not None and (info.byte_offset is None or info.byte_offset + info.size > filesize):
            outside.append((offset[0] // c0, (info.byte_offset or 0) + info.size, text))
            return
        if allocated_end is not None and info.byte_offset + info.size > allocated_end:
            beyond.append((info.byte_offset + info.size, text))
        allocated[offset[0] // c0] = True

    try:
        raw.id.chunk_iter(visit)
    except DAMAGE_ERRORS as exc:
        problem(
            "error",
            f"raw_data's chunk index cannot be read: {describe(exc)} (--repair rebuilds it from the chunks' "
            "stored bytes where libhdf5 or this package's address table still finds them)",
        )
        return None, [], []
    return allocated, outside, beyond


def _report_outside(
    outside: list[tuple[int, int, str]], filesize: int | None, state: DatasetState, problem: Report
) -> None:
    """Report chunks HDF5's chunk index places past the end of the file: errors.

    A writer killed inside libhdf5's flush can leave chunk-index entries of a
    commit's new chunks on disk without their bytes. libhdf5 allocates new
    objects from the end of the file, over them, while the index still names
    them: a commit writing those rows again can lose its chunk (measured), so
    each is an error, and :attr:`DatasetState.past_end` says how far they
    reach (``repair`` moves the file's end of allocation past it). A chunk a
    commit finished (below the hash table's ``largest_index``, named by a
    digest other than a repair's placeholder) is also recorded in
    :attr:`DatasetState.bad`: the versions mapping it are damaged
    (:meth:`DatasetState.locate`) and ``repair`` retires its digests, so no
    commit deduplicates onto it.
    """
    c0 = state._chunks_ok[0]
    committed = state.largest_index
    finished, leftovers = [], []
    for k, end, text in outside:
        state.past_end = max(state.past_end, end)
        names = state.digests.get(k * c0, set())
        if committed is not None and (k >= committed or names <= {placeholder_digest(k)}):
            leftovers.append(text)
        else:
            finished.append(text)
            state.bad[k * c0] = "stored past the end of the file"
    for part, whose in ((finished, "commits finished"), (leftovers, "left by an interrupted commit")):
        if not part:
            continue
        more = f" and {len(part) - SHOWN} more" if len(part) > SHOWN else ""
        shown = ", ".join(part[:SHOWN])
        problem(
            "error",
            f"{len(part)} raw_data chunks {whose} lie past the end of the file ({filesize} bytes): {shown}{more}; "
            "libhdf5 would place new objects over them (--repair moves the end of allocation past them)",
        )


def _inspect_hash_table(group: h5py.Group, state: DatasetState, problem: Report) -> None:
    """Read the hash table's valid rows into ``state`` and check them against raw_data."""
    c0, n_raw = state._chunks_ok[0], state._raw_ok.shape[0]
    try:
        table = group["hash_table"]
        count = np.asarray(table.attrs["largest_index"]).reshape(-1)
        n, length = int(count[0]), table.shape[0]
    except DAMAGE_ERRORS as exc:
        problem("error", f"the hash table or its largest_index cannot be read: {describe(exc)}")
        return
    if not 0 <= n <= length:
        problem("error", f"the hash table's largest_index is {n} but it has {length} rows")
        return
    try:
        rows = table[:n]
        digests = np.ascontiguousarray(rows["hash"], dtype=np.uint8).reshape(n, 32)
        ranges = np.asarray(rows["shape"], dtype=np.int64).reshape(n, 2)
    except DAMAGE_ERRORS as exc:
        problem("error", f"the hash table's rows cannot be read: {describe(exc)}")
        return
    state.largest_index = n
    starts, stops = ranges[:, 0], ranges[:, 1]
    invalid = (starts < 0) | (starts % c0 != 0) | (stops <= starts) | (stops - starts > c0) | (stops > n_raw)
    if invalid.any():
        hits = np.flatnonzero(invalid)
        shown = ", ".join(f"row {i}: {starts[i]}:{stops[i]}" for i in hits[:SHOWN].tolist())
        problem(
            "error",
            f"{hits.size} hash-table rows do not name a whole chunk of raw_data's {n_raw} rows "
            f"(chunks of {c0} rows): {shown}",
        )
    named = _is_named(digests) & ~invalid
    keep = np.flatnonzero(named)
    blobs = [bytes(d) for d in digests[keep]]
    clashes: set[int] = set()
    for i, blob in zip(keep.tolist(), blobs):
        start = int(starts[i])
        seen = state.digests.setdefault(start, set())
        if seen and blob not in seen:
            clashes.add(start)
        seen.add(blob)
        state.rows.setdefault(start, int(stops[i]))
    if clashes:
        shown = ", ".join(f"rows {s}:{s + c0}" for s in sorted(clashes)[:SHOWN])
        problem("error", f"{len(clashes)} raw_data chunks have two different digests in the hash table: {shown}")
    if len(set(blobs)) != len(blobs):
        problem("warning", f"{len(blobs) - len(set(blobs))} digests are listed twice in the hash table")
