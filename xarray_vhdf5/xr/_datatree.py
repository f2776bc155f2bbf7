"""A version's group tree as an ``xr.DataTree``: ``xr.open_datatree(path, engine="vhdf5")``.

Each group of a version (its root and every subgroup, at any depth) becomes one
node, opened lazily as :func:`~xarray_vhdf5.xr._reading.group_dataset` opens a
single group; all nodes share one ``CachingFileManager``, so the file is
opened once and the tree pickles for dask. Coordinates of a parent group are
inherited by its children, as ``DataTree`` does for every engine (a child
group stores only its own variables; see
:func:`~xarray_vhdf5.xr._writer.commit_datatree`).

Follows xarray's h5netcdf backend (``open_groups_as_dict`` then
``DataTree.from_dict``), with xarray's public API only.
"""

from __future__ import annotations

from collections.abc import Iterable

import h5py
import xarray as xr

from .._versions.registry import VersionKey
from ._engine import BRANCH_KEY
from ._reading import file_source, group_dataset, open_version_group, opened, opened_branch, source_path

__all__ = ["commit_staged_tree", "open_datatree", "open_groups_as_dict", "stage_datatree"]


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
    manager = file_source(filename_or_obj)
    source = source_path(filename_or_obj)
    try:
        with opened(manager, filename_or_obj) as f:
            name, root = open_version_group(f, version, group)
            groups = {
                path: group_dataset(manager, name, grp, source, drop_variables, decoders)
                for path, grp in _walk_groups(root)
            }
            branch = opened_branch(f, version, name)
            if branch is not None:  # dt.vhdf5.stage() then commits on that branch
                for ds in groups.values():
                    ds.encoding[BRANCH_KEY] = branch
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


def _tree_from(groups: dict[str, xr.Dataset]) -> xr.DataTree:
    """``DataTree.from_dict(groups)`` with each node's encoding and close callback from its Dataset."""
    tree = xr.DataTree.from_dict(groups)
    for path, ds in groups.items():
        tree[path].encoding = dict(ds.encoding)
        tree[path].set_close(ds.close)
    return tree


def stage_datatree(tree: xr.DataTree) -> xr.DataTree:
    """The editable, lazy copy of a tree opened with ``xr.open_datatree(path, engine="vhdf5")``.

    Every node is staged as ``ds.vhdf5.stage()`` stages a Dataset
    (:func:`~xarray_vhdf5.xr._stage.stage_dataset`): item assignments
    (``staged["child/sst"][0, :3] = x``) change only the chunks they touch, in
    memory, until :func:`commit_staged_tree` (``staged.vhdf5.commit()``)
    commits every group in one version.

    Parameters
    ----------
    tree : xarray.DataTree
        Opened with ``engine="vhdf5"`` from a path (every node's ``encoding``
        names the file, version and group).

    Returns
    -------
    xarray.DataTree
        Same nodes, variables, attributes and encodings.

    Raises
    ------
    ValueError
        A node was not opened with ``engine="vhdf5"`` from a path, or the
        nodes come from different files or versions.
    VersionNotFoundError
        The version was deleted since.
    """
    from ._stage import stage_dataset

    groups = {node.path: node.to_dataset(inherit=False) for node in tree.subtree}
    _same_origin(groups, "dt.vhdf5.stage()")
    staged: dict[str, xr.Dataset] = {}
    try:
        for path, ds in groups.items():
            staged[path] = stage_dataset(ds)
    except BaseException:
        for ds in staged.values():
            ds.close()
        raise
    return _tree_from(staged)


def _same_origin(groups: dict[str, xr.Dataset], what: str) -> tuple[str, str]:
    """The ``(source, version)`` every node was opened from; raises ValueError when they differ or lack one."""
    origins = {(ds.encoding.get("source"), ds.encoding.get("vhdf5_version")) for ds in groups.values()}
    source, version = next(iter(origins))
    if len(origins) != 1 or source is None or version is None:
        raise ValueError(
            f"{what} needs a DataTree opened with xr.open_datatree(path, engine='vhdf5') (every "
            f"node from one file and version); its nodes come from {sorted(map(str, origins))}"
        )
    return source, version


def commit_staged_tree(
    tree: xr.DataTree,
    version: str | None = None,
    *,
    message: str | None = None,
    timestamp=None,
    force: bool = False,
    rebase: bool = False,
    make_current: bool = True,
    progress: bool | None = None,
    max_bytes: int | None = None,
    allow_empty: bool = False,
) -> str:
    """Commit a tree from :func:`stage_datatree` as one new version: each group as ``commit_staged`` commits one.

    Only the changed chunks of staged variables are written; other variables
    are deduplicated by hash. Groups of the version outside the tree (it was
    opened below its root) are carried unchanged.

    Parameters
    ----------
    tree : xarray.DataTree
        From :func:`stage_datatree` (nodes may have been edited, added to or assigned).
    version, message, timestamp, force, make_current, progress, max_bytes, allow_empty
        As :func:`~xarray_vhdf5.xr._stage.commit_staged`.
    rebase : bool
        If another version was committed since the tree was staged, merge the
        tree's changes, every group's, with the changes from the staged-from
        version to the file's current version and commit onto the current
        version, under the file's write lock, as
        :func:`~xarray_vhdf5.xr._stage.commit_staged` does for one Dataset
        (rules in :mod:`~xarray_vhdf5._versions.merge`). Not with ``force``,
        nor for a tree staged from a branch.

    Returns
    -------
    str
        The new version's name; every node is rebased on it (its encoding
        names it, its staged arrays have no changes left). After a merge
        every node is staged again from the new version, in place, so the tree
        shows the other writer's changes too (groups only the other side
        added appear when the file is opened again).

    Raises
    ------
    ValueError
        The tree does not come from :func:`stage_datatree`, or its nodes from
        different files or versions.
    StaleVersionError
        Another version was committed since the tree was staged (on its
        branch, or the current version) and neither ``force`` nor ``rebase``
        is given; nothing is written.
    ConflictError
        ``rebase=True`` and both sides changed the same points (or
        attributes) to different values; nothing is written and the tree is
        unchanged.
    UnsupportedError
        ``rebase=True`` for a tree staged from a branch (merge the branches).
    NothingToCommitError
        Nothing changed and ``allow_empty`` is False; nothing is written.
    VersionExistsError, IncompatibleDataError, FileBusyError
        As :func:`~xarray_vhdf5.xr._stage.commit_staged`; nothing is written.
    """
    from ._stage import HEAD_KEY, _rebase, _restage, commit_staged_groups, is_staged
    from ._streaming import DEFAULT_MAX_BYTES

    groups = {node.path: node.to_dataset(inherit=False) for node in tree.subtree}
    source, parent = _same_origin(groups, "dt.vhdf5.commit() without path=")
    heads = {ds.encoding.get(HEAD_KEY) for ds in groups.values()}
    if not all(is_staged(ds) for ds in groups.values()) or len(heads) != 1 or None in heads:
        raise ValueError("commit() without path= needs a DataTree from dt.vhdf5.stage(); stage the opened tree first")
    name, merged, plans, make_current = commit_staged_groups(
        list(groups.values()),
        source=source,
        parent=parent,
        head=str(heads.pop()),
        branch=groups["/"].encoding.get(BRANCH_KEY),
        what="tree",
        version=version,
        message=message,
        timestamp=timestamp,
        force=force,
        rebase=rebase,
        make_current=make_current,
        progress=progress,
        max_bytes=DEFAULT_MAX_BYTES if max_bytes is None else max_bytes,
        allow_empty=allow_empty,
    )
    for k, (path, ds) in enumerate(groups.items()):
        if merged:  # the new version holds the other writer's changes too: stage it again
            _restage(ds, name)
            tree[path].dataset = ds
        else:
            _rebase(ds, plans[k], name, make_current)
        tree[path].encoding = dict(ds.encoding)
    return name
