"""Where this package keeps its bookkeeping: the root-level group ``/__vhdf5__``.

The group holds what versioned-hdf5's format has no place for (``docs/format.md``):

- ``rows``, ``names``: the version index (:mod:`~xarray_vhdf5._versions.index`);
- ``generation``: the write counters (:mod:`~xarray_vhdf5._versions.generation`);
- ``log``: one record per commit, what ``vhdf5 log`` shows (:mod:`~xarray_vhdf5._versions.logrecord`);
- ``chunk_maps``, ``chunk_addresses``: where each version's chunks lie, so readers
  need not decode virtual datasets (:mod:`~xarray_vhdf5._versions.chunkmaps`);
- ``map_log``: every version's chunk map of a dataset, as changes, for reads across
  versions (:mod:`~xarray_vhdf5._versions.maplog`);
- ``small_map_log``: the same for datasets too small for their own, one append a
  commit (:mod:`~xarray_vhdf5._versions.smallmaps`);
- attribute ``commit_token``: whose caches may be taken up
  (:mod:`~xarray_vhdf5._versions.caches`).

It lives at the root, outside ``/_version_data``, so that versioned-hdf5 and
anyone listing ``_version_data`` see only what versioned-hdf5 writes there
(versioned-hdf5 2.6 reads ``/_version_data`` only, never the root group).
netCDF-C lists every group of the file, so ``ncdump`` shows it as a group (as
it shows ``_version_data``); the variables of the root group, what xarray's
``netcdf4`` and ``h5netcdf`` engines read, are untouched.

**Files written before.** They kept the same group, with the same members, at
``/_version_data/__vhdf5_version_index__`` (:data:`LEGACY_PATH`). It is read
there, and the next mutation (:func:`~xarray_vhdf5._versions.mutation.mutating`:
under the ``WRITE`` lock, journaled with the mutation) moves it to
:data:`PATH` with one link move (:func:`migrate`). A link move re-points names
only: the group, its datasets and their bytes stay where they are, so the
counters keep their byte offset, and a process that located them before the
move (``mutation._OFFSETS``, a reader's cached offset) still reads and writes
the live counters. Lookups try :data:`PATH` first, then :data:`LEGACY_PATH`.
"""

from __future__ import annotations

import h5py
from h5py import h5g, h5o

from .._backend.h5objects import readable_tree
from .._backend.layout import BOOKKEEPING, VERSION_DATA, VERSION_INDEX

__all__ = [
    "LEGACY_PATH",
    "PARKED_PREFIX",
    "PATH",
    "RELINKING",
    "SEARCH",
    "discard",
    "find",
    "migrate",
    "open_group",
    "parking_place",
    "path_exists",
    "require_group",
]

#: Absolute path of the bookkeeping group.
PATH = f"/{BOOKKEEPING}"
#: Its path in files written before it moved to the root.
LEGACY_PATH = f"/{VERSION_DATA}/{VERSION_INDEX}"
#: Where to look, in order (as bytes, for h5py's low-level API).
SEARCH = (PATH.encode(), LEGACY_PATH.encode())
#: Members of the bookkeeping group so named hold objects a repair parked because their
#: header is torn (``damaged_version_data``, ``damaged_datasets``): never read, never
#: deleted (libhdf5 reads a header to unlink it), left out by ``vhdf5 repack``.
PARKED_PREFIX = "damaged_"
#: Where a repair builds the new ``_version_data`` before it takes the old one's place
#: (:mod:`~xarray_vhdf5._versions.relink`); found there only after a relink was killed.
RELINKING = "/__vhdf5_relinking__"


def path_exists(loc, path: bytes) -> bool:
    """True when the absolute ``path`` names an object of the file of ``loc`` (a low-level id).

    Link by link (``H5Lexists`` on each prefix: libhdf5 refuses a path whose
    parent is missing), without h5py's ``in``, which builds objects per call.
    """
    prefix = b""
    for part in path.strip(b"/").split(b"/"):
        prefix += b"/" + part
        if not loc.links.exists(prefix):
            return False
    return True


def find(loc: h5py.Group | h5py.File) -> str | None:
    """The absolute path of the bookkeeping group of the file of ``loc``, or None when it has none.

    Parameters
    ----------
    loc : h5py.Group or h5py.File
        Any group of the file (absolute paths resolve from the file's root).

    Returns
    -------
    str or None
        :data:`PATH`, else :data:`LEGACY_PATH` (a file not written since the
        move), else None.
    """
    gid = loc.id
    for path in SEARCH:
        if path_exists(gid, path):
            return path.decode()
    return None


def open_group(loc: h5py.Group | h5py.File) -> h5py.Group | None:
    """The bookkeeping group (at :data:`PATH`, else :data:`LEGACY_PATH`), or None."""
    path = find(loc)
    return None if path is None else h5py.Group(h5o.open(loc.id, path.encode()))


def require_group(loc: h5py.Group | h5py.File) -> h5py.Group:
    """The bookkeeping group where it is (see :func:`open_group`); created at :data:`PATH` if absent.

    The caller may write the file. A file keeping it at :data:`LEGACY_PATH`
    keeps it there until :func:`migrate` moves it (under the ``WRITE`` lock).
    """
    grp = open_group(loc)
    if grp is None:
        grp = h5py.Group(h5g.create(loc.id, PATH.encode()))
    return grp


def parking_place(loc: h5py.Group | h5py.File, what: str, name: str = "") -> str:
    """A free path in the bookkeeping group for an object a repair parks (:data:`PARKED_PREFIX`).

    Parameters
    ----------
    loc : h5py.File or h5py.Group
        Any group of the file, open writable (the bookkeeping group is created if absent).
    what : str
        The kind of object: the member of the bookkeeping group is
        ``PARKED_PREFIX + what`` (``damaged_version_data``; ``damaged_datasets``).
    name : str, optional
        With it, the member is a group and the path one of its members
        (``name``'s ``/`` written as ``__``); a number is added to a name taken.

    Returns
    -------
    str
        The absolute path, not yet taken (the caller moves the object there).
    """
    parent = require_group(loc)
    base = PARKED_PREFIX + what
    if name:
        parent, base = parent.require_group(base), name.replace("/", "__")
    found, k = base, 1
    while found in parent:
        k += 1
        found = f"{base}_{k}"
    return f"{parent.name}/{found}"


#: What h5py raises when libhdf5 finds a torn object header or group storage.
_TORN = (KeyError, RuntimeError, OSError, ValueError)


def discard(bk: h5py.Group, name: str) -> None:
    """Remove member ``name`` (a path) of the bookkeeping group ``bk``, if present: a cache of ours.

    Unlinking reads the object's header (libhdf5 decrements its link count).
    A header a killed plain-handle writer tore cannot be read, and a cache
    must never be the reason an operation fails: such an object is moved
    aside instead (one link move, no header read) to
    ``damaged_caches/<name>`` (:func:`parking_place`), never read again (a
    group is looked through first, :func:`~xarray_vhdf5._backend.h5objects.readable_tree`,
    so that one with a torn object below is moved whole before libhdf5 starts
    unlinking it);
    when the failed unlink already removed the link, nothing is moved. When a
    group on the path is torn too (its links cannot be read or moved), the
    nearest group above it that moves is parked, up to the member of ``bk``
    the path starts with (a cache group: its caches are built again).

    Raises
    ------
    KeyError, RuntimeError, OSError, ValueError
        Not even that member of ``bk`` could be moved (``bk``'s own links are torn).
    """
    try:
        if name not in bk:
            return
        member = bk[name]
        # A torn object below fails the unlink halfway, and libhdf5's cache of this
        # handle then refuses the move below too (measured): look first.
        if not isinstance(member, h5py.Group) or readable_tree(member.id):
            del bk[name]
            return
    except _TORN:  # the object's header (or a group's on its path) is torn
        pass
    try:
        # libhdf5 removes the link before it reads the header to count it down: when
        # that read fails, the link may be gone already, and then nothing is left to move.
        if name not in bk:
            return
    except _TORN:
        pass  # a torn group on the path: see what moves
    parts = name.split("/")
    for depth in range(len(parts), 0, -1):
        path = "/".join(parts[:depth])
        try:
            bk.move(path, parking_place(bk, "caches", path))
            return
        except _TORN:
            if depth == 1:
                raise


def migrate(f: h5py.File | h5py.Group) -> bool:
    """Move a bookkeeping group kept at :data:`LEGACY_PATH` to :data:`PATH`; True when moved.

    Called by a mutation, under the ``WRITE`` lock, before its body. Nothing
    is done when the group is already at :data:`PATH` or absent, or when both
    places are taken (the group at :data:`PATH` is the one used; the other
    stays, untouched). Object addresses and the counters' byte offset do not
    change (a link move).
    """
    gid = f.id
    new, old = SEARCH
    if not path_exists(gid, old) or gid.links.exists(new):
        return False
    h5g.open(gid, b"/").move(old, new)
    return True
