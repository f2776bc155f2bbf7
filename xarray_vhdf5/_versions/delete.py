"""Deleting versions and reclaiming the chunks only they used (versioned-hdf5's ``delete_versions``).

What is deleted (versioned-hdf5 2.6, ``replay.delete_versions``): the version groups;
every surviving version whose parent is deleted is re-parented to its nearest surviving
ancestor, and ``current_version`` moves the same way. Then, for every dataset, the chunks
of raw_data that no surviving version maps any more are dropped: raw_data is compacted,
its hash table rebuilt, the virtual datasets that pointed at moved chunks rebuilt, and
the ``_version_data/<name>`` group of a dataset no surviving version holds is deleted.

How raw_data is compacted (differs from versioned-hdf5, which copies every kept chunk
down in place, keeping their order, and so leaves the file wrong if it dies halfway)::

    before   slot  0  1  2  3  4  5  6      K = 4 chunks still mapped (x), holes (.)
                   x  .  x  .  x  x  -      at 1 and 3 below K, a tail above K
    after          x  5  x  4  -- truncated to K slots

Only chunks above slot ``K`` move, each into a hole below ``K``; chunks already below
``K`` stay where they are, so only the versions mapping a moved chunk get a new
virtual dataset, and a copy is one HDF5 chunk read and written as stored
(``read_direct_chunk`` / ``write_direct_chunk``: no decompression, no filter run).

Order of operations (crash safety). HDF5 has no transactions: what reaches the disk
is what the last ``flush`` wrote, plus whatever the metadata cache evicted since. So the
work is cut into epochs separated by a flush (a *barrier*); every state at a barrier
is a valid file in which each committed version reads its committed data, and within
an epoch space freed by the epoch is never written to (new objects go first, frees
last), so a crash between barriers leaves the previous state intact:

A. new objects, in the scratch group ``_version_data/__vhdf5_scratch__`` (invisible to
   both libraries): the final hash tables, a hash table with the dropped chunks'
   digests zeroed (a *tombstone* table), the rebuilt virtual datasets; plus a journal
   (an attribute) of where each belongs.
B. the version DAG: parents, ``current_version``, deleted groups unlinked; the
   tombstone tables swapped in, so that no digest points at a hole any more (a commit
   after a crash cannot dedupe onto a chunk about to be overwritten). ``largest_index``
   is unchanged, so commits still append above every live row.
C. tail chunks copied into holes. Holes are mapped by no version and by no digest.
D. the rebuilt virtual datasets swapped in (old and new read the same data: both
   copies exist until E); then the final hash tables (``largest_index = K``).
E. raw_data truncated to ``K`` slots, unreferenced dataset groups and the scratch
   group deleted.

The scratch group, its journal and the swaps are :mod:`.scratch`'s: a crash between
the two moves of a swap is finished by the next run (:meth:`.scratch.Scratch.recover`).

Memory: the chunk maps of one version at a time (one point per chunk, 16 bytes per
stored chunk; cached up to :data:`MAP_CACHE_BYTES` to avoid reading them twice), the
hash tables (48 bytes per chunk), and one stored chunk in flight. raw_data is never
read whole.

Space. Truncating raw_data frees its tail chunks inside libhdf5, which forgets
freed bytes when the file is closed unless the file was created with persistent
free-space tracking (``h5py.File(..., fs_strategy="fsm", fs_persist=True)``;
:func:`persists_free_space`; :func:`~xarray_vhdf5._versions.repack.repack` writes
files so). In other files (libhdf5's default, every file versioned-hdf5 creates)
the bytes were lost for good: the file kept its size and the next commits grew it
by their whole size. :func:`delete_keeping_space` (what
:func:`~xarray_vhdf5._versions.retention.expire` does in such files) leaves the
freed slots allocated past ``largest_index``, the leftover rows of ``docs/format.md``
that the next commit overwrites: both libraries write their new chunks there, an
uncompressed chunk over the old bytes, a compressed one there when it fits (else
libhdf5 moves it). Measured (benchmarks/bench_space.py, 100 versions of 8 chunks
each, every other one deleted, then 50 commits): the 50 commits grew the file by
1% (uncompressed) and 12% (gzip) of what they grew it without the deletion
(100% when truncating), by 0.2-1.2% in a file tracking free space.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import h5py
import numpy as np

from .._backend.hashing import is_vlen_string_dtype
from .._backend.layout import (
    FIRST_VERSION,
    HASH_TABLE_DTYPE,
    NETCDF_DIMENSIONS,
    VERSION_DATA,
    VERSIONS,
)
from .._backend.virtual import create_virtual_dataset
from ..errors import ReadOnlyError, UnsupportedError, VersionNotFoundError
from . import index as version_index
from . import refs, rootview
from .mutation import mutating
from .objects import (
    _open,
    check_file_argument,
    chunk_rows,
    copy_attrs,
    dataset_paths,
    read_chunk_map,
    version_dataset,
    write_hash_table,
)
from .scratch import Scratch, _attachment_plan, _barrier, _reattach, _str, relink_plan

__all__ = [
    "MAP_CACHE_BYTES",
    "DatasetCompaction",
    "DeleteReport",
    "delete_keeping_space",
    "delete_version",
    "delete_versions",
    "persists_free_space",
]

#: Upper bound, in bytes, of the chunk maps kept in memory between the two passes.
MAP_CACHE_BYTES = 32 * 1024 * 1024


# -- the plan -------------------------------------------------------------------------


@dataclass
class DatasetCompaction:
    """What deleting versions did to one dataset (chunk counts; slots of ``chunks[0]`` rows)."""

    name: str
    chunks_before: int
    chunks_after: int
    moved: int = 0
    rebuilt: list[str] = field(default_factory=list)
    dropped: bool = False


@dataclass
class DeleteReport:
    """The result of :func:`delete_versions`."""

    deleted: list[str]
    current_version: str
    reparented: dict[str, str]
    datasets: dict[str, DatasetCompaction] = field(default_factory=dict)

    @property
    def freed_chunks(self) -> int:
        """Chunks removed from raw_data, all datasets together."""
        return sum(d.chunks_before - d.chunks_after for d in self.datasets.values())


@dataclass
class _Plan:
    name: str
    raw: h5py.Dataset
    chunks: tuple[int, ...]
    holders: list[str]
    n_kept: int = 0
    moves: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))  # (n, 2): old slot, new slot
    tombstone: np.ndarray | None = None
    final: np.ndarray | None = None
    rebuild: list[str] = field(default_factory=list)
    maps: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    slots: dict[str, str] = field(default_factory=dict)  # scratch names: "tombstone", "final", versions


def _plan(h5file: h5py.Group, name: str, survivors: list[str], budget: list[int]) -> _Plan:
    """Read every surviving version's chunk map of ``name``; decide what moves. Reads only."""
    versions = h5file[VERSION_DATA][VERSIONS]
    group = h5file[VERSION_DATA][name]
    raw = group["raw_data"]
    chunks = tuple(int(c) for c in raw.attrs["chunks"])
    c0 = chunks[0]
    n_slots = math.ceil(raw.shape[0] / c0)
    used = np.zeros(n_slots, dtype=bool)
    top: dict[str, int] = {}
    plan = _Plan(name, raw, chunks, [])
    for version in survivors:
        vds = version_dataset(versions, version, name)
        if vds is None:
            continue
        plan.holders.append(version)
        flat, starts = read_chunk_map(vds, chunks, raw.name)
        if (starts % c0).any() or (starts // c0 >= n_slots).any():
            raise UnsupportedError(
                f"version {version!r} of {name!r} maps rows of raw_data that are not whole "
                f"chunk slots of {c0} rows inside its {raw.shape[0]} rows; this file was not "
                "written by versioned-hdf5 or xarray_vhdf5"
            )
        slots = (starts // c0).astype(np.int64)
        used[slots] = True
        top[version] = int(slots.max()) if slots.size else -1
        if budget[0] >= flat.nbytes + slots.nbytes:
            budget[0] -= flat.nbytes + slots.nbytes
            plan.maps[version] = (flat, slots)
    kept = np.flatnonzero(used)
    k = plan.n_kept = len(kept)
    tail = kept[kept >= k]
    holes = np.setdiff1d(np.arange(k), kept[kept < k])
    plan.moves = np.stack([tail, holes], axis=1)
    plan.rebuild = [v for v in plan.holders if top[v] >= k]

    table = group["hash_table"]
    rows = table[: int(table.attrs.get("largest_index", 0))]
    row_start = rows["shape"][:, 0]
    row_slot = row_start // c0
    live = np.zeros(len(rows), dtype=bool)
    valid = (row_start % c0 == 0) & (row_slot >= 0) & (row_slot < n_slots)
    live[valid] = used[row_slot[valid]]
    if len(tail):
        plan.tombstone = rows.copy()
        plan.tombstone["hash"][~live] = 0
    # Final table: row i describes slot i.
    old_of_new = np.arange(k)
    old_of_new[holes] = tail
    final = np.zeros(k, HASH_TABLE_DTYPE)
    final["shape"][:, 0] = np.arange(k) * c0
    final["shape"][:, 1] = final["shape"][:, 0] + c0
    row_of_slot = np.full(n_slots, -1, np.int64)
    live_rows = np.flatnonzero(live)
    row_of_slot[row_slot[live_rows[::-1]]] = live_rows[::-1]  # first row wins
    has_row = row_of_slot[old_of_new] >= 0 if k else np.zeros(0, bool)
    src = rows[row_of_slot[old_of_new][has_row]]
    final["hash"][has_row] = src["hash"]
    final["shape"][has_row, 1] = final["shape"][has_row, 0] + (src["shape"][:, 1] - src["shape"][:, 0])
    if not (len(tail) == 0 and len(rows) == k and rows.tobytes() == final.tobytes()):
        plan.final = final
    return plan


# -- the operation ----------------------------------------------------------------------


def _move_chunks(raw: h5py.Dataset, moves: np.ndarray, chunks: tuple[int, ...]) -> None:
    """Copy each stored chunk at slot ``old`` to slot ``new`` (one chunk in memory at a time)."""
    c0, rest = chunks[0], (0,) * (raw.ndim - 1)
    direct = raw.chunks == chunks and not is_vlen_string_dtype(raw.dtype)
    for old, new in moves.tolist():
        if direct:
            try:
                mask, data = raw.id.read_direct_chunk((old * c0, *rest))
            except (RuntimeError, OSError, KeyError):  # never allocated: copy the fill value
                pass
            else:
                raw.id.write_direct_chunk((new * c0, *rest), data, mask)
                continue
        raw[new * c0 : (new + 1) * c0] = raw[old * c0 : (old + 1) * c0]


def _rebuild_vds(h5file, scratch: Scratch, plan: _Plan, version: str, remap: np.ndarray) -> str:
    """Create, in the scratch group, ``version``'s virtual dataset with moved chunks remapped."""
    versions = h5file[VERSION_DATA][VERSIONS]
    old = versions[version][plan.name]
    c0 = plan.chunks[0]
    if version in plan.maps:
        flat, slots = plan.maps.pop(version)
    else:
        flat, starts = read_chunk_map(old, plan.chunks, plan.raw.name)
        slots = (starts // c0).astype(np.int64)
    rows = chunk_rows(old.shape, plan.chunks, flat, remap[slots] * c0)
    name = scratch.reserve(f"{versions.name}/{version}/{plan.name}")
    vds = create_virtual_dataset(scratch.group, name, plan.raw, old.shape, plan.chunks, rows)
    # Attachments are references to objects: made again after the swap (_reattach).
    copy_attrs(old, vds, skip=("raw_data", "chunks", "DIMENSION_LIST", "REFERENCE_LIST"))
    return name


def persists_free_space(h5file: h5py.Group) -> bool:
    """True when libhdf5 tracks the file's free space across closes (created with ``fs_persist=True``).

    Such a file keeps a list of its freed byte ranges, which later allocations
    of any object take from (module docstring, "Space"); in other files
    (libhdf5's default, and every file versioned-hdf5 creates) bytes freed
    are forgotten when the file is closed.
    """
    return bool(h5file.file.id.get_create_plist().get_file_space_strategy()[1])


def delete_versions(f, versions_to_delete: str | Iterable[str]) -> DeleteReport:
    """Delete versions from the file and reclaim the chunks no surviving version uses.

    Parameters
    ----------
    f : VersionedHDF5File or h5py.File
        The file, open writable. A :class:`VersionedHDF5File` has its version index
        updated; other ``VersionedHDF5File`` objects on the same file must be reopened.
    versions_to_delete : str or iterable of str
        Names of versions (groups of ``_version_data/versions``; a group left
        uncommitted by a crashed commit may be named too). Empty: delete nothing,
        but finish an interrupted deletion and compact every dataset (drop the
        chunks no version maps, e.g. left by a failed commit, and the datasets
        no version holds).
    Returns
    -------
    DeleteReport
        The deleted versions, the new current version, the re-parented versions
        (name -> new parent) and, per dataset, chunks before/after (counted in
        raw_data slots of ``chunks[0]`` rows), moved chunks and rebuilt versions.

    Raises
    ------
    VersionNotFoundError
        A name is not a version of the file (``KeyError``; versioned-hdf5 2.6
        raises ValueError). Nothing is changed.
    ReadOnlyError
        ``__first_version__`` was named (it is the root of the version DAG;
        versioned-hdf5 raises ValueError too), a tagged version was named
        (delete the tag first), or the file is open read-only.
    UnsupportedError
        A version maps raw_data rows that are not whole chunk slots.
    ValueError
        A version's mappings do not read whole chunks of its dataset's raw_data
        (e.g. left by an interrupted ``modify_metadata``: run it again first).
    TypeError
        ``f`` is not an h5py.File or VersionedHDF5File (e.g. a path: open it
        first; versioned-hdf5 2.6 takes no path either).
    ClosedFileError
        ``f`` is closed.

    Notes
    -----
    Semantics of versioned-hdf5 2.6 ``delete_versions``: children of a deleted version
    get its nearest surviving ancestor as ``prev_version`` (``__first_version__`` if
    none), and so does ``current_version``; so do branches (a branch left with
    no surviving version is deleted). Tagged versions are not deleted. Every surviving version reads exactly what
    it read before, through both libraries. See the module docstring for the order of
    operations (every flush leaves a valid file) and the memory bound. raw_data keeps
    its surviving chunks but not their order (versioned-hdf5 keeps the order).
    """
    return delete_keeping_space(f, versions_to_delete, keep_freed=False, caller="delete_versions")


def delete_keeping_space(
    f, versions_to_delete: str | Iterable[str], *, keep_freed: bool = True, caller: str = "delete_keeping_space"
) -> DeleteReport:
    """:func:`delete_versions`, leaving the freed slots of raw_data for the next commits to write over.

    ``delete_versions`` keeps versioned-hdf5 2.6's signature and result (raw_data
    truncated to its kept chunks); this is the same deletion with
    ``keep_freed=True``: the slots freed stay allocated past ``largest_index``
    (the leftover rows of ``docs/format.md``), where both libraries write their next new
    chunks, over the old bytes (module docstring, "Space").
    :func:`~xarray_vhdf5._versions.retention.expire` deletes so unless the file
    :func:`persists_free_space`.

    Parameters
    ----------
    f, versions_to_delete
        As :func:`delete_versions`.
    keep_freed : bool, keyword-only
        False: truncate raw_data, exactly :func:`delete_versions`.
    caller : str, keyword-only
        The public function called, for messages.

    Returns
    -------
    DeleteReport
        As :func:`delete_versions`.

    Raises
    ------
    VersionNotFoundError, ReadOnlyError, UnsupportedError, ValueError, TypeError, ClosedFileError
        As :func:`delete_versions`.
    """
    h5file, registry = _open(f, caller)
    with mutating(h5file, moves=True, what="deletion"):
        return _delete_versions(h5file, registry, versions_to_delete, keep_freed=keep_freed)


def _delete_versions(
    h5file: h5py.Group, registry, versions_to_delete: str | Iterable[str], *, keep_freed: bool = False
) -> DeleteReport:
    names = [versions_to_delete] if isinstance(versions_to_delete, str) else list(versions_to_delete)
    versions = h5file[VERSION_DATA][VERSIONS]
    if FIRST_VERSION in names:
        raise ReadOnlyError(f"{FIRST_VERSION!r} is the root of the version DAG and cannot be deleted")
    missing = [n for n in names if not isinstance(n, str) or n not in versions]
    if missing:
        existing = [n for n in versions if n != FIRST_VERSION]
        shown = ", ".join(map(repr, existing[-10:])) or "none"
        raise VersionNotFoundError(f"cannot delete {', '.join(map(repr, missing))}: no such version; versions: {shown}")
    tagged = {v: t for t, v in refs.tags(h5file).items() if v in names}
    if tagged:
        raise ReadOnlyError(
            "cannot delete tagged versions: "
            + ", ".join(f"{v!r} (tag {t!r})" for v, t in tagged.items())
            + "; a tag keeps its version: delete the tag first (delete_tag)"
        )
    Scratch.recover(h5file)
    index_before = version_index.load(h5file[VERSION_DATA], versions)  # None: stale or absent
    doomed = set(names)
    parents = {n: _str(versions[n].attrs.get("prev_version", FIRST_VERSION)) for n in versions if n != FIRST_VERSION}
    survivors = [n for n in parents if n not in doomed]

    def surviving(name: str) -> str:
        seen = set()
        while name in doomed and name not in seen:
            seen.add(name)
            name = parents.get(name, FIRST_VERSION)
        return FIRST_VERSION if name in doomed else name

    reparent = {n: surviving(parents[n]) for n in survivors if parents[n] in doomed}
    current = surviving(_str(versions.attrs["current_version"]))
    report = DeleteReport(sorted(doomed), current, reparent)
    # Only datasets a deleted version holds can lose chunks (versioned-hdf5 skips the others
    # too); with nothing to delete, every dataset is compacted.
    # The raw_data of netCDF-4 dimension scales is shared by scales at other paths (none is
    # named after it): it is never compacted, else deleting nothing emptied it.
    paths = [d for d in dataset_paths(h5file) if d != NETCDF_DIMENSIONS]
    if doomed:
        paths = [d for d in paths if any(d in versions[v] for v in doomed)]
    budget = [MAP_CACHE_BYTES]
    plans = [_plan(h5file, d, survivors, budget) for d in paths]

    # A: new objects in the scratch group.
    scratch = Scratch(h5file)
    rebuilt: dict[str, dict[str, str]] = {}  # version group path -> member path -> scratch name
    for p in plans:
        report.datasets[p.name] = DatasetCompaction(
            p.name,
            math.ceil(p.raw.shape[0] / p.chunks[0]),
            p.n_kept,
            len(p.moves),
            list(p.rebuild),
            dropped=not p.holders,
        )
        if not p.holders:
            continue
        table_path = f"{p.raw.parent.name}/hash_table"
        if p.tombstone is not None:
            p.slots["tombstone"] = scratch.reserve(table_path)
            write_hash_table(scratch.group, p.slots["tombstone"], p.tombstone)
        if p.final is not None:
            p.slots["final"] = scratch.reserve(table_path)
            write_hash_table(scratch.group, p.slots["final"], p.final)
        remap = np.arange(math.ceil(p.raw.shape[0] / p.chunks[0]), dtype=np.int64)
        remap[p.moves[:, 0]] = p.moves[:, 1]
        for version in p.rebuild:
            rebuilt.setdefault(f"{versions.name}/{version}", {})[p.name] = _rebuild_vds(
                h5file, scratch, p, version, remap
            )
    swaps = []  # (parent group path, {member: scratch name}, {member: relink slot})
    for vpath, members in rebuilt.items():
        by_parent: dict[str, dict[str, str]] = {}
        for member, sname in members.items():
            head, _, tail = f"{vpath}/{member}".rpartition("/")
            by_parent.setdefault(head, {})[tail] = sname
        for parent, new in by_parent.items():
            swaps.append((parent, new, relink_plan(h5file, parent, new, scratch)))
    attachments = {vpath: _attachment_plan(h5file[vpath]) for vpath in rebuilt}
    attachments = {vpath: plan for vpath, plan in attachments.items() if plan}
    if scratch.journal:
        scratch.write_journal()
    _barrier(h5file, "allocated")

    # B: the version DAG, then tombstone hash tables.
    for name, parent in reparent.items():
        versions[name].attrs["prev_version"] = parent
    versions.attrs["current_version"] = current
    refs.follow_deletion(h5file, surviving)
    for name in doomed:
        del versions[name]
    rootview.update_root_view(h5file, current)  # the root's links to a deleted version would dangle
    for p in plans:
        if "tombstone" in p.slots:
            scratch.move_in(p.slots["tombstone"], f"{p.raw.parent.name}/hash_table")
    _barrier(h5file, "unlinked")

    # C: chunks above the kept count into the holes below it.
    for p in plans:
        if p.holders and len(p.moves):
            _move_chunks(p.raw, p.moves, p.chunks)
    _barrier(h5file, "moved")

    # D: virtual datasets, then final hash tables.
    for parent, new, relink in swaps:
        scratch.replace_members(parent, new, relink)
    for vpath, plan in attachments.items():
        _reattach(h5file[vpath], plan)
    _barrier(h5file, "relinked")
    for p in plans:
        if "final" in p.slots:
            scratch.move_in(p.slots["final"], f"{p.raw.parent.name}/hash_table")
    _barrier(h5file, "tables")

    # E: truncate, drop unreferenced datasets, clear the scratch group.
    for p in plans:
        if not p.holders:
            _drop_dataset(h5file, p.name)
        elif p.raw.shape[0] > p.n_kept * p.chunks[0] and not keep_freed:
            p.raw.resize((p.n_kept * p.chunks[0], *p.raw.shape[1:]))
    scratch.remove()
    _barrier(h5file, "done")

    entries = version_index.after_delete(h5file[VERSION_DATA], versions, index_before, doomed, reparent)
    if registry is not None:
        registry.replace(entries)
    return report


def _drop_dataset(h5file: h5py.Group, name: str) -> None:
    """Delete ``_version_data/<name>`` and the groups above it left empty."""
    root = h5file[VERSION_DATA]
    del root[name]
    parts = name.split("/")[:-1]
    while parts:
        path = "/".join(parts)
        if len(root[path]) or root[path].attrs.keys():
            break
        del root[path]
        parts.pop()


def delete_version(f, versions_to_delete: str | Iterable[str]) -> DeleteReport:
    """Same as :func:`delete_versions` (versioned-hdf5 2.6's ``delete_version`` is an alias).

    Raises
    ------
    VersionNotFoundError, ReadOnlyError, TypeError, ClosedFileError
        As :func:`delete_versions`.
    """
    check_file_argument("delete_version", f)
    return delete_versions(f, versions_to_delete)
