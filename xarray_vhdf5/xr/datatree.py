"""A version's group tree as an ``xr.DataTree``: ``xr.open_datatree(path, engine="vhdf5")``.

Each group of a version (its root and every subgroup, at any depth) becomes one
node, opened lazily as :func:`~xarray_vhdf5.xr.engine.group_dataset` opens a
single group; all nodes share one ``CachingFileManager``, so the file is
opened once and the tree pickles for dask. Coordinates of a parent group are
inherited by its children, as ``DataTree`` does for every engine (a child
group stores only its own variables; see
:func:`~xarray_vhdf5.xr.writer.commit_datatree`).

Follows xarray's h5netcdf backend (``open_groups_as_dict`` then
``DataTree.from_dict``), with xarray's public API only.
"""

from __future__ import annotations

from collections.abc import Iterable

import h5py
import xarray as xr

from ..versions.registry import VersionKey
from .engine import _open_file, _source, group_dataset, open_version_group, opened

__all__ = ["open_datatree", "open_groups_as_dict"]


def _walk_groups(root: h5py.Group, path: str = "/") -> list[tuple[str, h5py.Group]]:
    """``[("/", root), ("/a", ...), ("/a/b", ...)]``: depth first, in creation order."""
    found = [(path, root)]
    for key, item in root.items():
        if isinstance(item, h5py.Group):
            found += _walk_groups(item, f"{path.rstrip('/')}/{key}")
    return found


def open_groups_as_dict(
    filename_or_obj,
    *,
    version: VersionKey = None,
    group: str | None = None,
    drop_variables: str | Iterable[str] | None = None,
    **decoders,
) -> dict[str, xr.Dataset]:
    """Open every group of ``version`` below ``group`` as lazy Datasets.

    Parameters
    ----------
    filename_or_obj : str, os.PathLike or binary file object
        The versioned HDF5 file.
    version : str, int, datetime, numpy.datetime64 or None
        The version (see ``xr.open_dataset(..., engine="vhdf5")``); default the current one.
    group : str, optional
        The group that becomes the root ``"/"`` (default the version's root).
    drop_variables : str or iterable of str, optional
        Variables not to open, in every group.
    **decoders
        ``mask_and_scale``, ``decode_times``, ... as for every xarray engine.

    Returns
    -------
    dict of str to xarray.Dataset
        ``{"/": root, "/child": ..., "/child/grandchild": ...}``, parents first;
        each Dataset holds only the variables of its own group. Closing any of
        them closes the shared file handle (it reopens on the next read).

    Raises
    ------
    NotVersionedError, NotHDF5Error, VersionNotFoundError, KeyError
        As ``xr.open_dataset(..., engine="vhdf5")``.
    """
    manager = _open_file(filename_or_obj)
    source = _source(filename_or_obj)
    try:
        with opened(manager, filename_or_obj) as f:
            name, root = open_version_group(f, version, group)
            groups = {
                path: group_dataset(manager, name, grp, source, drop_variables, decoders)
                for path, grp in _walk_groups(root)
            }
    except BaseException:
        manager.close()
        raise
    for ds in groups.values():
        ds.set_close(manager.close)
    return groups


def open_datatree(
    filename_or_obj,
    *,
    version: VersionKey = None,
    group: str | None = None,
    drop_variables: str | Iterable[str] | None = None,
    **decoders,
) -> xr.DataTree:
    """Open ``version``'s group tree as a lazy ``xr.DataTree``.

    Parameters
    ----------
    filename_or_obj, version, group, drop_variables, **decoders
        See :func:`open_groups_as_dict`.

    Returns
    -------
    xarray.DataTree
        One node per group; ``tree.encoding`` and every node's Dataset hold
        ``source``, ``vhdf5_version`` and ``vhdf5_group``.

    Raises
    ------
    NotVersionedError, NotHDF5Error, VersionNotFoundError, KeyError
        As ``xr.open_dataset(..., engine="vhdf5")``.
    ValueError
        The groups do not form a valid DataTree (a child's variables do not
        align with the coordinates it inherits).
    """
    groups = open_groups_as_dict(
        filename_or_obj, version=version, group=group, drop_variables=drop_variables, **decoders
    )
    try:
        tree = xr.DataTree.from_dict(groups)
    except BaseException:
        for ds in groups.values():
            ds.close()
        raise
    for path, ds in groups.items():
        tree[path].set_close(ds.close)
        tree[path].encoding = dict(ds.encoding)
    return tree
