"""Repairing on open what a writer killed inside libhdf5's flush left (as SQLite rolls back a hot journal).

A commit through a plain ``h5py.File`` reaches the disk when libhdf5 flushes
its metadata cache, in place and entry by entry. A process killed inside
that flush can leave two kinds of damage that stop every later reader and
writer, although every version committed before is intact
(``docs/howto/repair.md``; measured with ``testing._crash``):

- the versions group's header torn: no version can be listed or opened;
- ``current_version`` naming a version whose group never reached the disk,
  was left with ``committed=False``, or cannot be read: every opener that
  asks for the current version, and every commit on top of it, fails.

:func:`interrupted_damage` tells them in a few reads (the versions group, its
``current_version``, that version's ``committed``), cheap enough to run at
every writable open. Where it finds one:

- a writable :class:`~xarray_vhdf5.VersionedHDF5File` repairs through its
  own handle before reading anything (:func:`repair_through`): the repair of
  ``vhdf5 check --repair`` (:func:`~xarray_vhdf5._versions.check.check_file`
  then :func:`~xarray_vhdf5._versions.repair.repair`: the versions group
  relinked from the version index's addresses, ``current_version`` moved back
  to the last whole version, the interrupted version's leftovers deleted),
  journaled when the handle is (``open_file``, the xarray writers, the CLI);
- this package's readers (``VersionedHDF5File.open``, ``xr.open_dataset``)
  check at their first open and, if damaged, take the file's write lock and
  open it for writing once (:func:`repair_at`), which repairs it; then they read;
- a read-only ``h5py.File`` handle cannot repair: a torn versions group
  raises :class:`~xarray_vhdf5.errors.CorruptFileError` saying how to open it.

Each repair issues :class:`~xarray_vhdf5.errors.RepairedFileWarning` saying
what was found and what was done. Versions that check out are never deleted
or rewritten (:mod:`~xarray_vhdf5._versions.repair`).
"""

from __future__ import annotations

import os
import warnings

import h5py
import numpy as np
from h5py import h5a, h5o, h5t

from .._backend.h5attrs import read_attr
from .._backend.layout import FIRST_VERSION, VERSION_DATA, VERSIONS
from .._backend.signature import recorded_end
from ..errors import CorruptFileError, RepairedFileWarning
from .chunkcheck import DAMAGE_ERRORS, describe
from .mutation import file_name

__all__ = [
    "committed_flag",
    "extend_to_recorded_end",
    "interrupted_damage",
    "move_end_past_chunks",
    "move_end_through",
    "moved_words",
    "past_allocation",
    "repair_at",
    "repair_through",
    "short_of_end",
    "torn_versions",
    "warn_moved",
]

#: The start of :func:`interrupted_damage`'s description of a torn versions group.
TORN = "its versions group cannot be read"


def interrupted_damage(h5file: h5py.Group) -> str | None:
    """What an interrupted flush left that stops readers and writers, in plain words; None if nothing.

    Opens the versions group and the version its ``current_version`` names,
    and reads that version's ``committed`` attribute, with libhdf5's calls
    (some tens of microseconds; the number of versions does not matter). A
    file without ``_version_data/versions`` gives None (the caller says it is
    not versioned).

    Parameters
    ----------
    h5file : h5py.File or h5py.Group
        The group holding ``_version_data``, open.

    Returns
    -------
    str or None
        The damage, in words that start with :data:`TORN` when the versions
        group cannot be read (:func:`torn_versions`); None when the versions
        group, its ``current_version`` and that version's ``committed`` read
        as a finished commit leaves them.
    """
    try:
        versions = h5o.open(h5file.id, f"{VERSION_DATA}/{VERSIONS}".encode())
        current = read_attr(versions, "current_version", expect="str")
    except DAMAGE_ERRORS as exc:
        try:
            if f"{VERSION_DATA}/{VERSIONS}" not in h5file:
                return None  # not versioned
        except DAMAGE_ERRORS:
            return None  # _version_data itself: not this kind of damage; the caller's reads say it
        return f"{TORN} ({describe(exc)})"
    current = current.decode() if isinstance(current, bytes) else str(current)
    if current == FIRST_VERSION:
        return None
    name = current.encode()
    try:
        group = h5o.open(versions, name)
    except DAMAGE_ERRORS as exc:
        try:
            present = versions.links.exists(name)
        except DAMAGE_ERRORS:
            present = True
        if not present:
            return f"current_version names {current!r}, whose group never reached the file (a commit interrupted)"
        return f"the current version {current!r} cannot be read ({describe(exc)})"
    try:
        committed = committed_flag(group)
    except DAMAGE_ERRORS as exc:
        return f"the current version {current!r} cannot be read ({describe(exc)})"
    if committed is False:
        return f"current_version names {current!r}, a group left with committed=False (a commit interrupted)"
    return None


def committed_flag(group) -> bool | None:
    """A version group's ``committed`` attribute (h5py's boolean enum read as int8); None if it has none.

    ``group``: the group's low-level id (``h5py.h5g.GroupID`` or ``h5py.h5o`` object id).
    """
    if not h5a.exists(group, b"committed"):
        return None
    value = np.empty((), dtype=np.int8)
    h5a.open(group, b"committed").read(value, mtype=h5t.NATIVE_INT8)
    return bool(value)


def torn_versions(why: str | None) -> bool:
    """Whether :func:`interrupted_damage`'s ``why`` is a torn versions group (nothing can be listed)."""
    return why is not None and why.startswith(TORN)


def repair_through(h5file: h5py.Group, why: str, *, moved: int = 0) -> None:
    """Repair, through the writable handle ``h5file``, the damage :func:`interrupted_damage` described as ``why``.

    Runs :func:`~xarray_vhdf5._versions.check.check_file` and
    :func:`~xarray_vhdf5._versions.repair.repair` (each of its steps a
    mutation: locked, flushed, journaled through a journaled handle), then
    warns with :class:`~xarray_vhdf5.errors.RepairedFileWarning` (``moved``:
    bytes :func:`move_end_past_chunks` moved the end of allocation before, said too).

    Raises
    ------
    CorruptFileError
        The repair failed, or left the damage (``vhdf5 check FILE`` then lists
        what is wrong); what it did before is kept, each step leaving a valid file.
    FileBusyError, StaleVersionError
        Another writer holds the file, or wrote it meanwhile (as for any mutation).
    """
    from ..errors import FileBusyError, StaleVersionError
    from .check import check_file
    from .metadata import finish_interrupted
    from .repair import repair

    path = file_name(h5file)
    if not torn_versions(why):  # a dead writer's modify_metadata or deletion first, as every writable open does
        finish_interrupted(h5file)
    try:
        done = repair(h5file, check_file(h5file))
    except (FileBusyError, StaleVersionError):
        raise
    except Exception as exc:
        raise CorruptFileError(
            f"{path!r}: {why}; repairing it on open failed ({describe(exc)}). `vhdf5 check {path}` lists what is wrong",
            path=path,
        ) from exc
    left = interrupted_damage(h5file)
    if left is not None:
        raise CorruptFileError(
            f"{path!r}: {why}; the repair on open left it so ({left}). `vhdf5 check {path}` lists what is wrong",
            path=path,
        )
    lines = str(done).splitlines() if done.changed else []
    if moved:
        lines.insert(0, moved_words(moved))
    warnings.warn(
        RepairedFileWarning(
            f"{path!r}: {why}. Repaired on open, as `vhdf5 check --repair` does: " + "; ".join(lines),
            path=path,
        ),
        stacklevel=4,
    )


def moved_words(moved: int) -> str:
    """How a repair says it moved the end of allocation ``moved`` bytes (``RepairReport.end_moved``)."""
    return f"end of allocation moved {moved} bytes, past raw_data chunks an interrupted commit left beyond it"


def warn_moved(path: str | h5py.Group, moved: int) -> None:
    """Issue :class:`~xarray_vhdf5.errors.RepairedFileWarning` for an end of allocation moved ``moved`` bytes.

    Parameters
    ----------
    path : str or h5py.Group
        The file's path, or an open group of it (named by
        :func:`~xarray_vhdf5._versions.mutation.file_name`).
    moved : int
        Bytes moved; nothing is issued when 0.
    """
    if not moved:
        return
    name = path if isinstance(path, str) else file_name(path)
    warnings.warn(
        RepairedFileWarning(
            f"{name!r}: an interrupted commit left raw_data chunks past the end of allocation, where "
            f"libhdf5 would have placed new objects. Repaired on open, as `vhdf5 check --repair` does: "
            + moved_words(moved),
            path=name,
        ),
        stacklevel=4,
    )


def repair_at(path: str | os.PathLike, why: str) -> None:
    """Repair the file at ``path`` for a reader: open it for writing once, which repairs it.

    Takes the file's write lock (:func:`~xarray_vhdf5._versions.mutation.open_for_writing`:
    a live writer is waited for, and may have repaired it first: the damage
    is looked for again under the lock).

    Raises
    ------
    CorruptFileError
        This process may not write the file (``why`` and what to do are said), or
        the repair failed (:func:`repair_through`).
    FileBusyError
        Another writer held the file past the timeout.
    """
    from .mutation import open_for_writing

    path = os.fspath(path)
    try:
        # The opener moves the end of allocation past what the dead writer left first.
        with open_for_writing(path, hint=" to repair it") as f:
            found = interrupted_damage(f)
            if found is not None:
                repair_through(f, found)
    except PermissionError as exc:
        raise CorruptFileError(
            f"{path!r}: {why}, and this process may not write the file to repair it; open it once with "
            f"write permission (any xarray_vhdf5 reader or writer repairs it) or run `vhdf5 check --repair {path}`",
            path=path,
        ) from exc


def past_allocation(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` is longer than the end of allocation its superblock records.

    A writer killed inside libhdf5's flush leaves it so, with objects and
    chunks past that end (:func:`move_end_past_chunks`); a writer killed
    between two flushes, or libhdf5 itself, can leave free space there too.
    Reads the superblock's first bytes
    (:func:`~xarray_vhdf5._backend.signature.recorded_end`): some
    microseconds, the test every writable open of this package makes before it
    looks at any chunk.

    Parameters
    ----------
    path : str or os.PathLike
        The file.

    Returns
    -------
    bool
        True when the file's length (bytes) exceeds the superblock's end of
        allocation; False otherwise, when the superblock is not one
        :func:`~xarray_vhdf5._backend.signature.recorded_end` reads, or when
        the file cannot be read.
    """
    end = recorded_end(path)
    try:
        return end is not None and os.path.getsize(path) > end
    except OSError:
        return False


def short_of_end(path: str | os.PathLike) -> int:
    """Bytes the file at ``path`` lacks before the end its superblock records (0: none).

    libhdf5 refuses to open such a file ("truncated file"). A writer killed
    inside libhdf5's flush can leave it so: libhdf5 had shortened the file to
    its new end of allocation when the superblock still on disk recorded the
    old one (measured with ``delete_versions`` through a plain ``h5py.File``,
    ``tests/test_concurrency_slow.py``). A file cut short by a copy or a full
    disk looks the same. Reads the superblock's first bytes
    (:func:`~xarray_vhdf5._backend.signature.recorded_end`); 0 when it cannot.
    """
    end = recorded_end(path)
    try:
        return max(0, end - os.path.getsize(path)) if end is not None else 0
    except OSError:
        return 0


def extend_to_recorded_end(path: str | os.PathLike) -> int:
    """Extend a file :func:`short_of_end` finds short with zeros, up to the end its superblock records.

    What ``vhdf5 check --repair`` does first with such a file, so that libhdf5
    opens it and the check that follows finds what the missing bytes held:
    objects libhdf5 cannot read there damage their versions, chunks there fail
    their SHA-256 and are retired (the repair rolls those versions back;
    nothing reads the zeros as data). Taken under the file's ``WRITE`` lock,
    held exclusively; a file with a journal beside it is left to the journal's
    roll-back (:func:`~xarray_vhdf5._versions.journal.recover`), which restores
    its length. The zeros follow the file's own bytes, which stay as they were,
    also when the repair that follows fails.

    Returns
    -------
    int
        Bytes added (0: the file was not short, or a journal is beside it).

    Raises
    ------
    FileBusyError
        Another writer held the file past the timeout.
    OSError
        The file cannot be written.
    """
    from .journal import journal_path
    from .locking import file_locks

    path = os.fspath(path)
    with file_locks(path).writing():
        missing = short_of_end(path)
        if not missing or os.path.exists(journal_path(path)):
            return 0
        with open(path, "r+b") as fh:
            fh.truncate(os.path.getsize(path) + missing)
            fh.flush()
            os.fsync(fh.fileno())
        return missing


def move_end_through(h5file: h5py.Group, *, always: bool = False) -> int:
    """:func:`move_end_past_chunks` through a writable handle of libhdf5's default driver.

    Compares the file's length with libhdf5's end of allocation first (two
    calls), and walks the chunk indexes only when the file is longer, or
    ``always`` (a chunk whose bytes never reached the file can start at its
    very end: a repair looks for that too). A handle of another driver (the
    journaled ones of ``open_file``) returns 0: its opener moved the end
    before libhdf5 opened the file.

    Parameters
    ----------
    h5file : h5py.File or h5py.Group
        A group of the file, open writable.
    always : bool
        Walk the chunk indexes even when the file is not longer than its end
        of allocation.

    Returns
    -------
    int
        Bytes the end of allocation moved (0: nothing lies past it).

    Raises
    ------
    FileBusyError, StaleVersionError
        The move is a mutation (:func:`~xarray_vhdf5._versions.mutation.mutating`):
        another writer holds the file, or wrote it since this handle read it.
    """
    from .._backend.h5objects import allocate_through, end_of_allocation
    from .mutation import mutating
    from .repair import chunks_end

    fid = h5file.file.id
    try:
        allocated = end_of_allocation(fid)
    except (RuntimeError, NotImplementedError):
        return 0
    if not always and int(fid.get_filesize()) <= allocated:
        return 0
    end = chunks_end(h5file)
    if end <= allocated:  # only free space past it
        return 0
    with mutating(h5file, what="repair"):
        return allocate_through(fid, end)


def move_end_past_chunks(path: str | os.PathLike, *, flocked: bool = False) -> int:
    """Before a repair by path: move the file's end of allocation past what a killed writer left beyond it.

    Objects and chunks past the end of allocation the superblock records
    (the file longer than it, chunk-index entries naming bytes past it):
    libhdf5 would place new objects over them
    (:func:`~xarray_vhdf5._backend.h5objects.allocate_through`). libhdf5 moves
    the end of allocation only through a driver like its default one, so this
    opens the file so (``h5py.File(path, "r+")``), takes the ``WRITE`` lock,
    moves it and closes: the superblock is all it writes. The journaled
    openers (``open_file``, the xarray writers) call it before libhdf5 opens
    the file through their own driver.

    Only when a chunk the chunk index names lies past the end of allocation:
    a file merely longer than its superblock says holds free space there.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    flocked : bool
        The caller holds libhdf5's lock (``flock``) on the file already: the
        file is opened with ``locking=False``.

    Returns
    -------
    int
        Bytes moved; 0 when no chunk lies past the end, or when another program
        holds libhdf5's lock on the file or it cannot be written (the repair
        that follows then says so).
    """
    from .locking import file_locks

    path = os.fspath(path)
    try:
        f = h5py.File(path, "r+", locking=False) if flocked else h5py.File(path, "r+")
    except OSError:  # libhdf5's lock held by another program, or not writable: the repair says
        return 0
    with f, file_locks(path).writing():
        if VERSION_DATA not in f:
            return 0
        try:
            return move_end_through(f, always=True)
        except (RuntimeError, NotImplementedError):
            return 0
