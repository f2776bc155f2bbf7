"""Which version a key designates: a name, a ref, a position, a time (pandas-style).

:func:`lookup_version` is what ``xr.open_dataset(..., version=key)`` opens;
:func:`lookup_as_of` the version current at a time (``as_of=``). Both extend
:meth:`~xarray_vhdf5._versions.registry.VersionRegistry.resolve`, versioned-hdf5's
``vf[key]`` rules, and read only the registry: no version group is opened.
"""

from __future__ import annotations

import datetime as _dt

import numpy as np

from ..errors import VersionKeyTypeError, VersionNotFoundError
from .registry import VersionRegistry
from .timestamps import to_utc_datetime

__all__ = ["lookup_as_of", "lookup_version"]


def lookup_version(registry: VersionRegistry, key) -> str:
    """The version ``key`` designates, pandas-style: what ``xr.open_dataset(..., version=key)`` opens.

    Extends :meth:`VersionRegistry.resolve` (versioned-hdf5's ``vf[key]``
    rules, which ``VersionedHDF5File`` keeps) with positions and time strings.

    Parameters
    ----------
    key : str, int, datetime, numpy.datetime64 or None
        - None: the current version.
        - str: the version of that name; else the version the tag or branch
          of that name points to (:mod:`~xarray_vhdf5._versions.refs`; ``"main"``
          is the current version); if there is none and the string is
          an ISO 8601 time (``"2024-06-01"``, ``"2024-06-01T00:00"``,
          ``"2024-06-01T00:00+02:00"``; naive ones are UTC), the version
          current at that time: committed at it, else the latest committed
          before it (``as_of``). A version *named* like a time is found by
          its name first.
        - int >= 0: a position in the version log, oldest first
          (``ds.vhdf5.versions.index[key]``, ``vhdf5 log``'s order): 0 is the
          first version, 50 the 51st. (``VersionedHDF5File``'s ``vf[0]`` is
          the current version and ``vf[n > 0]`` an ``IndexError``, as in
          versioned-hdf5.)
        - int < 0: ``-n`` is the n-th ancestor of the current version along
          ``prev_version`` (versioned-hdf5's ``vf[-n]``), not the n-th from
          the end of the log: they differ after a branch.
        - datetime, numpy.datetime64 or date: the version current at that time.

    Returns
    -------
    str
        The version's name.

    Raises
    ------
    VersionNotFoundError
        A ``KeyError``, ``ValueError`` and ``IndexError``: no version of that
        name and not a time; a position past the last version; a time before
        the first version; ``-n`` past the oldest ancestor. The message says
        what was given and what exists.
    VersionKeyTypeError
        ``key`` is of another type (a ``TypeError``).
    """
    if isinstance(key, str):
        if key in registry:
            return key
        version = registry.ref(key)  # a tag or branch
        if version is not None:
            return version
        try:
            when = _dt.datetime.fromisoformat(key)
        except ValueError:
            raise registry._not_found(
                f"named {key!r}, no branch or tag of that name (nor is it an ISO 8601 time such as '2024-06-01T00:00')"
            ) from None
        return _at_time(registry, when, key)
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool) and key >= 0:
        names = registry.names()
        if key >= len(names):
            last = f"0 to {len(names) - 1}" if names else "none: the file has no version"
            raise VersionNotFoundError(
                f"no version at position {int(key)}: the file has {len(names)} version"
                f"{'' if len(names) == 1 else 's'} (positions {last}, oldest first"
                f"{', the last ' + repr(names[-1]) if names else ''}); -n counts back from the current version"
            )
        return names[int(key)]
    if isinstance(key, (_dt.datetime, np.datetime64, _dt.date)):
        return _at_time(registry, key, key)
    if key is None or (isinstance(key, (int, np.integer)) and not isinstance(key, bool)):
        return registry.resolve(key)
    raise VersionKeyTypeError(
        "a version is designated by a name or ISO 8601 time (str), a position (int >= 0), an ancestor "
        f"(int < 0), a timestamp (datetime, numpy.datetime64) or None, got {type(key).__name__} {key!r}"
    )


def lookup_as_of(registry: VersionRegistry, key, as_of) -> str:
    """The version a branch (or a version's line of parents) had at time ``as_of``.

    ``key`` names the line, as :func:`lookup_version` takes it (None: the
    current version, i.e. branch ``main``); the result is the newest version
    along ``key``'s first-parent chain (``prev_version``) committed at or
    before ``as_of`` (a datetime, numpy.datetime64 or ISO 8601 string; naive
    means UTC). Unlike a time given as ``version=``, which picks the version
    committed last before that time in the whole file, this stays on the
    branch.

    Raises
    ------
    VersionNotFoundError
        ``key`` names nothing, or every version on its line is newer than ``as_of``.
    """
    tip = lookup_version(registry, key)
    when = to_utc_datetime(_dt.datetime.fromisoformat(as_of) if isinstance(as_of, str) else as_of)
    for name in registry._ancestry(tip):
        if registry.info(name).timestamp <= when:
            return name
    first = registry._ancestry(tip)[-1]
    raise VersionNotFoundError(
        f"no version of {key if key is not None else 'main'!r} at {when.isoformat()}: its first version "
        f"{first!r} was committed at {registry.info(first).timestamp.isoformat()}"
    )


def _at_time(registry: VersionRegistry, when, given) -> str:
    """:meth:`VersionRegistry.at_time`, with a message naming the first version's time when too early."""
    try:
        return registry.at_time(when)
    except VersionNotFoundError:
        names = registry.names()
        if not names:
            raise VersionNotFoundError(f"no version at {given!r}: the file has no version") from None
        first = registry.info(names[0])
        raise VersionNotFoundError(
            f"no version at {given!r}: it is before the first version {names[0]!r}, committed at "
            f"{first.timestamp.isoformat()} (times without a zone are UTC)"
        ) from None
