"""``VersionedHDF5File``: the h5py-level entry point (versioned-hdf5's API)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator

import h5py
import ndindex
import numpy as np
from h5py import h5g

from .._backend.layout import DATA_VERSION, FIRST_VERSION, VERSION_DATA
from .._backend.mdc import trim_metadata_cache
from .._backend.names import MERGE_PARENT_ATTR, MESSAGE_ATTR
from .._wrappers.group import InMemoryGroup
from .._wrappers.readonly import VersionGroup
from ..errors import (
    ClosedFileError,
    CorruptFileError,
    NotVersionedError,
    ReadOnlyError,
    RepairedFileWarning,
    StaleVersionError,
    UnsupportedError,
    VersionExistsError,
    VHDF5Error,
)
from . import chunkmaps
from .caches import caches_for
from .check import corrupt_file_error
from .commit import CommitReport, commit_version
from .delete import DeleteReport, delete_versions
from .index import touch as touch_index
from .metadata import finish_interrupted
from .mutation import check_fresh, file_name, mutating, note_opened, refuse_interrupted
from .objects import check_file_argument
from .openrepair import interrupted_damage, move_end_through, repair_through, torn_versions, warn_moved
from .reader import SharedVersionedFile
from .rebase import RebaseReport, rebase_staged
from .rebuild import chunk_diff, rebuild_hash_tables, rebuild_object_dtype_hash_tables
from .refs import MAIN, RefMethods, branch_tip, set_branch
from .registry import VersionKey, VersionRegistry, initialize, is_versioned
from .timestamps import commit_timestamp, now_utc, to_utc_datetime

__all__ = ["VersionedHDF5File"]


class VersionedHDF5File(RefMethods):
    """The versions of an HDF5 file: read any of them, stage and commit new ones.

    A drop-in for ``versioned_hdf5.VersionedHDF5File`` on the same files.

    Parameters
    ----------
    f : h5py.File
        An open file. A file opened writable without a version history gets an
        empty one (``_version_data/versions/__first_version__``), as
        versioned-hdf5 does.
    metadata_trim_every : int or None, keyword-only
        Every this many commits through this object, let libhdf5's metadata
        cache of ``f`` shrink (:func:`~xarray_vhdf5._backend.mdc.trim_metadata_cache`:
        a flush of the file). libhdf5 keeps every virtual dataset created there,
        decoded, 100-140 KiB a version: a long ingest in one process grows
        without bound otherwise. Default 256; lower bounds the memory tighter
        at a cost in time and file space (see the module); None or 0: never.
        The trim runs after the commit that reaches the count: if its flush
        fails (e.g. a full disk), the error propagates from the ``with`` block
        of a version that is committed.

    Raises
    ------
    NotVersionedError
        ``f`` is opened read-only and has no version history.
    IncompatibleDataError
        The file was written by a newer format (``data_version`` > 4).
    TypeError
        ``f`` is not an h5py file, e.g. a path (open it first:
        ``VersionedHDF5File(h5py.File(path, "a"))``; versioned-hdf5 2.6 takes
        no path either).
    ClosedFileError
        ``f`` is closed.
    FileBusyError
        Opened writable on a file left by an interrupted ``modify_metadata``:
        readers of this package kept the chunks' lock past the timeout while it
        was being finished (nothing was done; the next writer finishes it).
    StaleVersionError
        Same case, and another process wrote the file meanwhile (only with
        libhdf5's locking off): reopen it.

    Notes
    -----
    Opened writable, it first finishes what a dead writer left halfway
    (:func:`~xarray_vhdf5._versions.metadata.finish_interrupted`), as SQLite rolls
    a hot journal back on open: a ``modify_metadata`` or ``delete_versions``
    through a plain ``h5py.File(path, "a")`` (no journal) killed between two of
    its flushes leaves every version readable but its work half done, and the
    next commit of the dataset would fail. With nothing to finish this costs an
    attribute and a link lookup (a few us, whatever the number of datasets).
    ``stage_version`` checks again, for a run interrupted in this process since.

    Examples
    --------
    >>> with h5py.File("data.h5", "a") as f:          # doctest: +SKIP
    ...     vf = VersionedHDF5File(f)
    ...     with vf.stage_version("v1") as g:
    ...         g.create_dataset("x", data=np.arange(10), chunks=(4,))
    ...     vf["v1"]["x"][:3]
    array([0, 1, 2])
    """

    def __init__(self, f: h5py.File, *, metadata_trim_every: int | None = 256):
        check_file_argument("VersionedHDF5File", f, versioned_file=False)
        refuse_interrupted(f)  # before anything is read: a dead writer's half-written commit
        if metadata_trim_every is not None and (
            not isinstance(metadata_trim_every, (int, np.integer)) or metadata_trim_every < 0
        ):
            raise ValueError(f"metadata_trim_every must be a non-negative int or None, got {metadata_trim_every!r}")
        self.f = f
        self._trim_every = int(metadata_trim_every or 0)
        self._commits_since_trim = 0
        if not is_versioned(f):
            if f.file.mode == "r":
                raise NotVersionedError(
                    f"{f.file.filename!r} has no version history and is open read-only; "
                    "open it with mode 'a' to start one"
                )
            initialize(f)
        damage = interrupted_damage(f)  # a writer killed inside libhdf5's flush (versions.openrepair)
        # What it left past the end of allocation (a plain handle; journaled openers moved it already).
        moved = move_end_through(f, always=damage is not None) if f.file.mode != "r" else 0
        if damage is not None and f.file.mode != "r":
            repair_through(f, damage, moved=moved)
        elif moved:
            warn_moved(f, moved)
        elif torn_versions(damage):
            name = f.file.filename
            raise CorruptFileError(
                f"{name!r}: {damage}, as a writer killed while libhdf5 flushed it leaves it; this handle is "
                "read-only and cannot repair it. Open the file once through xarray_vhdf5 "
                "(VersionedHDF5File.open, xr.open_dataset, or VersionedHDF5File(h5py.File(path, 'a'))), "
                f"which repairs it, or run `vhdf5 check --repair {name}`",
                path=name,
            )
        self._registry = VersionRegistry(f)
        if self._registry.data_version > DATA_VERSION:
            from ..errors import IncompatibleDataError

            raise IncompatibleDataError(
                f"{f.file.filename!r} has data_version {self._registry.data_version}; this "
                f"package reads up to {DATA_VERSION}: upgrade xarray_vhdf5"
            )
        self._closed = False
        #: Versions being staged by this handle: name -> when staging began (``_check_not_staged``).
        self._staging: dict[str, _dt.datetime] = {}
        self._read_only = f.file.mode == "r"  # fixed for the life of the handle
        # Another library may have committed since this package last wrote the file: its
        # stored version index did not describe the versions (they were scanned). The next
        # commit then repairs netCDF attachments versioned-hdf5 leaves (versions.rootview).
        self._foreign = not self._registry.loaded_from_index
        self.last_commit: CommitReport | None = None
        #: The merge of the last ``stage_version(..., rebase=True)`` commit (None: no merge).
        self.last_rebase: RebaseReport | None = None
        # Shared with earlier handles to the same file in this process (versions.caches).
        self._caches = caches_for(f.file, self._registry.vdata)
        note_opened(f)  # its view of the file, for the check of other processes' writes
        if not self._read_only and finish_interrupted(f):  # a dead writer's modify_metadata: finished
            self._caches.clear()

    @classmethod
    def open(cls, path: str | os.PathLike, *, verify: bool = False) -> SharedVersionedFile:
        """Open the file at ``path`` for reading while other processes commit to it.

        Unlike ``VersionedHDF5File(h5py.File(path, "r"))``, the returned reader
        holds no HDF5 handle between calls, so it never reads through a
        metadata cache another process's commit made stale, and never blocks a
        writer: each call that needs the version list reads the file's write
        counter (16 bytes) and, when another process wrote since, lists the
        versions again through a fresh handle under the file's lock, closed
        afterwards. Versions and their datasets are snapshots of their
        metadata; points are read from the chunks' byte ranges, resolved again
        when a deletion or ``modify_metadata`` moved them. See
        :mod:`xarray_vhdf5._versions.reader`.

        Parameters
        ----------
        path : str or os.PathLike
            A versioned HDF5 file (this package's or versioned-hdf5's).
        verify : bool, keyword-only
            Check every chunk read against the hash table's SHA-256 digest
            (not for variable-length strings, read through libhdf5).

        Returns
        -------
        SharedVersionedFile
            Read-only: ``versions``, ``current_version``, ``reader[key]``
            (:class:`~xarray_vhdf5._versions.reader_tree.SharedVersionGroup`),
            ``get_version_by_name``, ``get_version_by_timestamp``,
            ``version_info``, ``get_diff``, ``read_versions`` (one selection
            from many versions, stacked, through one handle), ``len``, ``in``, iteration;
            ``stage_version`` and deletions raise ``ReadOnlyError``. A context
            manager; ``close()`` ends reads through it and its objects.

        Raises
        ------
        FileNotFoundError
            ``path`` does not exist.
        NotHDF5Error
            ``path`` is not an HDF5 file.
        NotVersionedError
            The file has no version history.
        IncompatibleDataError
            The file was written by a newer format (``data_version`` > 4).
        FileBusyError
            A writer held the file past the reader's timeout (``VHDF5_LOCK_TIMEOUT``).

        Examples
        --------
        >>> with VersionedHDF5File.open("data.h5") as vf:   # doctest: +SKIP
        ...     vf.versions                      # read again after another process commits
        ...     vf[vf.current_version]["x"][:3]
        ['v1', 'v2']
        array([0, 1, 2])
        """
        return SharedVersionedFile(path, verify=verify)

    # -- state ---------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True after :meth:`close` or once the h5py file was closed."""
        return self._closed or not self.f.id.valid

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedFileError("the VersionedHDF5File (or its h5py file) is closed")
        check_fresh(self.f)  # another process's writes would make every answer below stale
        # Versions added or deleted by another object on this file (versioned-hdf5 reads
        # the versions group on every call, so its users expect this). A deletion may
        # have moved chunks and rewritten surviving versions: forget the commit caches.
        if self._registry.sync():
            self._caches.clear()

    def close(self) -> None:
        """Detach from the h5py file (which the caller closes, as with versioned-hdf5)."""
        self._closed = True

    def __enter__(self) -> VersionedHDF5File:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<Closed VersionedHDF5File>"
        return f'<VersionedHDF5File "{self.f.file.filename}" (mode {self.f.file.mode}), {len(self._registry)} versions>'

    # -- the history ---------------------------------------------------------
    @property
    def current_version(self) -> str:
        """Name of the current version (``"__first_version__"`` before any commit)."""
        self._check_open()
        return self._registry.current_version

    @current_version.setter
    def current_version(self, name: str) -> None:
        self._check_open()
        self._registry.info(name)
        with mutating(self.f, what="current_version change"):  # locked, counted: readers see it
            self._registry.group.attrs["current_version"] = name

    @property
    def data_version_identifier(self) -> int:
        """The format's ``data_version`` attribute (versioned-hdf5's name; 1 when absent).

        Files written by this package and by versioned-hdf5 2.6 have 4. Setting it
        writes the attribute, as versioned-hdf5 does (no data is converted).
        """
        self._check_open()
        return self._registry.data_version

    @data_version_identifier.setter
    def data_version_identifier(self, version: int) -> None:
        self._check_open()
        with mutating(self.f, what="data_version change"):
            self._registry.group.attrs["data_version"] = np.int64(version)

    @property
    def versions(self) -> list[str]:
        """Names of the committed versions, oldest first."""
        self._check_open()
        return self._registry.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.versions)

    def __len__(self) -> int:
        self._check_open()
        return len(self._registry)

    def __contains__(self, name: object) -> bool:
        self._check_open()
        return name in self._registry

    def resolve(self, key: VersionKey) -> str:
        """Name of the version ``key`` designates (see ``__getitem__``)."""
        self._check_open()
        return self._registry.resolve(key)

    def __getitem__(self, key: VersionKey) -> VersionGroup:
        """The committed version ``key``, read-only.

        Parameters
        ----------
        key : str, int, datetime, numpy.datetime64 or None
            A name; ``None`` or ``0`` for the current version; ``-n`` for the
            n-th ancestor of the current version; a timestamp for the version
            at that time or the latest before it.

        Raises
        ------
        VersionNotFoundError
            No such version (``KeyError``; the message lists existing ones).
        ClosedFileError
            The file is closed.
        """
        name = self.resolve(key)
        if isinstance(key, (_dt.datetime, np.datetime64)):
            self._check_not_staged(key, name)
        return VersionGroup(None, name, parent=self._registry.group, path=name)

    def _check_not_staged(self, when, found: str) -> None:
        """Refuse a time lookup that a version staged in this handle would answer once committed.

        versioned-hdf5 2.6 gives a staged version a placeholder timestamp (when
        staging began) and refuses it from a lookup by time; here the staged
        version is not in the file yet, so the lookup would silently answer
        with its predecessor.

        Raises
        ------
        ValueError
            A version being staged here began staging after ``found`` was
            committed and at or before ``when``.
        """
        if not self._staging:
            return
        when = to_utc_datetime(when)
        found_at = self._registry.info(found).timestamp
        for staged, began in self._staging.items():
            if found_at < began <= when:
                raise ValueError(
                    f"version {staged!r} is being staged (since {began}), not committed: it has no timestamp yet "
                    f"to look up by; {found!r} is the version committed before it"
                )

    def get_version_by_name(self, version: str) -> VersionGroup:
        """The committed version named ``version`` (``""`` or None: the current one)."""
        return self[version or None]

    def get_version_by_timestamp(self, timestamp, exact: bool = False) -> VersionGroup:
        """The version committed at ``timestamp``, else (``exact=False``) the latest before."""
        self._check_open()
        name = self._registry.at_time(timestamp, exact=exact)
        if not exact:
            self._check_not_staged(timestamp, name)
        return VersionGroup(None, name, parent=self._registry.group, path=name)

    def version_info(self, key: VersionKey):
        """Metadata (name, prev_version, timestamp) of a version."""
        return self._registry.info(self.resolve(key))

    # -- deleting ------------------------------------------------------------
    def __delitem__(self, name: str) -> None:
        """Delete version ``name`` and the chunks only it used (see :func:`delete_versions`).

        versioned-hdf5 2.6's ``del vf[name]`` only unlinks the version group (children
        keep a dangling ``prev_version``, chunks stay); this re-parents and compacts.

        Raises
        ------
        VersionNotFoundError
            No such version (``KeyError``).
        UnsupportedError
            ``name`` is not a str (``NotImplementedError``, as versioned-hdf5).
        ReadOnlyError
            ``__first_version__``, or the file is open read-only.
        """
        if not isinstance(name, str):
            raise UnsupportedError(f"versions are deleted by name (str), got {type(name).__name__}")
        self.delete_versions([name])

    def delete_versions(self, names: str | Iterable[str]) -> DeleteReport:
        """Delete versions and reclaim their chunks; see :func:`~xarray_vhdf5._versions.delete.delete_versions`.

        Raises
        ------
        VersionNotFoundError, ReadOnlyError, ClosedFileError
            No such version; ``__first_version__`` or a read-only file; a closed file.
        """
        self._check_open()
        return delete_versions(self, names)

    # -- hash tables and diffs (versioned-hdf5's API) ------------------------
    def rebuild_hashtables(self) -> dict[str, int]:
        """Write every versioned dataset's hash table again from its versions.

        versioned-hdf5's ``rebuild_hashtables``; see
        :func:`~xarray_vhdf5._versions.rebuild.rebuild_hash_tables`. Nothing but the
        hash tables changes.

        Returns
        -------
        dict of str to int
            The number of hash-table rows of each rebuilt table, by dataset path
            (versioned-hdf5 returns None).

        Raises
        ------
        ReadOnlyError, ClosedFileError
            A read-only or closed file.
        ValueError
            A version maps raw_data rows that are not whole chunks.
        """
        return rebuild_hash_tables(self)  # checks the file, drops the caches (new tables)

    def rebuild_object_dtype_hashtables(self) -> dict[str, int]:
        """:meth:`rebuild_hashtables` for the variable-length string datasets only.

        versioned-hdf5's ``rebuild_object_dtype_hashtables`` (for files whose
        string chunks an old versioned-hdf5 hashed differently); also sets the
        ``data_version`` attribute to the current format's (4). Returns and
        raises as :meth:`rebuild_hashtables`.
        """
        return rebuild_object_dtype_hash_tables(self)

    def get_diff(
        self, name: str, version1: VersionKey, version2: VersionKey
    ) -> dict[ndindex.Tuple, tuple[np.ndarray | None, np.ndarray | None]]:
        """The chunks of dataset ``name`` that differ between two versions, with their data.

        versioned-hdf5's ``get_diff``: keys are the regions (``ndindex.Tuple`` of
        ``slice(start, stop, 1)``, points, trimmed) of the stored chunks whose
        raw_data rows differ, or that only one version stores; values are
        ``(data in version1, data in version2)``, None on the side that does not
        store the region. Regions mapped to the same rows are never read. See
        :func:`~xarray_vhdf5._versions.rebuild.chunk_diff`. Unlike versioned-hdf5,
        versions just committed through this object can be compared without
        reopening the file.

        Parameters
        ----------
        name : str
            Path of the dataset inside the versions (``"x"``, ``"group/x"``).
        version1, version2 : str, int, datetime or None
            Versions, as :meth:`__getitem__` takes them.

        Returns
        -------
        dict of ndindex.Tuple to (numpy.ndarray or None, numpy.ndarray or None)
            Version 2's differing regions in C order, then the regions only
            version 1 stores. Each array has the dataset's dtype and the
            region's shape (points).

        Raises
        ------
        VersionNotFoundError
            No such version.
        KeyError
            ``name`` is not a dataset of one of the versions.
        IncompatibleDataError
            ``name`` is not a versioned (chunk-mapped) dataset.
        ClosedFileError
            The file is closed.
        """
        datasets = []
        for key in (version1, version2):
            version = self.resolve(key)
            obj = self._registry.group[version].get(name)
            if not isinstance(obj, h5py.Dataset):
                raise KeyError(f"no dataset {name!r} in version {version!r}")
            datasets.append(obj)
        return chunk_diff(*datasets)

    # -- staging -------------------------------------------------------------
    @contextlib.contextmanager
    def stage_version(
        self,
        version_name: str | None,
        prev_version: str | None = None,
        make_current: bool | None = None,
        timestamp: _dt.datetime | np.datetime64 | None = None,
        *,
        rebase: bool = False,
        finish: Callable[[h5py.Group], object] | None = None,
        branch: str | None = None,
    ) -> Iterator[InMemoryGroup]:
        """Stage a new version; it is committed when the ``with`` block exits cleanly.

        Parameters
        ----------
        version_name : str or None
            Name of the new version (no ``/``; not ``__first_version__``); None
            for a random UUID4 string, as versioned-hdf5 does.
        prev_version : str, optional
            The version it starts from; default the current version; ``""`` for
            none (an empty tree).
        make_current : bool, optional
            Make the new version the current one (default True, False on a
            ``branch`` other than ``main``). False makes a branch of the version DAG.
        timestamp : datetime or numpy.datetime64, optional
            Its timestamp, as versioned-hdf5 takes it: an aware datetime in UTC
            or a numpy.datetime64 (taken as UTC); default the time of commit.
        rebase : bool, keyword-only
            When the block ends, if the file's current version is no longer the
            version staged from (another handle or process committed meanwhile),
            merge the staged changes with those committed since and commit onto
            the current version, which becomes the parent
            (:func:`~xarray_vhdf5._versions.rebase.rebase_staged`; rules in
            :mod:`~xarray_vhdf5._versions.merge`). Default False: commit onto the
            version staged from, as versioned-hdf5 does. ``last_rebase`` holds
            the merge's :class:`~xarray_vhdf5._versions.rebase.RebaseReport`
            (None when there was nothing to merge).
        finish : callable, keyword-only, optional
            ``finish(group)`` with the new version's h5py group, after its
            datasets are written and before it is marked committed, inside the
            commit's mutation (locked, journaled): what it writes is part of the
            commit. This package's xarray layer attaches netCDF-4 dimension
            scales with it. An exception from it commits nothing.
        branch : str, keyword-only, optional
            Commit on this branch (:mod:`~xarray_vhdf5._versions.refs`): the
            version starts from the branch's version (``prev_version`` must be
            None or that version) and the branch moves to it in the same
            commit; ``main`` is the current version. When the block ends, a
            branch that moved meanwhile raises :class:`StaleVersionError`
            (nothing committed). Default None: no branch moves but ``main``,
            when ``make_current``, as versioned-hdf5 does.

        Yields
        ------
        InMemoryGroup
            The editable tree of the new version, a copy of ``prev_version``.

        Raises
        ------
        VersionExistsError
            ``version_name`` exists.
        VersionNotFoundError
            ``prev_version`` does not exist.
        ValueError
            ``timestamp`` is a naive datetime or not in UTC (as versioned-hdf5).
        TypeError
            ``timestamp`` is neither a datetime nor a numpy.datetime64.
        ReadOnlyError
            The file is open read-only.
        ConflictError
            When the block ends with ``rebase=True``: both sides changed the same
            points or attributes differently (``points`` lists them by dataset);
            nothing is committed.
        StaleVersionError
            When the block ends: another handle rewrote a staged dataset's
            raw_data or the previous version's datasets meanwhile (deleting
            versions, ``modify_metadata``); nothing is committed. Before it
            starts: another process left a ``modify_metadata`` interrupted and
            wrote the file since this handle read it (libhdf5's locking off).
        ClosedFileError
            The file is closed; or, when the block ends, the h5py file was
            closed inside it (nothing is committed). Staged objects read from
            the file raise it too once it was closed.

        Notes
        -----
        If the block raises, nothing is committed: the exception propagates and
        the file's versions and current version are unchanged.
        """
        self._check_open()
        if self._read_only:
            raise ReadOnlyError(f"{self.f.file.filename!r} is open read-only; open it with mode 'a'")
        # The open finished any interrupted modify_metadata; one interrupted since, in this
        # process (an exception inside it), is finished here, else the staged copy of its
        # versions would name the new raw_data's missing hash table. Another process's can
        # only happen while this handle is stale: the commit then refuses (StaleVersionError).
        if finish_interrupted(self.f):
            self._caches.clear()
        if version_name is None:
            version_name = str(uuid.uuid4())
        if (
            not isinstance(version_name, str)
            or not version_name
            or "/" in version_name
            or version_name in (FIRST_VERSION, ".", "..")
        ):
            raise ValueError(f"invalid version name {version_name!r}: a non-empty str without '/'")
        # Also a group left by an interrupted commit (not a version), asked of libhdf5 directly.
        if version_name in self._registry or self._registry.group.id.links.exists(version_name.encode()):
            raise VersionExistsError(f"a version named {version_name!r} already exists")
        if branch is not None:
            tip = branch_tip(self.f, branch)
            if prev_version not in (None, tip):
                raise ValueError(
                    f"prev_version {prev_version!r} is not the version of branch {branch!r} ({tip!r}): give one of them"
                )
            if rebase and branch != MAIN:
                raise UnsupportedError(
                    f"rebase=True commits onto the current version (branch main); on branch {branch!r} merge instead"
                )
            prev_version = tip
            if make_current is None:
                make_current = branch == MAIN
        make_current = True if make_current is None else bool(make_current)
        if prev_version is None:
            prev = self._registry.current_version
            if prev != FIRST_VERSION and prev not in self._registry:
                prev = self._registry.resolve(None)  # raises: a current version never committed
        elif prev_version == "":
            prev = FIRST_VERSION
        else:
            prev = self._registry.resolve(prev_version)
        ts = commit_timestamp(timestamp) if timestamp is not None else None
        root = self._staged_root(prev)
        self.last_rebase = None
        self._staging[version_name] = now_utc()
        try:
            yield root
        except BaseException as exc:
            root._close()  # discarded: later edits raise instead of being lost
            self._repair_hash_table(exc)
            raise
        finally:
            self._staging.pop(version_name, None)
        if not self.f.id.valid:
            root._close()
            raise ClosedFileError(
                f"the h5py file was closed inside the stage_version({version_name!r}) block: "
                "nothing was committed; reopen the file and stage the version again"
            )
        # Locked, checked against other processes' writes, counted and flushed: the
        # commit is on disk when the block ends (versions.mutation).
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(mutating(self.f, what="commit"))
                if branch is not None and (tip := branch_tip(self.f, branch)) != prev:
                    raise StaleVersionError(
                        f"branch {branch!r} moved from {prev!r} to {tip!r} while version {version_name!r} "
                        "was staged on it (another commit or reset_branch): nothing was committed; "
                        "stage again from the branch"
                    )
                if rebase:
                    root, prev = self._rebased(root, prev)
            except BaseException:  # busy, stale or in conflict: nothing committed, the edits discarded
                root._close()
                raise
            # Checked just before the version group is created: the stored version index
            # then gets one row appended (O(1)) instead of being rebuilt.
            index_was_valid = self._registry.index_valid()
            if index_was_valid and self._registry.sync():
                # Another handle of ours committed while this one was staged (the index
                # says so): the list this commit appends to must be the file's list.
                index_was_valid = self._registry.index_valid()
            try:
                self.last_commit = commit_version(
                    self.f,
                    self._registry.group,
                    version_name,
                    prev,
                    root,
                    make_current=make_current,
                    timestamp=ts,
                    caches=self._caches,
                    finish=finish,
                    foreign=self._foreign or not index_was_valid,
                )
                root.committed_as = f"{self._registry.group.name}/{version_name}"
                root.committed_view = VersionGroup
                if branch is not None and branch != MAIN:  # in the commit's mutation: atomic with it
                    set_branch(self.f, branch, version_name)
            except BaseException as exc:
                if index_was_valid:  # the failed commit made and removed a group: same versions
                    touch_index(self._registry.vdata, self._registry.group)
                self._repair_hash_table(exc)
                damage = self._damage(exc)
                if damage is not None:  # libhdf5 met damaged bytes: say so, and what to run
                    raise damage from exc
                raise
            finally:
                root._close()
            # The registry first (a stale index is written again there), then the token on it.
            self._foreign = False  # what another library left was repaired by this commit
            self._registry.added(
                version_name,
                index_was_valid,
                prev_version=prev,
                timestamp=self.last_commit.timestamp,
                address=self.last_commit.address,
            )
            self._caches.committed(self._registry.vdata, index_rewritten=not index_was_valid)
            self._caches.chunk_map_cache.note_versions_state(self._registry.tracked_state)
            self._commits_since_trim += 1
            if self._trim_every and self._commits_since_trim >= self._trim_every:
                self._commits_since_trim = 0
                trim_metadata_cache(self.f.file.id)

    def _damage(self, exc: BaseException) -> CorruptFileError | None:
        """libhdf5's ``exc`` from a commit as a :class:`CorruptFileError`, when its message says the file is damaged.

        E.g. a chunk index a killed writer tore ("wrong B-tree signature"),
        which ``vhdf5 check --repair`` rebuilds (:mod:`~xarray_vhdf5._versions.reindex`).
        None for this package's own errors (already what they should be) and
        anything that is not damage (:func:`~xarray_vhdf5._versions.check.corrupt_file_error`).
        """
        if isinstance(exc, VHDF5Error):
            return None
        return corrupt_file_error(file_name(self.f) if self.f.id.valid else None, exc)

    def _repair_hash_table(self, exc: BaseException) -> None:
        """After a staging or commit that met a hash table libhdf5 cannot open: write it again from the versions.

        A writer killed inside libhdf5's flush of a plain handle can tear a
        hash table's header (``docs/howto/repair.md``); nothing could be
        committed to its dataset. It is rebuilt here
        (:func:`~xarray_vhdf5._versions.rebuild.rebuild_hash_tables`, a mutation
        of its own), ``exc.repaired`` set and a note added: staging the version
        again commits (the xarray writers do it themselves). Other exceptions,
        and read-only handles, are left alone.
        """
        table = getattr(exc, "hdf5_object", None)
        prefix = f"/{VERSION_DATA}/"
        if (
            not isinstance(exc, CorruptFileError)
            or self._read_only
            or not isinstance(table, str)
            or not table.startswith(prefix)
            or not table.endswith("/hash_table")
            or not self.f.id.valid
        ):
            return
        path = table[len(prefix) : -len("/hash_table")]
        try:
            rebuild_hash_tables(self.f, [path])
        except Exception as error:  # noqa: BLE001 - the original error stands; this one is said with it
            exc.add_note(f"Writing the hash table again failed too: {type(error).__name__}: {error}")
            return
        self._caches.clear()
        self._registry.reload()
        exc.repaired = True
        exc.add_note(
            f"The hash table of {path!r} was written again from the versions: stage the version again to commit it"
        )
        warnings.warn(
            RepairedFileWarning(
                f"{file_name(self.f)!r}: the hash table of {path!r} could not be read; it was written again "
                "from the versions (as `vhdf5 check --repair` does)",
                path=file_name(self.f),
            ),
            stacklevel=4,
        )

    def _staged_root(self, prev: str) -> InMemoryGroup:
        """The editable tree of a new version staged from version ``prev`` (a copy of it)."""
        source = h5py.Group(h5g.open(self._registry.group.id, prev.encode())) if prev != FIRST_VERSION else None
        root = InMemoryGroup(
            "",
            source,
            open_datasets=self._caches.open_datasets,
            chunk_map_cache=self._caches.chunk_map_cache,
            versions_state=self._registry.tracked_state,  # just synced by _check_open
            h5file=self.f,  # its .file on demand (h5py makes a new File object per call)
            stored_map=chunkmaps.StoredLayouts(self.f),
        )
        for name in (MESSAGE_ATTR, MERGE_PARENT_ATTR):  # the parent's commit message and merge parent
            if name in root.attrs:  # describe the parent, not the new version
                del root.attrs[name]
        return root

    def _rebased(self, root: InMemoryGroup, prev: str) -> tuple[InMemoryGroup, str]:
        """``(tree, parent)`` to commit: ``root`` merged onto the current version if it moved since ``prev``.

        Called under the write lock. Raises ``ConflictError`` (the merged tree
        discarded; the caller discards ``root``).
        """
        if self._registry.sync():
            self._caches.clear()
        current = self._registry.current_version
        if current == prev or current == FIRST_VERSION or current not in self._registry:
            return root, prev
        into = self._staged_root(current)
        try:
            self.last_rebase = rebase_staged(self._registry.group, prev, current, root, into)
        except BaseException:
            into._close()
            raise
        root._close()
        return into, current
