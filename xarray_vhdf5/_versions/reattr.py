"""Version attributes written again from the version index, where a killed writer left them unreadable.

A version group's ``prev_version`` and ``timestamp`` are variable-length
strings, kept in one of libhdf5's global heap collections; the attribute
message in the group's header holds only a reference into it. A deletion
through a plain ``h5py.File`` rewrites ``prev_version`` of the deleted
version's children and ``current_version``: a process killed inside
libhdf5's flush can leave the headers on disk and not the collection, so
the references name objects the collection does not hold (libhdf5: "bad
heap index"; seen once in about 120 kills of plain-handle deletions,
``tests/test_concurrency_slow.py``). The version's data is whole; without
its attributes the check counted it damaged and the repair deleted it.

The version index (:mod:`~xarray_vhdf5._versions.index`) holds each
version's parent and timestamp, and its group's address.
:func:`restore_attributes` writes the unreadable attributes again from it,
for groups at the address the index recorded, so that a later check sees the
version whole. ``current_version``, the versions group's own attribute, is
not here: the repair sets it to the last whole version.
"""

from __future__ import annotations

import h5py

from .._backend.h5objects import object_address_by_name
from .._backend.layout import FIRST_VERSION, VERSION_DATA, VERSIONS
from . import index as version_index
from .chunkcheck import DAMAGE_ERRORS
from .mutation import mutating
from .timestamps import format_timestamp

__all__ = ["restore_attributes", "unreadable_attributes"]

#: The variable-length string attributes of a version group (in a global heap).
STRING_ATTRIBUTES = ("prev_version", "timestamp")


def unreadable_attributes(group: h5py.Group) -> list[str]:
    """Which of ``group``'s :data:`STRING_ATTRIBUTES` exist but cannot be read (libhdf5 raises).

    Parameters
    ----------
    group : h5py.Group
        A version group.

    Returns
    -------
    list of str
        The attribute names, in :data:`STRING_ATTRIBUTES` order; empty when all read.
    """
    bad = []
    for name in STRING_ATTRIBUTES:
        try:
            if name in group.attrs:
                group.attrs[name]
        except DAMAGE_ERRORS:
            bad.append(name)
    return bad


def restore_attributes(h5file: h5py.Group) -> dict[str, list[str]]:
    """Write again, from the version index, the version attributes libhdf5 cannot read.

    Only for a version group the index names, at the address the index
    recorded for it (a group re-created under the same name is left alone),
    and only the attributes that cannot be read. The parent written is the
    index's; one that names no version is then re-rooted by the repair, as any.
    One mutation (:func:`~xarray_vhdf5._versions.mutation.mutating`) when
    anything is written.

    Parameters
    ----------
    h5file : h5py.File or h5py.Group
        The group holding ``_version_data``, open writable.

    Returns
    -------
    dict of str to list of str
        Version name -> the attributes written. Empty when nothing was
        unreadable, or the index or the versions group cannot be read (the
        repair then goes on as before: such versions are rolled back).

    Raises
    ------
    FileBusyError, StaleVersionError
        Another writer holds the file, or wrote it since this handle read it
        (:func:`~xarray_vhdf5._versions.mutation.mutating`); nothing was written.
    """
    try:
        vdata = h5file[VERSION_DATA]
        versions = vdata[VERSIONS]
        names = [n for n in versions if n != FIRST_VERSION]
    except DAMAGE_ERRORS:
        return {}
    todo: dict[str, list[str]] = {}
    for name in names:
        try:
            bad = unreadable_attributes(versions[name])
        except DAMAGE_ERRORS:  # the group itself: damage the check reports
            continue
        if bad:
            todo[name] = bad
    if not todo:
        return {}
    stored = version_index.read_addresses(vdata)
    if stored is None:
        return {}
    entries, addresses = stored
    row = {name: i for i, name in enumerate(entries.names)}
    done: dict[str, list[str]] = {}
    with mutating(h5file, what="repair"):
        for name, bad in todo.items():
            i = row.get(name)
            if i is None:
                continue
            group = versions[name]
            recorded = int(addresses[i])
            if recorded != version_index.NO_ADDRESS and recorded != object_address_by_name(versions.id, name.encode()):
                continue
            values = {
                "prev_version": entries.parents[i],
                "timestamp": format_timestamp(version_index.from_micros(int(entries.timestamps[i]))),
            }
            written = []
            for attr in bad:
                try:
                    group.attrs[attr] = values[attr]
                except DAMAGE_ERRORS:
                    continue
                written.append(attr)
            if written:
                done[name] = written
    return done
