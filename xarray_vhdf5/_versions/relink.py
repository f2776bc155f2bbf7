"""Reaching the versions again when the versions group itself is damaged.

Every version is reached through one HDF5 group, ``_version_data/versions``:
its links name the version groups. libhdf5 rewrites that group's object header
(and, past a few links, its link heap and B-trees) in place when a commit adds
a link; a process killed while libhdf5 flushes a plain h5py handle can leave
it torn (a checksum that no longer matches, a message that no longer decodes),
and then no version can be listed or opened, although every version group,
virtual dataset and chunk is intact (measured: 2 of 150 kills of a writer
holding a plain ``h5py.File`` open across commits; ``docs/concurrency.md``).

The version index (:mod:`~xarray_vhdf5._versions.index`) keeps a second way to
them: each row's version group's object address (``addresses``).
:func:`relink_versions` opens each committed version group by its address
(``H5Oopen_by_token``), keeps those whose attributes still say what the index
says (name's timestamp and parent), and links them into a new versions group,
which takes the damaged one's place. libhdf5 reads a group's header to unlink
or move it, so the damaged group stays where it is: a new ``_version_data``
(hard links to the same dataset groups, and the new versions group) replaces
the old one, which is parked in this package's bookkeeping group
(``/__vhdf5__/damaged_version_data``, which versioned-hdf5 never reads). What is
then left to roll back (the interrupted commit) is
:func:`~xarray_vhdf5._versions.repair.repair`'s job: ``vhdf5 check --repair``
runs both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import h5py
import numpy as np

from .._backend.h5objects import open_by_address
from .._backend.layout import DATA_VERSION, FIRST_VERSION, VERSION_DATA, VERSIONS
from ..errors import CorruptFileError, ReadOnlyError
from . import bookkeeping
from . import index as version_index
from .chunkcheck import DAMAGE_ERRORS, describe
from .mutation import file_name, mutating
from .objects import check_file_argument, linked_copy
from .timestamps import format_timestamp, now_utc

__all__ = ["RelinkReport", "finish_interrupted_relink", "relink_versions", "versions_readable"]


@dataclass
class RelinkReport:
    """What :func:`relink_versions` did.

    Attributes
    ----------
    relinked : list of str
        Versions linked into the new versions group, oldest first.
    lost : dict of str to str
        Versions of the index not relinked, and why (an interrupted commit, no
        address recorded, nothing readable or another object at the address).
    moved_to : str
        Where the old ``_version_data`` (holding the damaged versions group) now is.
    current_version : str
        The new group's ``current_version``: the newest version relinked (the
        repair that follows may roll back further).
    """

    relinked: list[str] = field(default_factory=list)
    lost: dict[str, str] = field(default_factory=dict)
    moved_to: str = ""
    current_version: str = FIRST_VERSION

    def __str__(self) -> str:
        lines = [
            f"versions group rebuilt from the version index: {len(self.relinked)} versions relinked "
            f"(the damaged group parked in {self.moved_to}); current version {self.current_version}"
        ]
        lines.extend(f"not relinked: {name}: {why}" for name, why in self.lost.items())
        return "\n".join(lines)


def versions_readable(vdata: h5py.Group) -> bool:
    """Whether ``_version_data/versions`` opens, lists its links and says its ``current_version``."""
    try:
        versions = vdata[VERSIONS]
        names = list(versions)
        _ = versions.attrs["current_version"]
        for name in names:  # each link's target header: a torn one fails here (one cheap call each)
            h5py.h5o.get_info(versions.id, name.encode(), lapl=None)
    except DAMAGE_ERRORS:
        return False
    return True


def _recover(vdata: h5py.Group, found) -> tuple[dict[str, h5py.Group], dict[str, str]]:
    """The version groups the index reaches by address and that still are those versions."""
    entries, addresses = found
    names, parents, stamps, committed = entries.names, entries.parents, entries.timestamps, entries.committed
    groups: dict[str, h5py.Group] = {}
    lost: dict[str, str] = {}
    for i, name in enumerate(names):
        if not committed[i]:
            lost[name] = "its commit was interrupted (the index row says committed=0)"
            continue
        if addresses[i] == version_index.NO_ADDRESS:
            lost[name] = "the index has no address for it (written before addresses were kept)"
            continue
        try:
            obj = open_by_address(vdata.id, int(addresses[i]))
            if not isinstance(obj, h5py.h5g.GroupID):
                lost[name] = f"the object at address {addresses[i]} is not a group"
                continue
            group = h5py.Group(obj)
            prev, stamp, done = version_index.read_group_entry(group)
        except (*DAMAGE_ERRORS, NotImplementedError) as exc:
            lost[name] = f"its group cannot be read at address {addresses[i]}: {describe(exc)}"
            continue
        if (prev, stamp, done) != (parents[i], int(stamps[i]), True):
            lost[name] = f"the group at address {addresses[i]} is not this version (its attributes differ)"
            continue
        groups[name] = group
    return groups, lost


def relink_versions(f) -> RelinkReport | None:
    """Rebuild a damaged ``_version_data/versions`` group from the version index's addresses.

    Parameters
    ----------
    f : h5py.File or h5py.Group
        The file, open writable.

    Returns
    -------
    RelinkReport or None
        None when the versions group reads (nothing done).

    Raises
    ------
    CorruptFileError
        The versions group cannot be read and the version index cannot reach
        any version (no index, a damaged one, or one written before addresses
        were kept); nothing was changed.
    ReadOnlyError
        The file is open read-only.
    FileBusyError, StaleVersionError
        As :func:`~xarray_vhdf5._versions.mutation.mutating`.
    TypeError, ClosedFileError
        ``f`` is not an open h5py file.
    """
    check_file_argument("relink_versions", f, versioned_file=False)
    h5file = f.file
    name = file_name(h5file)
    if h5file.mode == "r":
        raise ReadOnlyError(f"{name!r} is open read-only; open it with mode 'a'")
    vdata = h5file[VERSION_DATA]
    if versions_readable(vdata):
        return None
    found = version_index.read_addresses(vdata)
    groups, lost = _recover(vdata, found) if found is not None else ({}, {})
    if not groups:
        why = "it has no version index" if found is None else "its version index reaches no version"
        if lost:
            why += " (" + "; ".join(f"{n}: {w}" for n, w in list(lost.items())[:3]) + ")"
        raise CorruptFileError(
            f"{name!r}: the versions group (/{VERSION_DATA}/{VERSIONS}) cannot be read and {why}: "
            "the versions cannot be reached"
        )
    assert found is not None  # groups were found through it
    stamp_of = dict(zip(found[0].names, found[0].timestamps.tolist()))
    order = sorted(groups, key=lambda n: (stamp_of[n], n))
    out = RelinkReport(relinked=order, lost=lost, current_version=order[-1])
    with mutating(h5file, what="relink"):
        out.moved_to = bookkeeping.parking_place(vdata, "version_data")
        fresh = _fresh_version_data(h5file, vdata, out)
        versions = fresh.create_group(VERSIONS, track_order=True)
        first = _first_version(vdata)
        if first is not None:
            versions[FIRST_VERSION] = first
        else:
            versions.create_group(FIRST_VERSION).attrs["timestamp"] = format_timestamp(now_utc())
        for name in order:
            versions[name] = groups[name]
        versions.attrs["data_version"] = np.int64(DATA_VERSION)
        versions.attrs["current_version"] = out.current_version
        # The damaged group cannot be moved or unlinked (libhdf5 reads its header to
        # do either): its parent is replaced instead, and parked with it.
        h5file.move(f"/{VERSION_DATA}", out.moved_to)
        h5file.move(fresh.name, f"/{VERSION_DATA}")
    return out


def finish_interrupted_relink(h5file: h5py.File) -> bool:
    """Put the new ``_version_data`` in place if a relink was killed between its two link moves.

    Through a journaled handle (``vhdf5 check --repair``) the journal rolls such
    a relink back instead; this is for one run through a plain h5py handle.

    Returns
    -------
    bool
        True when the file had no ``_version_data`` and the relink's new one was moved in.
    """
    if VERSION_DATA in h5file or bookkeeping.RELINKING not in h5file:
        return False
    with mutating(h5file, what="relink"):
        h5file.move(bookkeeping.RELINKING, f"/{VERSION_DATA}")
    return True


def _fresh_version_data(h5file: h5py.File, vdata: h5py.Group, out: RelinkReport) -> h5py.Group:
    """A new group with ``_version_data``'s attributes and hard links to its members but the versions group."""
    if bookkeeping.RELINKING in h5file:  # left by a relink interrupted before its moves
        del h5file[bookkeeping.RELINKING]
    fresh = h5file.create_group(bookkeeping.RELINKING)
    for name, exc in linked_copy(vdata, fresh, skip=VERSIONS).items():
        out.lost[f"/{VERSION_DATA}/{name}"] = f"cannot be linked again: {describe(exc)}"
    return fresh


def _first_version(vdata: h5py.Group) -> h5py.Group | None:
    try:
        first = vdata[VERSIONS][FIRST_VERSION]
        _ = dict(first.attrs)
    except DAMAGE_ERRORS:
        return None
    return first
