"""The root-level netCDF-4 view of the current version, and dimension attachments made whole.

**The root view.** netCDF tools and xarray's ``netcdf4``/``h5netcdf`` engines read
the root group of a file unless told a group; here the root holds only
``_version_data``, so ``xr.open_dataset(path)`` without ``engine="vhdf5"`` used to
give an empty Dataset without a word. With the view on, the root group holds,
for each member of the current version's group (datasets and subgroups), an
HDF5 *soft link* of the same name to it
(``/sst -> /_version_data/versions/<current>/sst``), and a copy of the
version's user attributes; ``ncdump``, Panoply, netCDF4-python, h5netcdf and
``xr.open_dataset(path)`` then show the current version. The dimension scales
come along: they are members of the version group, and netCDF-C matches
attachments by object address, which a soft link does not change.

Soft rather than hard links: a soft link names a path, so whatever rewrites a
version's virtual datasets in place (``delete_versions`` compacting raw_data,
``modify_metadata``; this package's or versioned-hdf5's) leaves it right. A
hard link would keep the old object alive, mapping rows of a raw_data that no
longer holds them: wrong values without an error.

The view is refreshed, in the same mutation, by every commit that moves
``current_version`` (:func:`~xarray_vhdf5._versions.commit.commit_version`, h5py
level and xarray alike), by ``delete_versions`` and by setting
``current_version``. It is on for files the xarray writer commits to
(``xr._dimscales.attach_dimension_scales`` turns it on) and off for files only
written through the h5py-level API, whose root group stays versioned-hdf5's
(:func:`enable_root_view`, :func:`disable_root_view`). Its state is two
attributes of ``/_version_data/__netcdf_dimensions__``: ``root_view`` (the
version shown) and ``root_view_attrs`` (the root attributes it wrote).
Only soft links into ``/_version_data/versions/`` are ever replaced or deleted;
a root object of the user's is left alone (the member of that name is then
not in the view).

versioned-hdf5 2.6 never looks at the root group (it reads ``_version_data``
only), so it opens and commits such files; its own commits do not refresh the
view (it then shows the version that was current at this package's last write),
and if it deletes the version shown, the links dangle (netCDF-C then refuses the
whole file) until this package's next commit or deletion.

**Attachments made whole.** versioned-hdf5 copies a dataset's attributes as
they are into the new version, ``DIMENSION_LIST``/``REFERENCE_LIST`` included:
they then point into the parent version. netCDF-C matches a variable's scales
by object address among the scales of its own group and its ancestors, finds
none, and refuses to open the whole file. :func:`repair_attachments` re-points
such a version's attachments to the same-named scales of its own group; every
commit runs it on the new version's ancestors committed by others
(:func:`repair_ancestors`).
"""

from __future__ import annotations

import h5py
import numpy as np
from h5py import h5a, h5g, h5l

from .._backend.h5attrs import read_attr, write_attr
from .._backend.h5objects import member_names
from .._backend.layout import FIRST_VERSION, NETCDF_DIMENSIONS, VERSION_ATTRS, VERSION_DATA, VERSIONS

__all__ = [
    "disable_root_view",
    "enable_root_view",
    "repair_ancestors",
    "repair_attachments",
    "root_view_enabled",
    "update_root_view",
]

#: Group whose attributes hold the view's state (netCDF bookkeeping of this package).
_STATE = f"/{VERSION_DATA}/{NETCDF_DIMENSIONS}"
#: Attribute of ``_STATE``: the version the root view shows ("" while none); present = view on.
VIEW_ATTR = "root_view"
#: Attribute of ``_STATE``: names of the root attributes the view wrote.
VIEW_ATTRS_ATTR = "root_view_attrs"
_VERSIONS_PREFIX = f"/{VERSION_DATA}/{VERSIONS}/"


def root_view_enabled(f: h5py.File) -> bool:
    """True if the file keeps a root-level view of its current version.

    Parameters
    ----------
    f : h5py.File
        An open file (any mode).

    Returns
    -------
    bool
        Whether ``/_version_data/__netcdf_dimensions__`` has the ``root_view`` attribute.
    """
    state = _state_id(f.file)
    return state is not None and bool(h5a.exists(state, VIEW_ATTR.encode()))


def enable_root_view(f: h5py.File) -> None:
    """Turn the root view on (if off) and show the current version.

    Parameters
    ----------
    f : h5py.File
        A versioned file open for writing.

    Raises
    ------
    ValueError
        ``f`` is open read-only, or is not a versioned file.
    """
    f = f.file
    _check_writable(f)
    if not root_view_enabled(f):
        f.require_group(_STATE).attrs[VIEW_ATTR] = ""
    update_root_view(f)


def disable_root_view(f: h5py.File) -> None:
    """Remove the root view (its links and attributes) and turn it off.

    Parameters
    ----------
    f : h5py.File
        A versioned file open for writing.

    Raises
    ------
    ValueError
        ``f`` is open read-only, or is not a versioned file.
    """
    f = f.file
    _check_writable(f)
    if not root_view_enabled(f):
        return
    _clear(f)
    state = f[_STATE]
    for key in (VIEW_ATTR, VIEW_ATTRS_ATTR):
        if key in state.attrs:
            del state.attrs[key]


def update_root_view(f: h5py.File, version: str | None = None) -> bool:
    """Point the root view at ``version`` (default: the current version), if the view is on.

    The end state is the one the module docstring describes whatever the
    view showed before; links already pointing where they should are kept
    (a commit re-points only the links whose target changed, and every link
    names its version, so all of them each commit: low-level calls, two per
    member).

    Parameters
    ----------
    f : h5py.File
        A versioned file open for writing (called inside the mutation that
        moved ``current_version``).
    version : str, optional
        The version to show; default the file's ``current_version``.

    Returns
    -------
    bool
        False when the view is off (nothing done).

    Raises
    ------
    ValueError
        ``f`` is open read-only, or is not a versioned file.
    """
    f = f.file
    state = _state_id(f)
    if state is None or not h5a.exists(state, VIEW_ATTR.encode()):
        return False
    _check_writable(f)
    versions = h5g.open(f.id, _VERSIONS_PREFIX.rstrip("/").encode())
    if version is None:
        current = read_attr(versions, "current_version") if h5a.exists(versions, b"current_version") else None
        version = FIRST_VERSION if current is None else _str(current)
    group = None
    if version != FIRST_VERSION:
        try:
            group = h5g.open(versions, version.encode())
        except (KeyError, ValueError):  # no such version (or not a group)
            group = None
    members = member_names(group) if group is not None else []
    target = f"{_VERSIONS_PREFIX}{version}/".encode()
    _clear_links(f.id, keep={name: target + name for name in members})
    _clear_attrs(f, state)
    if group is None:
        write_attr(state, VIEW_ATTR, "")
        return True
    links = f.id.links
    for name in members:
        if not links.exists(name):  # else a link kept above, or the user's own root object: left alone
            links.create_soft(name, target + name)
    written = []
    if h5a.get_num_attrs(group) > sum(bool(h5a.exists(group, k.encode())) for k in VERSION_ATTRS):
        source = h5py.Group(group).attrs
        for key in source:
            if key in VERSION_ATTRS or key.startswith("_vhdf5") or key in f.attrs:
                continue
            f.attrs.create(key, source[key], dtype=source.get_id(key).dtype)
            written.append(key)
    write_attr(state, VIEW_ATTR, version)
    if written:
        write_attr(state, VIEW_ATTRS_ATTR, np.array(written, dtype=h5py.string_dtype()))
    return True


def _state_id(f: h5py.File) -> h5g.GroupID | None:
    """The group holding the view's state (``_STATE``), or None."""
    try:
        return h5g.open(f.id, _STATE.encode())
    except (KeyError, ValueError):
        return None


def _clear_links(root: h5g.GroupID, keep: dict[bytes, bytes] | None = None) -> None:
    """Delete the root's soft links into the versions, but those ``keep`` maps to their target path."""
    keep = keep or {}
    prefix = _VERSIONS_PREFIX.encode()
    links = root.links
    for name in member_names(root):
        if links.get_info(name).type != h5l.TYPE_SOFT:
            continue
        value = links.get_val(name)
        if value.startswith(prefix) and keep.get(name) != value:
            root.unlink(name)


def _clear_attrs(f: h5py.File, state: h5g.GroupID) -> None:
    """Delete the root attributes the view wrote, and the list of them."""
    if not h5a.exists(state, VIEW_ATTRS_ATTR.encode()):
        return
    for key in np.atleast_1d(read_attr(state, VIEW_ATTRS_ATTR)).tolist():
        key = _str(key).encode()
        if h5a.exists(f.id, key):
            h5a.delete(f.id, key)
    h5a.delete(state, VIEW_ATTRS_ATTR.encode())


def _clear(f: h5py.File) -> None:
    """Delete the view's soft links and the root attributes it wrote."""
    _clear_links(f.id)
    state = _state_id(f)
    if state is not None:
        _clear_attrs(f, state)


def _check_writable(f: h5py.File) -> None:
    if f.mode == "r":
        raise ValueError(f"{f.filename!r} is open read-only; the root view needs mode 'a'")
    if _VERSIONS_PREFIX.rstrip("/") not in f:
        raise ValueError(f"{f.filename!r} is not a versioned file (no {_VERSIONS_PREFIX.rstrip('/')!r})")


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- attachments pointing into another version ---------------------------------


def _targets(f: h5py.File, dset: h5py.Dataset) -> list[list[str]] | None:
    """Per axis, the paths of the scales ``dset``'s ``DIMENSION_LIST`` names (None: no list)."""
    if "DIMENSION_LIST" not in dset.attrs:
        return None
    out = []
    for refs in dset.attrs["DIMENSION_LIST"]:
        names = []
        for ref in refs:
            try:
                names.append(f[ref].name or "")
            except (KeyError, ValueError, OSError):  # a dangling reference
                names.append("")
        out.append(names)
    return out


def _datasets(group: h5py.Group, prefix: str = ""):
    for key in group:
        link = group.get(key, getlink=True)
        if not isinstance(link, h5py.HardLink):
            continue
        obj = group[key]
        if isinstance(obj, h5py.Dataset):
            yield prefix + key, obj
        elif isinstance(obj, h5py.Group):
            yield from _datasets(obj, f"{prefix}{key}/")


def _broken_scale(dset: h5py.Dataset) -> bool:
    """A dataset whose ``CLASS`` says ``DIMENSION_SCALE`` but which the Dimension Scales API does not take for one.

    versioned-hdf5 copies attributes through h5py, which writes ``CLASS`` as a
    15-byte string without its terminating NUL; ``H5DSis_scale`` (what netCDF-C
    asks) then says no.
    """
    if "CLASS" not in dset.attrs:
        return False
    value = dset.attrs["CLASS"]
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    return isinstance(value, str) and value.rstrip("\0") == "DIMENSION_SCALE" and not h5py.h5ds.is_scale(dset.id)


def needs_repair(version_group: h5py.Group) -> bool:
    """True if a dataset of the version has a ``DIMENSION_LIST`` naming an object outside it, or is a broken scale.

    Parameters
    ----------
    version_group : h5py.Group
        ``/_version_data/versions/<version>``.

    Returns
    -------
    bool
        Whether :func:`repair_attachments` has anything to do.

    Notes
    -----
    Runs on every commit to a file with netCDF bookkeeping, so it works on
    low-level identifiers: one ``H5Aexists`` per dataset, and one dereference
    per variable with attachments.
    """
    own = (version_group.name + "/").encode()
    return _needs_repair(version_group.id, own, version_group.file.id)


def _needs_repair(gid, own: bytes, fid) -> bool:
    # Two passes: the version's own datasets (libhdf5 object identity: file and address),
    # then each attachment's first reference checked against them. Naming the target
    # (H5Iget_name) would search the whole file for a path, for every reference.
    members: set[h5py.h5d.DatasetID] = set()  # equal by file and address
    attached: list[h5py.h5d.DatasetID] = []
    if _collect(gid, members, attached):
        return True
    for oid in attached:
        for refs in h5py.Dataset(oid).attrs["DIMENSION_LIST"]:
            for ref in refs[:1]:
                try:
                    target = h5py.h5r.dereference(ref, fid)
                except (KeyError, ValueError, OSError):
                    return True
                if target not in members:
                    return True
    return False


def _collect(gid, members: set[h5py.h5d.DatasetID], attached: list[h5py.h5d.DatasetID]) -> bool:
    """Add the datasets under ``gid`` to ``members``, those with attachments to ``attached``.

    Returns True if a scale is broken.
    """
    for name in member_names(gid):
        oid = h5py.h5o.open(gid, name)
        if isinstance(oid, h5py.h5g.GroupID):
            if _collect(oid, members, attached):
                return True
            continue
        if not isinstance(oid, h5py.h5d.DatasetID):
            continue
        members.add(oid)
        if h5py.h5a.exists(oid, b"CLASS") and not h5py.h5ds.is_scale(oid) and _broken_scale(h5py.Dataset(oid)):
            return True
        if h5py.h5a.exists(oid, b"DIMENSION_LIST"):
            attached.append(oid)
    return False


def repair_attachments(version_group: h5py.Group) -> int:
    """Re-point a version's dimension attachments that name another version's scales.

    Scales whose ``CLASS`` attribute libhdf5 does not recognise (copied by
    versioned-hdf5 without its NUL) are made scales again, their ``NAME`` kept.
    Each reference to ``/_version_data/versions/<other>/<path>`` is replaced by
    one to ``<path>`` in this version when that is a dimension scale of the
    right length (else the axis is left unattached: netCDF tools give it a
    phony dimension). All ``REFERENCE_LIST`` of the version are rebuilt with
    the attachments.

    Parameters
    ----------
    version_group : h5py.Group
        ``/_version_data/versions/<version>`` of a file open for writing.

    Returns
    -------
    int
        The number of axes attached.

    Raises
    ------
    ValueError
        The file is open read-only.
    """
    f = version_group.file
    if f.mode == "r":
        raise ValueError(f"{f.filename!r} is open read-only; repairing attachments needs mode 'a'")
    own = version_group.name + "/"
    plans = []
    members = list(_datasets(version_group))
    for _rel, dset in members:
        targets = _targets(f, dset)
        if targets is not None:
            plans.append((dset, targets))
    for _, dset in members:
        for key in ("DIMENSION_LIST", "REFERENCE_LIST"):
            if key in dset.attrs:
                del dset.attrs[key]
        if _broken_scale(dset):
            name = dset.attrs.get("NAME", b"")
            name = name.encode() if isinstance(name, str) else bytes(name)
            del dset.attrs["CLASS"]
            h5py.h5ds.set_scale(dset.id, name.rstrip(b"\0"))
    attached = 0
    for dset, targets in plans:
        for axis, names in enumerate(targets):
            for name in names[:1]:
                if name.startswith(_VERSIONS_PREFIX) and not name.startswith(own):
                    rest = name[len(_VERSIONS_PREFIX) :].partition("/")[2]
                    name = own + rest
                scale = f.get(name) if name.startswith(own) else None
                if (
                    isinstance(scale, h5py.Dataset)
                    and scale.id != dset.id
                    and h5py.h5ds.is_scale(scale.id)
                    and scale.shape == (dset.shape[axis],)
                ):
                    h5py.h5ds.attach_scale(dset.id, scale.id, axis)
                    attached += 1
    return attached


def repair_ancestors(versions: h5py.Group, version: str, limit: int = 64) -> list[str]:
    """Repair ``version`` and its ancestors whose attachments point outside them (:func:`repair_attachments`).

    Walks ``prev_version`` from ``version`` and stops at the first version
    that needs nothing (versions this package committed never do), at the
    first version, or after ``limit`` versions.

    Parameters
    ----------
    versions : h5py.Group
        ``/_version_data/versions`` of a file open for writing.
    version : str
        The version to start from.
    limit : int
        At most this many versions are looked at.

    Returns
    -------
    list of str
        The versions repaired.

    Raises
    ------
    ValueError
        The file is open read-only.
    """
    repaired = []
    for _ in range(limit):
        if version == FIRST_VERSION or version not in versions:
            break
        group = versions[version]
        if not needs_repair(group):
            break
        repair_attachments(group)
        repaired.append(version)
        version = _str(group.attrs.get("prev_version", FIRST_VERSION))
    return repaired


def after_commit(
    f: h5py.File, versions: h5py.Group, name: str, prev_version: str, make_current: bool, *, repair: bool = True
) -> None:
    """The commit hook (``versions.commit``): attachments repaired, the view moved to ``name``.

    Does nothing (one link lookup) in files without this package's netCDF
    bookkeeping group, i.e. never written by its xarray layer.

    Parameters
    ----------
    f : h5py.File
        The file, open for writing, inside the commit's mutation.
    versions : h5py.Group
        Its versions group.
    name : str
        The version just committed.
    prev_version : str
        Its parent.
    make_current : bool
        Whether the commit made ``name`` the current version.
    repair : bool, keyword-only
        Look for attachments to repair (:func:`repair_ancestors`). Only
        versioned-hdf5's commits leave any, and only on top of a version
        another library committed; the caller passes False when it knows no
        other library committed since this package last wrote the file (its
        version index is valid), which saves a walk of both versions' members.

    Raises
    ------
    ValueError
        The file is open read-only.
    """
    f = f.file
    if _STATE not in f:
        return
    if repair:
        repair_ancestors(versions, name)
        if prev_version != FIRST_VERSION:
            repair_ancestors(versions, prev_version)
    if make_current:
        update_root_view(f, name)
