"""The versions group: which versions exist, their parents, timestamps, and lookups.

Lookup rules are versioned-hdf5's (versioned-hdf5 2.6's ``VersionedHDF5File.__getitem__``):
``None``/``0`` the current version, ``-n`` n steps back along ``prev_version``,
a name, or a timestamp (exact, else the latest version at or before it).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from dataclasses import dataclass

import h5py
import numpy as np
from h5py import h5g

from .._backend.h5attrs import read_attr
from .._backend.layout import DATA_VERSION, FIRST_VERSION, VERSION_DATA, VERSIONS
from ..errors import NotVersionedError, VersionKeyTypeError, VersionNotFoundError
from . import index as _index
from .timestamps import format_timestamp, now_utc, parse_timestamp, to_utc_datetime

__all__ = ["VersionInfo", "VersionKey", "VersionRegistry", "initialize", "is_versioned"]


_VERSION_DATA, _VERSIONS_PATH = VERSION_DATA.encode(), f"{VERSION_DATA}/{VERSIONS}".encode()

VersionKey = str | int | np.integer | _dt.datetime | np.datetime64 | None


def is_versioned(f: h5py.Group) -> bool:
    """True when ``f`` holds a ``_version_data/versions`` group."""
    return f"{VERSION_DATA}/{VERSIONS}" in f


def initialize(f: h5py.File) -> None:
    """Create an empty version history (``__first_version__`` only) in ``f``.

    The versions group tracks link creation order, so the version index's
    fingerprint is O(1) (:mod:`~xarray_vhdf5._versions.index`); versioned-hdf5
    then lists versions in creation order instead of by name.
    """
    versions = f.require_group(VERSION_DATA).create_group(VERSIONS, track_order=True)
    first = versions.create_group(FIRST_VERSION)
    first.attrs["timestamp"] = format_timestamp(now_utc())
    versions.attrs["current_version"] = FIRST_VERSION
    versions.attrs["data_version"] = np.int64(DATA_VERSION)


@dataclass(frozen=True)
class VersionInfo:
    """Metadata of one committed version (read from its group's attributes)."""

    name: str
    prev_version: str
    timestamp: _dt.datetime
    committed: bool


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class VersionRegistry:
    """Index of the versions of one file: names, parents, timestamps; lookups.

    Loaded from the persisted version index (:mod:`~xarray_vhdf5._versions.index`)
    when its fingerprint matches the versions group: no version group is
    opened. Otherwise (no index, or one made stale by versioned-hdf5 adding or
    deleting versions) every version group's attributes are read once, and the
    index is rewritten when the file is writable. Lookups by name, index or
    timestamp are then O(1), O(steps) and O(log n).

    Parameters
    ----------
    f : h5py.File or h5py.Group
        The file (the group that holds ``_version_data``).

    Raises
    ------
    NotVersionedError
        ``f`` has no ``_version_data/versions`` group.
    """

    def __init__(self, f: h5py.Group):
        self._load(f)

    def _load(self, f: h5py.Group) -> None:
        """Read the versions of ``f`` (``__init__`` and :meth:`reload`)."""
        try:  # two H5Gopen: every reader's open asks (h5py's lookups check each link first)
            self.group: h5py.Group = h5py.Group(h5g.open(f.id, _VERSIONS_PATH))
            self.vdata: h5py.Group = h5py.Group(h5g.open(f.id, _VERSION_DATA))
        except ValueError:  # not there, or not a group: h5py's way says which
            if not is_versioned(f):
                raise NotVersionedError(
                    f"{getattr(f.file, 'filename', f)!r} is not a versioned HDF5 file: "
                    f"it has no /{VERSION_DATA}/{VERSIONS} group (create versions with "
                    "VersionedHDF5File(h5py.File(path, 'a')).stage_version(...))"
                ) from None
            self.vdata = f[VERSION_DATA]
            self.group = self.vdata[VERSIONS]
        # Fixed when the group was created: read once.
        self._tracks_order = _index._tracks_order(self.group)
        # So is whether the handle may write the index (mode, SWMR).
        self._writable = _index.writable(self.vdata)
        self._valid_index: _index.StoredIndex | None = None  # the stored index checked by index_valid(), for added()
        self._held_index: _index.StoredIndex | None = None  # what the last append returned (see index.append)
        entries = _index.load(self.vdata, self.group)
        #: True when the entries came from the stored index (False: scanned).
        self.loaded_from_index = entries is not None
        if entries is None:
            entries = _index.scan(self.group)
            if self._writable:
                _index.save(self.vdata, self.group, entries)
        self._set(entries)

    def _set(self, entries: _index.IndexEntries) -> None:
        self._state = _index.quick_state(self.group, self._tracks_order)
        self._entries = entries
        # A group still marked committed=False is what a commit interrupted by a
        # crash leaves behind (half written): it is not a version.
        if entries.committed.all():
            self._row = dict(zip(entries.names, range(len(entries.names))))
        else:
            done = entries.committed.tolist()
            self._row = {n: i for i, n in enumerate(entries.names) if done[i]}
        self._sorted: tuple[np.ndarray, list[str]] | None = None
        self._chain: tuple[str, list[str]] | None = None

    def ref(self, name: str) -> str | None:
        """The version branch or tag ``name`` points to, None when no ref is so named.

        Raises :class:`~xarray_vhdf5.errors.RefNotFoundError` for a ref whose
        version was deleted (:mod:`~xarray_vhdf5._versions.refs`).
        """
        from . import refs

        current = self.current_version
        return refs.resolve_in(
            refs.snapshot(self.vdata.file),
            name,
            None if current == FIRST_VERSION else current,
            self.__contains__,
            repr(self.vdata.file.filename),
        )

    def reload(self) -> None:
        """Re-read the versions (from the index if valid, else by a scan, then saved)."""
        self._load(self.vdata.parent)

    def replace(self, entries: _index.IndexEntries) -> None:
        """Take ``entries`` as the versions of the file (after a deletion)."""
        self._held_index = None
        self._set(entries)

    def sync(self) -> bool:
        """Re-read the versions if another object added or deleted versions since.

        Versions added or deleted through another object on the same file (an
        h5py file passed to ``delete_versions``, versioned-hdf5 itself, another
        ``VersionedHDF5File``) change the versions group's number of links or,
        for a group tracking creation order (those this package creates), its
        creation-order counter: one ``H5Gget_info`` call. On a group without
        it, a deletion and an addition that cancel out between two calls are
        not seen (reopen the file then).

        Returns
        -------
        bool
            True when the versions were re-read.
        """
        if _index.quick_state(self.group, self._tracks_order) == self._state:
            return False
        self.reload()
        return True

    # -- the history ---------------------------------------------------------
    @property
    def current_version(self) -> str:
        """Name of the current version (``__first_version__`` when there is none).

        Read from the attribute each time (another writer may have moved it),
        by the compiled attribute kernel (``backend.h5attrs``).
        """
        return _str(read_attr(self.group.id, "current_version", expect="str"))

    @property
    def tracked_state(self) -> tuple[int, int] | None:
        """``(number of links, creation-order counter)`` of the versions group at the last
        sync or commit, for a group tracking creation order (None otherwise)."""
        return self._state if self._tracks_order and self._state[1] >= 0 else None

    @property
    def data_version(self) -> int:
        """The format's ``data_version`` attribute (4 for files this package writes)."""
        try:  # the compiled attribute kernel: read with every listing
            return int(np.asarray(read_attr(self.group.id, "data_version", expect="int")).reshape(-1)[0])
        except KeyError:
            return 1

    def names(self) -> list[str]:
        """Names of all committed versions, oldest timestamp first."""
        return list(self._by_time()[1])

    def __contains__(self, name: object) -> bool:
        return name in self._row

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._row)

    def info(self, name: str) -> VersionInfo:
        """Metadata of version ``name``; raises :class:`VersionNotFoundError`."""
        try:
            i = self._row[name]
        except (KeyError, TypeError):
            raise self._not_found(repr(name)) from None
        e = self._entries
        return VersionInfo(name, e.parents[i], _index.from_micros(e.timestamps[i]), True)

    def timestamp_micros(self, name: str) -> int | None:
        """``timestamp`` of version ``name`` in microseconds since 1970-01-01 UTC, None for no such version."""
        i = self._row.get(name)
        return None if i is None else int(self._entries.timestamps[i])

    def parent(self, name: str) -> str:
        """``prev_version`` of version ``name``; raises :class:`VersionNotFoundError`."""
        try:
            return self._entries.parents[self._row[name]]
        except (KeyError, TypeError):
            raise self._not_found(repr(name)) from None

    # -- keeping the index right ---------------------------------------------
    def index_valid(self) -> bool:
        """True when the stored index matches the versions group now (O(1) for groups this package creates)."""
        self._valid_index = _index.stored_if_valid(self.vdata, self.group, self._tracks_order, self._held_index)
        return self._valid_index is not None

    def added(
        self,
        name: str,
        index_was_valid: bool | None = None,
        prev_version: str | None = None,
        timestamp: _dt.datetime | None = None,
        address: int = _index.NO_ADDRESS,
    ) -> None:
        """Register a version just committed in this file (and in the stored index).

        ``index_was_valid``: whether the stored index matched the versions group
        just before the version's group was created; then one row is appended
        (O(1)). False: the versions are re-read (from the index or by a scan).
        ``prev_version``, ``timestamp``: its parent and timestamp (UTC), when
        the caller knows them (saves reading them back). ``address``: its
        group's object address, for the index's ``addresses``.
        """
        if index_was_valid is False:
            self.reload()
            return
        if prev_version is None:
            prev, ts, committed = _index.read_group_entry(self.group[name])
        else:
            prev, committed = prev_version, True
            if timestamp is None:
                timestamp = parse_timestamp(self.group[name].attrs["timestamp"])
            ts = _index.to_micros(to_utc_datetime(timestamp))
        e = self._entries
        if name in self._row:  # re-read (e.g. a re-parented version)
            i = self._row[name]
            e.parents[i], e.timestamps[i], e.committed[i] = prev, ts, committed
        else:
            i = len(e.names)
            e.names.append(name)
            e.parents.append(prev)
            e.timestamps = np.append(e.timestamps, ts)
            e.committed = np.append(e.committed, committed)
        if committed:
            self._row[name] = i
        self._sorted = None
        self._chain = None
        stored, self._valid_index, self._held_index = self._valid_index, None, None
        state = None
        if index_was_valid and self._writable:
            self._held_index = _index.append(
                self.vdata,
                self.group,
                name,
                prev,
                ts,
                committed,
                address=address,
                stored=stored,
                tracks_order=self._tracks_order,
            )
            state = _index.state_after(self._held_index)
        self._state = state if state is not None else _index.quick_state(self.group, self._tracks_order)

    def removed(self, name: str) -> None:
        """Forget a version just deleted from this file (call :meth:`save` after)."""
        e = self._entries
        if name in e.names:
            i = e.names.index(name)
            del e.names[i], e.parents[i]
            e.timestamps = np.delete(e.timestamps, i)
            e.committed = np.delete(e.committed, i)
        self._set(e)

    def save(self) -> None:
        """Rewrite the stored index from the versions known here (after a deletion)."""
        self._held_index = None
        if self._writable:
            _index.save(self.vdata, self.group, self._entries)

    def _by_time(self) -> tuple[np.ndarray, list[str]]:
        """``(timestamps, names)`` of the committed versions, oldest first, ties by name."""
        if self._sorted is None:
            e = self._entries
            rows = np.fromiter(self._row.values(), dtype=np.int64, count=len(self._row))
            stamps = e.timestamps[rows]
            order = np.argsort(stamps, kind="stable")
            stamps = stamps[order]
            names = [e.names[i] for i in rows[order].tolist()]
            if len(stamps) > 1 and (np.diff(stamps) == 0).any():  # ties: by name
                pairs = sorted(zip(stamps.tolist(), names))
                stamps = np.array([p[0] for p in pairs], dtype=np.int64)
                names = [p[1] for p in pairs]
            self._sorted = (stamps, names)
        return self._sorted

    def _not_found(self, what: str, hint: str = "") -> VersionNotFoundError:
        names = self.names()
        shown = ", ".join(map(repr, names[-10:])) or "none"
        more = f" (last 10 of {len(names)})" if len(names) > 10 else ""
        return VersionNotFoundError(f"no version {what} in this file; versions{more}: {shown}{hint}")

    # -- lookups -------------------------------------------------------------
    def resolve(self, key: VersionKey) -> str:
        """Return the name of the version ``key`` designates.

        Parameters
        ----------
        key : str, int, datetime, numpy.datetime64 or None
            A version name; ``None`` or ``0`` for the current version; a negative
            int ``-n`` for the n-th ancestor of the current version along
            ``prev_version``; a timestamp for the version committed at that time,
            else the latest one before it.

        Raises
        ------
        VersionNotFoundError
            No such version (the message lists the existing ones).
        IndexError
            A positive int (as versioned-hdf5 does).
        VersionKeyTypeError
            ``key`` is of another type (a ``TypeError``, and a ``KeyError`` as
            versioned-hdf5 2.6 raises).
        """
        if key is None:
            name = self.current_version
            if name == FIRST_VERSION:
                raise VersionNotFoundError("this file has no committed version yet")
            if name not in self._row:
                raise self._not_found(
                    f"{name!r} (the current version, never committed)",
                    ". A commit interrupted by a crash left current_version naming it: open one of "
                    "these with version=, or roll the file back to its last whole version with "
                    "'vhdf5 check --repair FILE'",
                )
            return name
        if isinstance(key, str):
            if key not in self._row:
                raise self._not_found(repr(key))
            return key
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if key > 0:
                raise IndexError(f"version index must be 0 (current) or negative (ancestors), got {key}")
            return self.ancestor(self.resolve(None), -int(key))
        if isinstance(key, (_dt.datetime, np.datetime64, _dt.date)):
            return self.at_time(key)
        raise VersionKeyTypeError(
            f"a version is designated by a name (str), an index (int <= 0) or a "
            f"timestamp (datetime), got {type(key).__name__}"
        )

    def ancestor(self, name: str, n: int) -> str:
        """The version ``n`` steps back from ``name`` along ``prev_version``."""
        chain = self._ancestry(name)
        if n >= len(chain):
            count = len(chain) - 1
            has = "no ancestor" if count == 0 else f"only {count} ancestor{'s' if count > 1 else ''}"
            raise VersionNotFoundError(
                f"version {name!r} has {has}, cannot go back {n} {'version' if n == 1 else 'versions'}"
            )
        return chain[n]

    def _ancestry(self, name: str) -> list[str]:
        """``[name, parent, grandparent, ...]`` down to the oldest ancestor that is a version.

        Kept for the last version asked (the current one, for ``vf[-n]``), so
        lookups along it are O(1) after the first.
        """
        if self._chain is not None and self._chain[0] == name:
            return self._chain[1]
        parents, row = self._entries.parents, self._row
        chain = [name]
        version = self.parent(name)
        while version in row and len(chain) <= len(row):  # the bound stops a cycle
            chain.append(version)
            version = parents[row[version]]
        self._chain = (name, chain)
        return chain

    def at_time(self, when, exact: bool = False) -> str:
        """The version with timestamp ``when``, else (``exact=False``) the latest before it.

        Raises
        ------
        VersionNotFoundError
            Every version is newer than ``when`` (or, with ``exact``, none matches).
        """
        ts = to_utc_datetime(when)
        stamps, names = self._by_time()
        us = _index.to_micros(ts)
        i = int(np.searchsorted(stamps, us, side="right"))
        if i and stamps[i - 1] == us:
            return names[i - 1]
        if exact or i == 0:
            kind = "at" if exact else "at or before"
            raise self._not_found(f"with a timestamp {kind} {ts.isoformat()}")
        return names[i - 1]
