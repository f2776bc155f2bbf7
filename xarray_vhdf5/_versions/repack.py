"""Rewrite a versioned file compactly: every version, ref and attribute; none of the freed bytes.

Deleting versions (:mod:`~xarray_vhdf5._versions.delete`) drops their chunks
from raw_data, but libhdf5 never gives bytes back to the file system: a file
keeps its size, and its freed bytes are reused by later commits at best.
:func:`repack` writes a new file holding exactly what the old one holds, then
puts it in the old one's place::

    old file   [meta][v1 chunks][freed....][v3 chunks][freed rows past largest_index]
    new file   [meta][v1 chunks][v3 chunks]

What is copied, how:

- each raw_data: a new dataset with the same creation properties (type,
  chunk shape, filters, fill value), holding the chunks of slots
  ``0 .. largest_index - 1`` in their slots, each copied as stored
  (``read_direct_chunk`` / ``write_direct_chunk``: not decompressed, not
  re-filtered; variable-length strings, whose stored chunks hold heap
  addresses, by value). Rows past ``largest_index`` (``docs/format.md``, "Layout": leftovers) are
  not copied. Every row keeps its number, so the hash table and every virtual
  dataset stay valid as they are;
- everything else (the version groups with their virtual datasets, dimension
  scales and attributes, the hash tables, refs and bookkeeping under
  ``/__vhdf5__``, the user's root objects): libhdf5's object copy
  (``H5Ocopy``, references expanded so dimension-scale attachments point to
  the copies; an object linked twice is copied once). A virtual dataset maps
  rows of ``"."`` (the file it is in) at a path: the copy maps the new
  raw_data at the same path. Soft and external links are made again as links.

The new file keeps libhdf5's default file-space settings. Persistent
free-space tracking (``fs_strategy="fsm", fs_persist=True``) would let later
deletions' bytes be reused for any object; libhdf5 then writes the
free-space managers when the file closes, which journaled handles now
journal (killed at each write of a commit and its close, 0 of 59 such files
damaged; 5 of 59 before), but a plain ``h5py.File`` reader of a file whose
commit was interrupted gets libhdf5's "invalid file space strategy" instead
of this package's ``CorruptFileError``: not enabled yet. Freed raw_data rows
are reused instead (:func:`~xarray_vhdf5._versions.delete.delete_keeping_space`).

Safety: the copy goes to a temporary file beside the target, synced, then
renamed over it (``os.replace``: atomic); a process killed at any instant leaves
the old file whole (and perhaps a ``*.vhdf5-repack`` file, removed by the next
repack). The old file is held with its ``WRITE`` lock and libhdf5's lock from
before the copy until after the rename, so no writer of this package, nor
versioned-hdf5 nor plain h5py, commits into it meanwhile; an interrupted
deletion or commit is finished or rolled back first. A writer of this package
that was waiting for the lock opens the new file once it gets it (``open_file``
checks that the path still names the file it locked), and a mutation through a
handle opened before the repack raises ``StaleVersionError`` rather than
writing into the old, unlinked file (tests/test_replaced_file.py). Readers
that keep the old file open read the old file (unlinked) until they reopen it;
other programs' handles (plain h5py, netCDF tools) should be closed first, as
for ``h5repack``.

Compared with ``h5repack`` (Debian's 1.10.8, run by ``benchmarks/bench_space.py``):
it copies every object too, and keeps what matters: the virtual datasets'
mappings as they are (source ``"."``, the raw_data path: they read the new
file's raw_data, values right), soft links, and references (it rewrites
``DIMENSION_LIST``/``REFERENCE_LIST``; netCDF-C opens its output). But it copies
raw_data whole, every allocated chunk, so it gives back only the bytes freed
outside datasets: after a truncating deletion it is as compact as :func:`repack`
(9.05 MB against 9.04 MB for 50 of 100 gzip versions), after
``delete_keeping_space`` it keeps the freed rows (17.91 MB); its output does not
track free space unless given ``-S FSM_AGGR -P 1``; it takes none of this
package's locks, writes another path (replacing the file is the user's move),
and with filter options (``-f``) decompresses and recompresses every chunk.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import h5py
import numpy as np
from h5py import h5d

from .._backend.hashing import is_vlen_string_dtype
from .._backend.layout import VERSION_DATA, VERSIONS
from . import bookkeeping
from .delete import persists_free_space
from .metadata import finish_interrupted
from .mutation import open_for_writing
from .objects import copy_attrs
from .scratch import SCRATCH

__all__ = ["TEMP_SUFFIX", "RepackReport", "repack", "repack_plan"]

#: Suffix of the temporary file written beside the target.
TEMP_SUFFIX = ".vhdf5-repack"


@dataclass
class RepackReport:
    """What :func:`repack` did (or, from :func:`repack_plan`, would do). Sizes in bytes."""

    path: str
    out: str
    size_before: int
    #: Size of the new file; None for a plan.
    size_after: int | None
    #: Stored (compressed) bytes of the chunks kept, all raw_data together.
    chunk_bytes: int = 0
    #: Stored bytes of the chunks past ``largest_index`` (not copied).
    garbage_bytes: int = 0
    #: Chunks copied (or to copy), by raw_data path.
    chunks: dict[str, int] = field(default_factory=dict)
    #: Whether the source file tracks its free space (the new one always does).
    persisted_free_space: bool = False

    @property
    def freed(self) -> int | None:
        """Bytes given back to the file system (None for a plan)."""
        return None if self.size_after is None else self.size_before - self.size_after


def _raw_groups(vdata: h5py.Group) -> list[h5py.Group]:
    """Groups under ``_version_data`` holding a raw_data (the versions and scratch groups left out)."""
    found: list[h5py.Group] = []

    def walk(group: h5py.Group, top: bool) -> None:
        for name in group:
            if top and name in (VERSIONS, SCRATCH):
                continue
            obj = group.get(name)
            if isinstance(obj, h5py.Group):
                if isinstance(obj.get("raw_data"), h5py.Dataset):
                    found.append(obj)
                else:
                    walk(obj, False)

    walk(vdata, True)
    return found


def _kept_slots(group: h5py.Group) -> tuple[int, int]:
    """``(slots to copy, slots allocated in the extent)`` of a raw_data: up to ``largest_index``."""
    raw = group["raw_data"]
    c0 = int(raw.chunks[0]) if raw.chunks else max(1, raw.shape[0])
    n_slots = math.ceil(raw.shape[0] / c0) if raw.shape[0] else 0
    table = group.get("hash_table")
    if isinstance(table, h5py.Dataset) and "largest_index" in table.attrs:
        chunks = tuple(int(c) for c in raw.attrs.get("chunks", raw.chunks or (c0,)))
        rows = int(np.asarray(table.attrs["largest_index"]).reshape(-1)[0]) * chunks[0]
        return min(n_slots, math.ceil(rows / c0)), n_slots
    return n_slots, n_slots


def _stored_bytes(raw: h5py.Dataset, first: int, stop: int) -> int:
    """Bytes stored by the allocated chunks of slots ``first .. stop - 1``."""
    if raw.chunks is None or stop <= first:
        return 0
    c0 = raw.chunks[0]
    total = 0
    for i in range(raw.id.get_num_chunks()):
        info = raw.id.get_chunk_info(i)
        if first * c0 <= info.chunk_offset[0] < stop * c0:
            total += info.size
    return total


def repack_plan(path: str | os.PathLike) -> RepackReport:
    """What :func:`repack` would do to ``path``: chunks to copy, bytes kept and dropped; reads only.

    Parameters
    ----------
    path : str or os.PathLike
        A versioned file.

    Returns
    -------
    RepackReport
        With ``size_after`` None. The new file's size is about ``chunk_bytes``
        plus the metadata (version groups, virtual datasets, hash tables).

    Raises
    ------
    NotVersionedError
        The file holds no version history.
    FileNotFoundError
        ``path`` does not exist.
    """
    from ..errors import NotVersionedError

    path = os.fspath(path)
    with h5py.File(path, "r", locking=False) as f:
        if f"{VERSION_DATA}/{VERSIONS}" not in f:
            raise NotVersionedError(f"{path!r} has no /{VERSION_DATA}/{VERSIONS} group: nothing to repack")
        report = RepackReport(path, path, os.path.getsize(path), None, persisted_free_space=persists_free_space(f))
        for group in _raw_groups(f[VERSION_DATA]):
            raw = group["raw_data"]
            kept, n_slots = _kept_slots(group)
            report.chunks[raw.name] = kept
            report.chunk_bytes += _stored_bytes(raw, 0, kept)
            report.garbage_bytes += _stored_bytes(raw, kept, n_slots)
    return report


def _copy_raw_data(src_group: h5py.Group, dst_group: h5py.Group, tick: Callable[[int], None]) -> int:
    """Create ``dst_group/raw_data`` as the source's, with its kept chunks; return the chunks copied."""
    raw = src_group["raw_data"]
    kept, _ = _kept_slots(src_group)
    dcpl = raw.id.get_create_plist()
    chunked = dcpl.get_layout() == h5d.CHUNKED
    c0 = raw.chunks[0] if chunked else max(1, raw.shape[0])
    rows = min(raw.shape[0], kept * c0)
    maxshape = tuple(h5py.h5s.UNLIMITED if m is None else m for m in (raw.maxshape or raw.shape))
    space = h5py.h5s.create_simple((rows, *raw.shape[1:]), maxshape)
    dsid = h5d.create(dst_group.id, b"raw_data", raw.id.get_type(), space, dcpl=dcpl)
    new = h5py.Dataset(dsid)
    copy_attrs(raw, new)
    if not chunked:
        if rows:
            new[...] = raw[:rows]
        tick(1)
        return 1
    rest = (0,) * (raw.ndim - 1)
    direct = not is_vlen_string_dtype(raw.dtype)
    copied = 0
    for k in range(kept):
        start = k * c0
        if direct:
            try:
                mask, data = raw.id.read_direct_chunk((start, *rest))
            except (RuntimeError, OSError, KeyError):  # never allocated: nothing to copy
                tick(1)
                continue
            new.id.write_direct_chunk((start, *rest), data, mask)
        else:
            stop = min(start + c0, rows)
            new[start:stop] = raw[start:stop]
        copied += 1
        tick(1)
    return copied


def _copy_link(src: h5py.Group, dst: h5py.Group, name: str) -> bool:
    """Make a soft or external link ``name`` of ``src`` again in ``dst``; False for a hard link."""
    link = src.get(name, getlink=True)
    if isinstance(link, h5py.SoftLink):
        dst[name] = h5py.SoftLink(link.path)
        return True
    if isinstance(link, h5py.ExternalLink):
        dst[name] = h5py.ExternalLink(link.filename, link.path)
        return True
    return False


def _group_like(src: h5py.Group, parent: h5py.Group, name: str) -> h5py.Group:
    gcpl = src.id.get_create_plist()
    track = bool(gcpl.get_link_creation_order())
    group = parent.create_group(name, track_order=track)
    copy_attrs(src, group)
    return group


def _copy_object(src: h5py.Group, dst: h5py.Group, name: str) -> None:
    """``H5Ocopy`` of ``src[name]`` to ``dst[name]``, object references expanded."""
    if _copy_link(src, dst, name):
        return
    src.copy(src[name], dst, name, expand_refs=True)


def _copy_tree(src: h5py.Group, dst: h5py.Group, raw_paths: set[str], tick, report: RepackReport) -> None:
    """Copy the members of ``src`` into ``dst``: raw_data groups member by member, the rest whole."""
    for name in src:
        if src.name == f"/{VERSION_DATA}" and name == SCRATCH:
            continue
        if src.name == bookkeeping.PATH and name.startswith(bookkeeping.PARKED_PREFIX):
            continue  # what a repair parked: torn, never read
        if _copy_link(src, dst, name):
            continue
        obj = src[name]
        if obj.name == bookkeeping.PATH:  # copied member by member, to leave the parked ones out
            _copy_tree(obj, _group_like(obj, dst, name), raw_paths, tick, report)
            continue
        if isinstance(obj, h5py.Group) and (
            obj.name in raw_paths or any(p.startswith(obj.name + "/") for p in raw_paths)
        ):
            group = _group_like(obj, dst, name)
            if obj.name in raw_paths:
                for member in obj:
                    if member == "raw_data":
                        report.chunks[obj["raw_data"].name] = _copy_raw_data(obj, group, tick)
                    elif member == "hash_table":
                        _copy_object(obj, group, member)
                        _trim_hash_table(group["hash_table"])
                    else:
                        _copy_object(obj, group, member)
            else:
                _copy_tree(obj, group, raw_paths, tick, report)
        else:
            _copy_object(src, dst, name)


def _has_ref(dt: np.dtype) -> bool:
    """Whether values of ``dt`` hold object references (also inside vlen, compound, array types)."""
    if h5py.check_dtype(ref=dt) is not None:
        return True
    base = h5py.check_dtype(vlen=dt)
    if base is not None and not isinstance(base, type):
        return _has_ref(np.dtype(base))
    if dt.fields is not None:  # a compound type: (dtype, offset[, title]) per field
        return any(_has_ref(field[0]) for field in dt.fields.values())
    return dt.subdtype is not None and _has_ref(dt.subdtype[0])


class _RefMap:
    """Object references of the old file turned into references to the same paths in the new one.

    libhdf5's object copy keeps the bytes of a reference (an address in the
    old file) even with ``expand_refs``: dimension-scale attachments
    (``DIMENSION_LIST``, ``REFERENCE_LIST``) would point into nothing.
    """

    def __init__(self, src: h5py.File, dst: h5py.File):
        self.src, self.dst = src, dst
        self._by_path: dict[str, h5py.Reference] = {}

    def ref(self, r: h5py.Reference) -> h5py.Reference:
        if not r:
            return r
        path = self.src[r].name
        got = self._by_path.get(path)
        if got is None:
            got = self._by_path[path] = self.dst[path].ref
        return got

    def value(self, v):
        if isinstance(v, h5py.Reference):
            return self.ref(v)
        if isinstance(v, np.ndarray):
            if v.dtype.names:
                out = v.copy()
                for n in v.dtype.names:
                    if v.dtype.fields[n][0].kind == "O":
                        out[n] = self.value(v[n])
                return out
            if v.dtype.kind == "O":
                flat = [self.value(x) for x in v.ravel()]
                out = np.empty(len(flat), dtype=object)
                for i, x in enumerate(flat):
                    out[i] = x
                return out.reshape(v.shape)
        return v


def _fix_references(src: h5py.File, dst: h5py.File) -> int:
    """Rewrite every attribute of ``dst`` holding object references (see :class:`_RefMap`); return their count."""
    refs = _RefMap(src, dst)
    fixed = 0

    def visit(name: str, target) -> None:
        """``target``, an object of ``dst``: its attributes from the object of ``src`` at its path."""
        nonlocal fixed
        if f"/{name}".startswith(f"/{VERSION_DATA}/{SCRATCH}"):
            return
        obj = src[target.name]
        for attr in list(obj.attrs):
            dt = obj.attrs.get_id(attr).dtype
            if not _has_ref(dt):
                continue
            value = refs.value(obj.attrs[attr])
            del target.attrs[attr]
            target.attrs.create(attr, value, dtype=dt)
            fixed += 1

    visit("", dst)
    dst.visititems(visit)  # what was copied: objects a repair parked in src are not visited
    return fixed


def _trim_hash_table(table: h5py.Dataset) -> None:
    """Drop rows past ``largest_index`` (a crashed commit's), keeping at least one row."""
    if "largest_index" not in table.attrs or table.chunks is None:
        return
    n = int(np.asarray(table.attrs["largest_index"]).reshape(-1)[0])
    if table.shape[0] > max(n, 1):
        table.resize((max(n, 1), *table.shape[1:]))


def repack(
    path: str | os.PathLike,
    out: str | os.PathLike | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> RepackReport:
    """Rewrite a versioned file compactly, giving the bytes freed by deletions back (see the module).

    Parameters
    ----------
    path : str or os.PathLike
        The file. It is replaced (atomically) unless ``out`` is given.
    out : str or os.PathLike, optional
        Write the compact copy there instead (replaced if it exists); ``path``
        is left as it was.
    progress : callable, optional
        ``progress(done, total)`` in chunk slots of raw_data, all datasets
        together, called after each slot (``vhdf5 repack`` draws a bar with it).

    Returns
    -------
    RepackReport
        Sizes before and after, chunks copied per raw_data, stored bytes kept
        and dropped.

    Raises
    ------
    NotVersionedError
        The file holds no version history (nothing is written).
    FileBusyError
        Another writer kept the file locked past the timeout (nothing written).
    NotHDF5Error
        ``path`` is not an HDF5 file.
    FileNotFoundError
        ``path`` does not exist.

    Notes
    -----
    Every version reads the same values, attributes, parents, timestamps and
    messages as before, every branch and tag names the same version, and
    versioned-hdf5 2.6 reads, commits to and deletes from the new file. Peak
    disk use: the old file plus the new one. Memory: one stored chunk.
    """
    from ..errors import NotVersionedError

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path!r} does not exist")
    target = os.fspath(out) if out is not None else path
    tmp = target + TEMP_SUFFIX
    with open_for_writing(path, hint="nothing to repack") as src:
        if f"{VERSION_DATA}/{VERSIONS}" not in src:
            raise NotVersionedError(f"{path!r} has no /{VERSION_DATA}/{VERSIONS} group: nothing to repack")
        finish_interrupted(src)  # an interrupted modify_metadata or deletion: finished first
        src.flush()
        report = RepackReport(path, target, os.path.getsize(path), None, persisted_free_space=persists_free_space(src))
        groups = _raw_groups(src[VERSION_DATA])
        plans = {g.name: _kept_slots(g) for g in groups}
        total = sum(k for k, _ in plans.values())
        for g in groups:
            kept, n_slots = plans[g.name]
            report.chunk_bytes += _stored_bytes(g["raw_data"], 0, kept)
            report.garbage_bytes += _stored_bytes(g["raw_data"], kept, n_slots)
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(done[0], total)

        if os.path.exists(tmp):
            os.remove(tmp)  # left by a repack that was killed
        track = bool(src.id.get_create_plist().get_link_creation_order())  # the root group's
        try:
            with h5py.File(tmp, "w", track_order=track, libver=src.libver) as dst:
                copy_attrs(src, dst)
                _copy_tree(src, dst, {g.name for g in groups}, tick, report)
                _fix_references(src, dst)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        _sync_dir(target)
    report.size_after = os.path.getsize(target)
    return report


def _sync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
