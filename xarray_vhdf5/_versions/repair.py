"""Rolling a damaged file back to its last whole version (``vhdf5 check --repair``).

:func:`repair` acts on a :class:`~xarray_vhdf5._versions.check.CheckReport` of the
same file, and only on what it names:

- ``current_version`` moves to the report's last whole version (the newest
  undamaged version along the current version's ancestry);
- the damaged versions and the groups left by interrupted commits are deleted
  with :func:`~xarray_vhdf5._versions.delete.delete_versions`: their children
  are re-parented to the nearest surviving ancestor and the chunks only they
  mapped are dropped from raw_data (compaction). When compaction cannot run
  (it reads every surviving version's mappings and the hash tables of the
  datasets concerned: a damaged one stops it), the groups are only unlinked,
  their children re-parented, and the report says so;
- a versions group that cannot be read (its links torn) is first rebuilt from
  the version index's addresses (:mod:`~xarray_vhdf5._versions.relink`), or a
  relink killed between its two link moves finished, and the file checked
  again: that report then drives the steps below (the one passed describes
  the old group);
- version attributes libhdf5 cannot read (``prev_version``, ``timestamp``:
  a torn global heap) are written again from the version index
  (:mod:`~xarray_vhdf5._versions.reattr`), and the file checked again, so
  that the version is not counted damaged;
- versions whose ``prev_version`` names no version (or closes a loop) get
  ``__first_version__`` as parent;
- hash-table rows whose chunk failed its check are retired: their digest is
  replaced by the placeholder of their raw_data slot
  (:func:`~xarray_vhdf5._versions.rebuild.placeholder_digest`), so no later
  commit deduplicates new data onto a damaged chunk. Their rows stay (commits
  still append above them);
- the version index is rebuilt from the remaining version groups (or, if that
  fails, its datasets deleted: it is rebuilt at the next writable open), without the commit
  token that lets a new handle take up the commit caches a process kept.

Each step is a mutation of the file (:func:`~xarray_vhdf5._versions.mutation.mutating`:
locked, flushed, counted); each leaves a valid file, so a repair interrupted
between two can be run again.

- chunks HDF5's chunk index places past the end of the file (a writer
  killed inside libhdf5's flush leaves such entries without their bytes):
  the file's end of allocation is moved past them
  (:func:`~xarray_vhdf5._backend.h5objects.allocate_through`), so libhdf5
  places nothing new over them; a finished chunk among them also has its
  digest retired (above) and its versions rolled back;
- a hash table libhdf5 cannot open (its header torn) is written again from
  the versions (``rebuild_hash_tables``; its dataset's group is replaced by
  one linking the same raw_data, the old one parked in the bookkeeping group,
  since libhdf5 reads a header to unlink it).

Versions that check out are never deleted and their data never rewritten;
their ``prev_version`` changes only when their parent is deleted. Other
damage outside the versions (a hash table that reads but disagrees with
raw_data) is left as found: ``rebuild_hash_tables`` rebuilds tables from the
versions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from .._backend.h5objects import allocate_through, end_of_allocation, readable, readable_tree
from .._backend.layout import FIRST_VERSION, VERSION_DATA, VERSIONS
from .._backend.signature import recorded_end
from ..errors import CorruptFileError, FileBusyError, StaleVersionError, VHDF5Error
from . import bookkeeping
from . import index as version_index
from .caches import COMMIT_TOKEN
from .check import CheckReport, check_file
from .chunkcheck import DAMAGE_ERRORS, describe
from .delete import delete_versions
from .mutation import file_name, mutating
from .objects import _open, dataset_paths
from .openrepair import moved_words
from .reattr import restore_attributes
from .rebuild import placeholder_digest, rebuild_hash_tables
from .reindex import ReindexReport, reindex, table_chunks_end, unindexed
from .relink import RelinkReport, finish_interrupted_relink, relink_versions
from .scratch import Scratch

__all__ = ["RepairReport", "chunks_end", "repair"]

#: What a deletion that cannot run on a damaged file raises (then the groups are only unlinked).
_DELETE_FAILURES = (*DAMAGE_ERRORS, VHDF5Error, NotImplementedError)


@dataclass
class RepairReport:
    """What :func:`repair` changed.

    Attributes
    ----------
    current_version_before, current_version : str or None
        ``current_version`` before and after.
    removed : list of str
        Damaged versions deleted.
    leftovers_removed : list of str
        Groups of interrupted commits deleted.
    reparented : dict of str to str
        Surviving versions whose parent was deleted: name -> new parent.
    rerooted : list of str
        Versions whose ``prev_version`` named no version: now ``__first_version__``.
    retired_rows : dict of str to int
        Per dataset, hash-table rows whose digest was replaced by a placeholder.
    compacted : bool
        Whether the chunks only deleted versions mapped were dropped from raw_data.
    index_rebuilt : bool
        Whether the version index was rebuilt (False: deleted, or untouched).
    notes : list of str
        What could not be done, and why.
    hash_tables_rebuilt : list of str
        Datasets whose hash table libhdf5 could not open, written again from
        the versions (:func:`~xarray_vhdf5._versions.rebuild.rebuild_hash_tables`).
    relinked : RelinkReport or None
        Set by ``vhdf5 check --repair`` when it first rebuilt a damaged versions
        group from the version index (:mod:`~xarray_vhdf5._versions.relink`).
    end_moved : int
        Bytes the file's end of allocation moved, past chunks the chunk index
        placed beyond it (``CheckReport.past_end``).
    extended : int
        Bytes of zeros the file was extended by, up to the end its superblock
        records (set by ``vhdf5 check --repair``:
        :func:`~xarray_vhdf5._versions.openrepair.extend_to_recorded_end`).
    restored : dict of str to list of str
        Versions whose unreadable ``prev_version`` or ``timestamp`` was written
        again from the version index (:mod:`~xarray_vhdf5._versions.reattr`):
        name -> the attributes.
    reindexed : list of ReindexReport
        Datasets whose raw_data chunk index libhdf5 could not read, rebuilt
        from their chunks' stored bytes (:mod:`~xarray_vhdf5._versions.reindex`).
    """

    current_version_before: str | None
    current_version: str | None
    removed: list[str] = field(default_factory=list)
    leftovers_removed: list[str] = field(default_factory=list)
    reparented: dict[str, str] = field(default_factory=dict)
    rerooted: list[str] = field(default_factory=list)
    retired_rows: dict[str, int] = field(default_factory=dict)
    compacted: bool = False
    index_rebuilt: bool = False
    notes: list[str] = field(default_factory=list)
    hash_tables_rebuilt: list[str] = field(default_factory=list)
    relinked: RelinkReport | None = None
    end_moved: int = 0
    restored: dict[str, list[str]] = field(default_factory=dict)
    extended: int = 0
    reindexed: list[ReindexReport] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether anything in the file was changed."""
        return bool(
            self.relinked is not None
            or self.current_version != self.current_version_before
            or self.removed
            or self.leftovers_removed
            or self.rerooted
            or self.retired_rows
            or self.index_rebuilt
            or self.hash_tables_rebuilt
            or self.end_moved
            or self.restored
            or self.extended
            or self.reindexed
        )

    def __str__(self) -> str:
        if not self.changed and not self.notes:
            return "nothing to repair"
        lines = str(self.relinked).splitlines() if self.relinked is not None else []
        if self.extended:
            lines.insert(0, f"file extended with {self.extended} bytes of zeros, to the end its superblock records")
        if self.restored:
            lines.append(
                "attributes that could not be read written again from the version index: "
                + ", ".join(f"{v} ({', '.join(a)})" for v, a in self.restored.items())
            )
        lines.extend(f"raw_data chunk index rebuilt: {r}" for r in self.reindexed)
        if self.current_version != self.current_version_before:
            lines.append(f"current version: {self.current_version_before} -> {self.current_version}")
        if self.removed:
            lines.append(f"deleted damaged versions: {', '.join(self.removed)}")
        if self.leftovers_removed:
            lines.append(f"deleted leftovers of interrupted commits: {', '.join(self.leftovers_removed)}")
        if self.reparented:
            lines.append("re-parented: " + ", ".join(f"{v} -> {p}" for v, p in self.reparented.items()))
        if self.rerooted:
            lines.append(f"parent set to {FIRST_VERSION}: {', '.join(self.rerooted)}")
        if self.retired_rows:
            lines.append(
                "hash-table rows of damaged chunks retired: "
                + ", ".join(f"{d}: {n}" for d, n in self.retired_rows.items())
            )
        if self.removed or self.leftovers_removed:
            lines.append("raw_data compacted" if self.compacted else "raw_data not compacted (groups unlinked only)")
        if self.end_moved:
            lines.append(moved_words(self.end_moved))
        if self.index_rebuilt:
            lines.append("version index rebuilt")
        if self.hash_tables_rebuilt:
            lines.append(
                f"hash tables that could not be read written again from the versions: "
                f"{', '.join(self.hash_tables_rebuilt)}"
            )
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def repair(f, report: CheckReport) -> RepairReport:
    """Roll a damaged file back to the last whole version ``report`` found, where it can.

    Parameters
    ----------
    f : h5py.File, h5py.Group or VersionedHDF5File
        The checked file, open writable (a ``VersionedHDF5File`` has its caches
        dropped and its versions re-read; other handles on the file must be
        reopened).
    report : CheckReport
        :func:`~xarray_vhdf5._versions.check.check_file`'s report of this file
        as it is now (run with ``rehash=True`` to find damaged chunks).

    Returns
    -------
    RepairReport
        What was changed (see the module docstring); check the file again to
        see what is left.

    Raises
    ------
    ValueError
        ``report`` is of another file, or names a last whole version the file
        no longer holds (checked before anything is written).
    CorruptFileError
        The versions group cannot be read and the version index cannot reach
        the versions (:func:`~xarray_vhdf5._versions.relink.relink_versions`).
    FileBusyError, StaleVersionError
        Another writer holds the file, or wrote it since this handle read it
        (:func:`~xarray_vhdf5._versions.mutation.mutating`); the steps done
        before are kept, each leaving a valid file.
    ReadOnlyError
        The file is open read-only.
    TypeError, ClosedFileError
        ``f`` is not an open h5py file or VersionedHDF5File.
    """
    # First, before anything is written: chunks the chunk index places past the end of
    # the file must not have new objects allocated over them (see _end_past_chunks).
    moved = _end_past_chunks(f.f if hasattr(f, "f") and not isinstance(f, h5py.Group) else f, report)
    finished = False
    if isinstance(f, (h5py.File, h5py.Group)) and f.file.mode != "r":
        finished = finish_interrupted_relink(f.file)  # else _open() finds no versions group
    h5file, registry = _open(f, "repair")
    _same_file(h5file, report)
    # Version attributes a torn global heap lost: from the index, before the relink judges the groups by them.
    restored = restore_attributes(h5file)
    relinked = relink_versions(h5file)  # a versions group that cannot be read: rebuilt from the index
    reindexed, notes = _reindex_unreadable(h5file)
    if relinked is not None or finished or restored or reindexed:
        # the report was of another file state; copied chunks are checked against their digests
        report = check_file(h5file, rehash=report.rehashed or bool(reindexed))
    vdata = h5file[VERSION_DATA]
    versions = vdata[VERSIONS]
    existing = set(versions)
    target = report.last_whole_version or FIRST_VERSION
    if target not in existing and target != FIRST_VERSION:
        raise ValueError(f"the report's last whole version {target!r} is not in the file: check it again")
    out = RepairReport(
        report.current_version,
        report.current_version,
        relinked=relinked,
        end_moved=moved,
        restored=restored,
        reindexed=reindexed,
        notes=notes,
    )
    damaged = [v for v in report.damaged_versions if v in existing and v != FIRST_VERSION]
    leftovers = [v for v in report.leftover_groups if v in existing and v not in damaged]
    doomed = damaged + leftovers
    rerooted = [v for v in report.reroot if v in existing and v not in doomed]
    if rerooted:
        with mutating(h5file, what="repair"):
            out.rerooted = [v for v in rerooted if _set_parent(versions, v, FIRST_VERSION, out)]
    if doomed:
        # A version holding an object libhdf5 cannot read fails its unlink halfway, and libhdf5's
        # cache of this handle then refuses the next unlink too (measured): such versions are
        # moved aside whole first (a link move reads no header below the group).
        torn = [v for v in doomed if not _walkable(versions, v)]
        if torn:
            with mutating(h5file, what="repair"):
                _unlink(h5file, torn, out, park=True)
        rest = [v for v in doomed if v not in torn]
        try:
            deleted = delete_versions(h5file, rest) if rest else None  # a mutation of its own
        except (FileBusyError, StaleVersionError):  # another writer, not damage
            raise
        except _DELETE_FAILURES as exc:
            out.notes.append(f"raw_data could not be compacted ({describe(exc)}): the groups were unlinked only")
            with mutating(h5file, what="repair"):
                _unlink(h5file, rest, out)
        else:
            out.compacted = deleted is not None
            if deleted is not None:
                out.reparented.update(deleted.reparented)
        gone = set(versions)
        out.removed = [v for v in damaged if v not in gone]
        out.leftovers_removed = [v for v in leftovers if v not in gone]
    if report.current_version != target or doomed or report.bad_rows or out.changed or report.index_wrong:
        with mutating(h5file, what="repair"):
            if report.current_version != target or doomed:
                try:
                    versions.attrs["current_version"] = target
                    out.current_version = target
                except DAMAGE_ERRORS as exc:
                    out.notes.append(f"current_version could not be written: {describe(exc)}")
            for path, rows in report.bad_rows.items():
                retired = _retire_rows(vdata, path, rows, out)
                if retired:
                    out.retired_rows[path] = retired
            if out.changed or report.index_wrong:
                _rebuild_index(vdata, versions, out)
    out.hash_tables_rebuilt = _rebuild_unreadable_tables(h5file, out)
    damaged_set = set(report.damaged_versions)
    left = sorted(
        {
            p.dataset
            for p in report.errors
            if p.dataset is not None and p.version not in damaged_set and p.dataset not in out.hash_tables_rebuilt
        }
    )
    if left:
        out.notes.append(
            f"rolling back does not fix the hash tables or raw_data of {', '.join(map(repr, left))}; "
            "rebuild_hash_tables(f, paths) writes hash tables again from the versions"
        )
    if registry is not None:
        registry.reload()
    return out


def _end_past_chunks(h5file, report: CheckReport) -> int:
    """Move the file's end of allocation past every raw_data chunk the chunk index places beyond it.

    A writer killed inside libhdf5's flush can leave chunk-index entries
    whose bytes never reached the file; libhdf5 would allocate what the repair
    writes over them, and a commit writing those rows again would then lose
    its chunk (or overwrite what was allocated there). Done before anything
    else is written (:func:`~xarray_vhdf5._backend.h5objects.allocate_through`).
    Returns the bytes moved (0: nothing lies past the end, or the file is
    read-only, which ``_open`` then refuses). The chunk indexes are walked
    only when ``report`` found chunks past the end (``CheckReport.past_end``).

    Raises
    ------
    CorruptFileError
        Chunks lie past the end and this handle cannot move it: libhdf5 moves
        it only through a driver like its default one, not through the
        journaled handles of ``open_file`` (repair by path: ``vhdf5 check
        --repair``, or any reader of this package, moves it first with
        :func:`~xarray_vhdf5._versions.openrepair.move_end_past_chunks`).
        Nothing was written.
    """
    if (
        not report.past_end
        or not isinstance(h5file, (h5py.File, h5py.Group))
        or h5file.file.mode == "r"
        or not h5file.id.valid
    ):
        return 0
    fid = h5file.file.id
    end = chunks_end(h5file)
    try:
        if end <= end_of_allocation(fid):
            return 0
        with mutating(h5file, what="repair"):
            return allocate_through(fid, end)
    except (RuntimeError, NotImplementedError) as exc:
        # Not openrepair.move_end_through: a move libhdf5 refuses is an error only when
        # chunks lie past what the superblock records (a damaged file can refuse it).
        name = file_name(h5file)
        recorded = recorded_end(name) if os.path.exists(name) else None
        past = end > int(fid.get_filesize()) or (recorded is not None and end > recorded)
        if not past:
            return 0
        raise CorruptFileError(
            f"{name!r}: the file holds objects or chunks past the end of allocation its superblock records "
            f"(chunks up to byte {end}), where libhdf5 would place new objects; this handle (driver "
            f"{h5file.file.driver!r}) cannot move the end of allocation past them ({describe(exc)}). Nothing "
            f"was changed: run `vhdf5 check --repair {name}`, or open the file once with xr.open_dataset or "
            "VersionedHDF5File.open, which repair it",
            path=name,
        ) from exc


def chunks_end(h5file: h5py.Group) -> int:
    """Where the last raw_data chunk that starts inside the file ends (bytes; 0: none), over every dataset.

    A writer killed while writing a chunk leaves it starting at or before the
    file's last byte. A chunk address past that is not such a chunk but a
    damaged index (a flipped bit can name any address): it is left to the
    check, which reports it, and never moves the end of allocation.
    """
    end = 0
    size = int(h5file.file.id.get_filesize())

    def visit(info) -> None:
        nonlocal end
        if info.byte_offset is not None and info.byte_offset <= size:
            end = max(end, info.byte_offset + info.size)

    if VERSION_DATA not in h5file:  # a relink interrupted between its moves: finished first
        return 0
    for path in dataset_paths(h5file):
        try:
            h5file[f"{VERSION_DATA}/{path}/raw_data"].id.chunk_iter(visit)
        except DAMAGE_ERRORS:  # damage the check reports; what was seen still counts, and
            end = max(end, table_chunks_end(h5file, path))  # what a rebuilt index will name
    return end


def _reindex_unreadable(h5file: h5py.Group) -> tuple[list[ReindexReport], list[str]]:
    """Rebuild every raw_data whose chunk index libhdf5 cannot walk (:mod:`~xarray_vhdf5._versions.reindex`).

    Returns what was rebuilt, and notes of what failed.
    """
    try:
        paths = unindexed(h5file)
        return reindex(h5file, paths), []
    except (FileBusyError, StaleVersionError):
        raise
    except _DELETE_FAILURES as exc:
        return [], [f"raw_data's chunk index could not be rebuilt: {describe(exc)}"]


def _rebuild_unreadable_tables(h5file: h5py.Group, out: RepairReport) -> list[str]:
    """Write again, from the versions, every hash table libhdf5 cannot open (:func:`rebuild_hash_tables`)."""
    try:
        unreadable = [
            path
            for path in dataset_paths(h5file)
            if not readable(h5file.file.id, f"/{VERSION_DATA}/{path}/hash_table".encode())
        ]
        if unreadable:
            rebuild_hash_tables(h5file, unreadable)  # a mutation of its own
    except (FileBusyError, StaleVersionError):
        raise
    except _DELETE_FAILURES as exc:
        out.notes.append(f"the hash tables that cannot be read could not be rebuilt: {describe(exc)}")
        return []
    return unreadable


def _same_file(h5file: h5py.Group, report: CheckReport) -> None:
    name = file_name(h5file)  # a journaled handle's file too
    try:
        same = os.path.samefile(name, report.path)
    except (OSError, TypeError, ValueError):
        same = os.path.abspath(name) == os.path.abspath(report.path)
    if not same:
        raise ValueError(f"the report is of {report.path!r}, not of {name!r}")


def _set_parent(versions: h5py.Group, name: str, parent: str, out: RepairReport) -> bool:
    try:
        versions[name].attrs["prev_version"] = parent
    except DAMAGE_ERRORS as exc:
        out.notes.append(f"the parent of {name!r} could not be set to {parent!r}: {describe(exc)}")
        return False
    return True


def _parent(versions: h5py.Group, name: str) -> str:
    try:
        prev = versions[name].attrs.get("prev_version", FIRST_VERSION)
    except DAMAGE_ERRORS:
        return FIRST_VERSION
    return prev.decode() if isinstance(prev, bytes) else str(prev)


def _walkable(versions: h5py.Group, name: str) -> bool:
    """Whether libhdf5 reads the header of every object under version ``name`` (:func:`readable_tree`)."""
    try:
        return readable_tree(versions[name].id)
    except DAMAGE_ERRORS:
        return False


def _unlink(h5file: h5py.Group, doomed: list[str], out: RepairReport, park: bool = False) -> None:
    """Delete the groups ``doomed`` without compaction, re-parenting their children (as delete_versions).

    ``park``: move them into the bookkeeping group instead
    (``/__vhdf5__/damaged_versions/<name>``, never read), for groups whose
    objects libhdf5 cannot read.
    """
    try:
        Scratch.recover(h5file)  # a deletion that failed halfway leaves its scratch group
    except DAMAGE_ERRORS as exc:
        out.notes.append(f"the scratch group of an interrupted deletion could not be cleared: {describe(exc)}")
    versions = h5file[VERSION_DATA][VERSIONS]
    gone = set(doomed)
    parents = {n: _parent(versions, n) for n in versions if n != FIRST_VERSION}

    def surviving(name: str) -> str:
        seen: set[str] = set()
        while name in gone and name not in seen:
            seen.add(name)
            name = parents.get(name, FIRST_VERSION)
        return FIRST_VERSION if name in gone or name not in parents else name

    for name, prev in parents.items():
        if name not in gone and prev in gone:
            new = surviving(prev)
            if _set_parent(versions, name, new, out):
                out.reparented[name] = new
    for name in doomed:
        if name in versions:
            try:
                if park:
                    h5file.move(versions[name].name, bookkeeping.parking_place(h5file, "versions", name))
                else:
                    del versions[name]
            except DAMAGE_ERRORS as exc:
                what = "moved aside" if park else "deleted"
                out.notes.append(f"the group of {name!r} could not be {what}: {describe(exc)}")


def _retire_rows(vdata: h5py.Group, path: str, rows: list[tuple[int, bytes]], out: RepairReport) -> int:
    """Give the hash-table rows ``(first raw_data row, digest)`` of ``path`` placeholder digests."""
    try:
        group = vdata[path]
        table = group["hash_table"]
        c0 = int(np.atleast_1d(group["raw_data"].attrs["chunks"])[0])
        n = int(np.asarray(table.attrs["largest_index"]).reshape(-1)[0])
        stored = table[:n]
    except DAMAGE_ERRORS as exc:
        if path in vdata:
            out.notes.append(f"the hash table of {path!r} could not be read to retire damaged rows: {describe(exc)}")
        return 0
    wanted = {(int(s), bytes(d)) for s, d in rows}
    digests = np.ascontiguousarray(stored["hash"], dtype=np.uint8).reshape(n, 32)
    starts = np.asarray(stored["shape"], dtype=np.int64).reshape(n, 2)[:, 0]
    hits = [i for i in range(n) if (int(starts[i]), bytes(digests[i])) in wanted]
    for i in hits:
        row = stored[i : i + 1].copy()
        row["hash"] = np.frombuffer(placeholder_digest(int(starts[i]) // c0), np.uint8)
        try:
            table[i : i + 1] = row
        except DAMAGE_ERRORS as exc:
            out.notes.append(f"row {i} of the hash table of {path!r} could not be retired: {describe(exc)}")
            return hits.index(i)
    return len(hits)


def _rebuild_index(vdata: h5py.Group, versions: h5py.Group, out: RepairReport) -> None:
    """Rewrite the version index from the version groups, and drop its commit token.

    A group whose attributes cannot be read (damaged, and its link could not
    be deleted either) is left out: the index then still lets this package
    open the file, where a scan of the version groups would fail on it.
    Without the token, no process takes up the commit caches it kept for the
    file (:mod:`~xarray_vhdf5._versions.caches`): they may hold a hash table
    whose rows were just retired, which its checks (``largest_index`` and the
    last digest) cannot see.
    """
    names, parents, stamps, committed, left_out = [], [], [], [], []
    try:
        for name in versions:
            if name == FIRST_VERSION:
                continue
            try:
                prev, stamp, done = version_index.read_group_entry(versions[name])
            except DAMAGE_ERRORS:
                left_out.append(name)
                continue
            names.append(name)
            parents.append(prev)
            stamps.append(stamp)
            committed.append(done)
        entries = version_index.IndexEntries(names, parents, np.array(stamps, np.int64), np.array(committed, bool))
        version_index.save(vdata, versions, entries)
        index = bookkeeping.open_group(vdata)
        assert index is not None  # version_index.save just wrote into it
        if COMMIT_TOKEN in index.attrs:
            del index.attrs[COMMIT_TOKEN]
        out.index_rebuilt = True
    except DAMAGE_ERRORS as exc:
        try:  # the group stays: it holds the file's write counters (versions.generation)
            index = bookkeeping.open_group(vdata)
            for member in ("rows", "names"):
                if index is not None and member in index:
                    del index[member]
            out.notes.append(
                f"the version index could not be rebuilt ({describe(exc)}): it was deleted, "
                "and is rebuilt when the file is next opened writable"
            )
        except DAMAGE_ERRORS as exc2:
            out.notes.append(f"the version index could neither be rebuilt nor deleted: {describe(exc2)}")
        return
    if left_out:
        out.notes.append(
            f"the version index leaves out {', '.join(map(repr, left_out))}, whose group cannot be "
            "read: this package opens the file without it (a scan of the version groups, as "
            "versioned-hdf5 makes, still fails on it)"
        )
