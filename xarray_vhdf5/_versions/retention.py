"""Retention: delete the versions no ref needs (``expire``), then give their chunks back.

A version is *expired* by :func:`expire` when every rule given says it may go:

- ``older_than``: its timestamp is before this time;
- ``keep_last=N``: it is not one of the ``N`` newest versions of the file
  (by timestamp, all branches together);

and no ref needs it: the version a branch points to (``main`` is the current
version) when ``keep_branches``, and a tagged version when ``keep_tags``. An
ancestor is not needed by a ref: the deletion re-parents every survivor to its
nearest surviving ancestor (versioned-hdf5 2.6's ``delete_versions`` semantics),
so a kept version reads exactly as before. The root ``__first_version__`` and
groups left uncommitted by a crashed commit are never expired.

The deletion is :func:`~xarray_vhdf5._versions.delete.delete_versions`' (one
mutation: locked, journaled, counted), so the chunks only the expired versions
used are dropped from raw_data, and their bytes are left for the next commits
(:mod:`~xarray_vhdf5._versions.delete`, "Space"); :func:`~xarray_vhdf5._versions.repack.repack`
gives them back to the file system.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
from collections.abc import Iterator

import h5py
import numpy as np

from .._backend.layout import FIRST_VERSION, VERSION_DATA, VERSIONS
from . import delete as _delete
from . import refs
from .mutation import mutating, open_file
from .registry import VersionRegistry
from .timestamps import to_utc_datetime

__all__ = ["expire", "expired_versions"]


@contextlib.contextmanager
def _target(f) -> Iterator[object]:
    """``f`` itself, or the file at path ``f`` opened for writing (journaled) and closed after."""
    if isinstance(f, (str, os.PathLike)):
        with open_file(f, "r+") as h:
            yield h
    else:
        yield f


def _check_rules(older_than, keep_last) -> tuple[_dt.datetime | None, int | None]:
    if older_than is None and keep_last is None:
        raise ValueError("expire() needs older_than=..., keep_last=N or both; got neither (nothing would expire)")
    cutoff = None if older_than is None else to_utc_datetime(older_than)
    if keep_last is not None:
        if isinstance(keep_last, (bool, np.bool_)) or not isinstance(keep_last, (int, np.integer)):
            raise TypeError(f"keep_last must be an int >= 0, got {type(keep_last).__name__}")
        if keep_last < 0:
            raise ValueError(f"keep_last must be >= 0, got {keep_last}")
        keep_last = int(keep_last)
    return cutoff, keep_last


def expired_versions(
    f: h5py.File,
    older_than: _dt.datetime | np.datetime64 | str | None = None,
    keep_last: int | None = None,
    keep_tags: bool = True,
    keep_branches: bool = True,
    registry: VersionRegistry | None = None,
) -> list[str]:
    """The versions :func:`expire` would delete, oldest first; reads only.

    Parameters
    ----------
    f : h5py.File
        The file (the group holding ``_version_data``).
    older_than, keep_last, keep_tags, keep_branches
        As :func:`expire`.
    registry : VersionRegistry, optional
        The file's version index, when the caller has one.

    Returns
    -------
    list of str
        Version names, oldest timestamp first.

    Raises
    ------
    ValueError
        Neither ``older_than`` nor ``keep_last`` given, or ``keep_last < 0``.
    TypeError
        ``keep_last`` is not an int, or ``older_than`` not a timestamp.
    """
    cutoff, keep_last = _check_rules(older_than, keep_last)
    registry = registry if registry is not None else VersionRegistry(f)
    names = [n for n in registry.names() if n != FIRST_VERSION]  # oldest first
    candidates = names if keep_last is None else names[: max(0, len(names) - keep_last)]
    if cutoff is not None:
        candidates = [n for n in candidates if registry.info(n).timestamp < cutoff]
    needed: set[str] = set()
    if keep_branches:
        needed.update(refs.branches(f).values())
    if keep_tags:
        needed.update(refs.tags(f).values())
    return [n for n in candidates if n not in needed]


def expire(
    f,
    older_than: _dt.datetime | np.datetime64 | str | None = None,
    keep_last: int | None = None,
    keep_tags: bool = True,
    keep_branches: bool = True,
    *,
    keep_freed: bool | None = None,
) -> _delete.DeleteReport:
    """Delete the versions no ref needs and the chunks only they used (see the module).

    Parameters
    ----------
    f : str, os.PathLike, h5py.File or VersionedHDF5File
        The file; a path is opened with :func:`~xarray_vhdf5.open_file` (every
        change journaled) and closed after. An h5py file must be open writable.
    older_than : datetime.datetime, numpy.datetime64 or str, optional
        Expire only versions whose timestamp is before this (UTC; naive values
        and ISO strings are taken as UTC).
    keep_last : int, optional
        Keep the ``keep_last`` newest versions of the file (by timestamp,
        every branch together), whatever their age.
    keep_tags : bool
        Keep tagged versions (default). False deletes expired tagged versions
        and their tags.
    keep_branches : bool
        Keep the version each branch points to, ``main`` (the current version)
        included (default). False: an expired branch tip is deleted and its
        branch moves to the nearest surviving ancestor (a branch left with none
        is deleted), as :func:`~xarray_vhdf5._versions.delete.delete_versions`
        moves branches.
    keep_freed : bool, keyword-only, optional
        Leave the slots of raw_data the expired versions alone used allocated,
        for the next commits to write over (``delete_versions``' keyword).
        Default: True unless the file tracks its free space across closes
        (:func:`~xarray_vhdf5._versions.delete.persists_free_space`), where
        raw_data is truncated and libhdf5 reuses the bytes for any object.

    Returns
    -------
    DeleteReport
        The deleted versions (sorted by name; empty when none expired, and the
        file is then not written), the current version, the re-parented
        versions and, per dataset, the chunks of raw_data before and after.

    Raises
    ------
    ValueError
        Neither ``older_than`` nor ``keep_last`` given, or ``keep_last < 0``.
    TypeError
        ``keep_last`` is not an int, ``older_than`` not a timestamp, or ``f``
        not a path, h5py.File or VersionedHDF5File.
    ReadOnlyError
        The file is open read-only.
    NotVersionedError
        The file holds no version history.
    FileBusyError
        Another writer kept the file locked past the timeout (nothing done).
    """
    _check_rules(older_than, keep_last)
    with _target(f) as target:
        h5file, registry = _delete._open(target, "expire")
        if registry is not None:
            registry.sync()
        if not expired_versions(h5file, older_than, keep_last, keep_tags, keep_branches, registry):
            current = _delete._str(h5file[VERSION_DATA][VERSIONS].attrs["current_version"])
            return _delete.DeleteReport([], current, {})  # nothing written, not even the counters
        with mutating(h5file, moves=True, what="expiry"):
            if registry is not None:
                registry.sync()  # another writer may have committed while this one waited
            doomed = expired_versions(h5file, older_than, keep_last, keep_tags, keep_branches, registry)
            if not doomed:
                current = _delete._str(h5file[VERSION_DATA][VERSIONS].attrs["current_version"])
                return _delete.DeleteReport([], current, {})
            if not keep_tags:
                gone = set(doomed)
                tag_group = refs._group(h5file, "tags")
                if tag_group is not None:  # (tags live there: none without it)
                    for tag, version in refs.tags(h5file).items():
                        if version in gone:
                            del tag_group.attrs[tag]
            if keep_freed is None:
                keep_freed = not _delete.persists_free_space(h5file)
            return _delete._delete_versions(h5file, registry, doomed, keep_freed=keep_freed)
