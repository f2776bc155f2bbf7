"""The versions group: which versions exist, their parents, timestamps, and lookups.

Lookup rules are versioned-hdf5's (FORMAT.md, "Behaviour users rely on"):
``None``/``0`` the current version, ``-n`` n steps back along ``prev_version``,
a name, or a timestamp (exact, else the latest version at or before it).
"""

from __future__ import annotations

import bisect
import datetime as _dt
from collections.abc import Iterator
from dataclasses import dataclass

import h5py
import numpy as np

from ..backend.layout import DATA_VERSION, FIRST_VERSION, VERSION_DATA, VERSIONS
from ..errors import NotVersionedError, VersionKeyTypeError, VersionNotFoundError
from .timestamps import format_timestamp, now_utc, parse_timestamp, to_utc_datetime

__all__ = ["VersionInfo", "VersionRegistry", "initialize", "is_versioned", "VersionKey"]

VersionKey = str | int | np.integer | _dt.datetime | np.datetime64 | None


def is_versioned(f: h5py.Group) -> bool:
    """True when ``f`` holds a ``_version_data/versions`` group."""
    return f"{VERSION_DATA}/{VERSIONS}" in f


def initialize(f: h5py.File) -> None:
    """Create an empty version history (``__first_version__`` only) in ``f``."""
    versions = f.require_group(VERSION_DATA).create_group(VERSIONS)
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
    """Index of the versions of one file, read once and updated by commits.

    Reading the attributes of every version costs one pass over the versions
    group; afterwards lookups by name, index or timestamp are O(1) / O(log n).

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
        if not is_versioned(f):
            raise NotVersionedError(
                f"{getattr(f.file, 'filename', f)!r} is not a versioned HDF5 file: "
                f"it has no /{VERSION_DATA}/{VERSIONS} group (create versions with "
                "VersionedHDF5File(h5py.File(path, 'a')).stage_version(...))"
            )
        self.group: h5py.Group = f[VERSION_DATA][VERSIONS]
        self._load()

    def _load(self) -> None:
        self._infos: dict[str, VersionInfo] = {}
        self._nlinks = len(self.group)
        for name, grp in self.group.items():
            if name == FIRST_VERSION:
                continue
            info = self._read(name, grp)
            # A group still marked committed=False is what a commit interrupted by a
            # crash leaves behind (half written): it is not a version.
            if info.committed:
                self._infos[name] = info
        self._sorted: list[tuple[_dt.datetime, str]] | None = None

    def sync(self) -> bool:
        """Re-read the versions if the versions group gained or lost members since.

        Versions added or deleted through another object on the same file (an
        h5py file passed to ``delete_versions``, versioned-hdf5 itself, another
        ``VersionedHDF5File``) change the number of links of the versions group;
        this costs one ``H5Gget_info`` call. A deletion and an addition that
        cancel out between two calls are not seen (reopen the file then).

        Returns
        -------
        bool
            True when the versions were re-read.
        """
        if len(self.group) == self._nlinks:
            return False
        self._load()
        return True

    @staticmethod
    def _read(name: str, grp: h5py.Group) -> VersionInfo:
        attrs = grp.attrs
        return VersionInfo(
            name=name,
            prev_version=_str(attrs.get("prev_version", FIRST_VERSION)),
            timestamp=parse_timestamp(attrs["timestamp"]),
            committed=bool(attrs.get("committed", True)),
        )

    # -- the history ---------------------------------------------------------
    @property
    def current_version(self) -> str:
        """Name of the current version (``__first_version__`` when there is none)."""
        return _str(self.group.attrs["current_version"])

    @property
    def data_version(self) -> int:
        """The format's ``data_version`` attribute (4 for files this package writes)."""
        return int(self.group.attrs.get("data_version", 1))

    def names(self) -> list[str]:
        """Names of all committed versions, oldest timestamp first."""
        return [name for _, name in self._by_time()]

    def __contains__(self, name: object) -> bool:
        return name in self._infos

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._infos)

    def info(self, name: str) -> VersionInfo:
        """Metadata of version ``name``; raises :class:`VersionNotFoundError`."""
        try:
            return self._infos[name]
        except KeyError:
            raise self._not_found(repr(name)) from None

    def added(self, name: str) -> None:
        """Register a version just committed in this file."""
        self._infos[name] = self._read(name, self.group[name])
        self._nlinks = len(self.group)
        self._sorted = None

    def removed(self, name: str) -> None:
        """Forget a version just deleted from this file."""
        self._infos.pop(name, None)
        self._nlinks = len(self.group)
        self._sorted = None

    def _by_time(self) -> list[tuple[_dt.datetime, str]]:
        if self._sorted is None:
            self._sorted = sorted((i.timestamp, i.name) for i in self._infos.values())
        return self._sorted

    def _not_found(self, what: str) -> VersionNotFoundError:
        names = self.names()
        shown = ", ".join(map(repr, names[-10:])) or "none"
        more = f" (last 10 of {len(names)})" if len(names) > 10 else ""
        return VersionNotFoundError(f"no version {what} in this file; versions{more}: {shown}")

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
            if name not in self._infos:
                raise self._not_found(f"{name!r} (the current version, never committed)")
            return name
        if isinstance(key, str):
            if key not in self._infos:
                raise self._not_found(repr(key))
            return key
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if key > 0:
                raise IndexError(
                    f"version index must be 0 (current) or negative (ancestors), got {key}"
                )
            return self.ancestor(self.resolve(None), -int(key))
        if isinstance(key, (_dt.datetime, np.datetime64, _dt.date)):
            return self.at_time(key)
        raise VersionKeyTypeError(
            f"a version is designated by a name (str), an index (int <= 0) or a "
            f"timestamp (datetime), got {type(key).__name__}"
        )

    def ancestor(self, name: str, n: int) -> str:
        """The version ``n`` steps back from ``name`` along ``prev_version``."""
        version = name
        for step in range(n):
            version = self.info(version).prev_version
            if version == FIRST_VERSION:
                raise VersionNotFoundError(
                    f"version {name!r} has only {step} ancestors, cannot go back {n}"
                )
        return version

    def at_time(self, when, exact: bool = False) -> str:
        """The version with timestamp ``when``, else (``exact=False``) the latest before it.

        Raises
        ------
        VersionNotFoundError
            Every version is newer than ``when`` (or, with ``exact``, none matches).
        """
        ts = to_utc_datetime(when)
        order = self._by_time()
        i = bisect.bisect_right(order, (ts, "\U0010ffff"))
        if i and order[i - 1][0] == ts:
            return order[i - 1][1]
        if exact or i == 0:
            kind = "at" if exact else "at or before"
            raise self._not_found(f"with a timestamp {kind} {ts.isoformat()}")
        return order[i - 1][1]
