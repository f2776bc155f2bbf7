"""Rebase a staged version onto another version: its changes merged with those committed since.

A version staged from the *base* (``stage_version(prev_version=base)``, or
``ds.vhdf5.stage()``) holds *ours*, a tree of changes. When another writer
committed *theirs* on the same base meanwhile, :func:`rebase_staged` fills a
tree staged from theirs with the three-way merge of both sides
(:mod:`~xarray_vhdf5._versions.merge`: the rules), dataset by dataset and
attribute by attribute; committing that tree gives a version whose parent is
theirs, with both writers' changes. Where both changed the same points (or
attributes) differently, it raises
:class:`~xarray_vhdf5.errors.ConflictError` listing them all, and the caller
commits nothing.

What each dataset path costs:

- untouched by ours (never opened in the staged tree): nothing; theirs is
  carried as it is;
- opened by ours, points unchanged (attributes perhaps): its attributes;
- points changed by ours: the chunk maps of base and theirs, then
  :func:`~xarray_vhdf5._versions.merge.merge_points` (a copy of each chunk only
  ours changed, three reads per chunk both changed);
- deleted by ours: the chunk maps (and the chunks theirs changed, to list
  conflicts).

Groups: a group either side added is kept; a group ours deleted goes, unless
theirs changed its attributes (a conflict) or added something inside it (kept,
with what theirs added: as git keeps a file added in a directory the other
side removed). A path that is a dataset on one side and a group on the other
is a conflict. The root group's ``_vhdf5_message`` (the commit message) is
ours, never merged.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

import h5py
import numpy as np

from .._backend.chunkmap import version_dataset_layout
from .._backend.hashtable import hash_table_id, table_extends, table_state
from .._backend.layout import VERSION_ATTRS
from .._wrappers.attrs import RESERVED_ATTRS
from .._wrappers.chunked import ChunkedStagedDataset, InMemoryDataset, is_over
from .._wrappers.dataset import StagedDatasetBase
from .._wrappers.group import InMemoryGroup, UnopenedDataset
from ..errors import StaleVersionError
from .merge import (
    DELETED,
    changed_attr_names,
    conflict_error,
    mapped_array,
    merge_attrs,
    merge_points,
    same_attr_value,
)

__all__ = ["MESSAGE_ATTR", "RebaseReport", "rebase_staged"]

#: The root attribute holding a version's commit message (``backend.names.MESSAGE_ATTR``): ours, not merged.
MESSAGE_ATTR = "_vhdf5_message"


@dataclasses.dataclass
class RebaseReport:
    """What :func:`rebase_staged` did.

    Attributes
    ----------
    base, theirs : str
        The versions merged: ours was staged from ``base``; the result is staged on ``theirs``.
    datasets : dict of str to str
        For each dataset path ours touched or deleted: ``"theirs"`` (theirs'
        points kept), ``"ours"`` (ours taken: theirs left it as in the base),
        ``"merged"`` (chunks of both), ``"added"`` (by ours only), ``"deleted"``.
    chunks : dict of str to (int, int, int)
        For each merged path: chunks changed by theirs only (mapped, not
        read), by ours only (copied from ours), by both (read and merged point
        by point).
    """

    base: str
    theirs: str
    datasets: dict[str, str] = dataclasses.field(default_factory=dict)
    chunks: dict[str, tuple[int, int, int]] = dataclasses.field(default_factory=dict)


def _inventory(group: h5py.Group) -> dict[str, h5py.Dataset | h5py.Group]:
    """Every dataset and group below ``group``, by path relative to it."""
    out: dict[str, Any] = {}

    def visit(name, obj):
        if isinstance(obj, (h5py.Dataset, h5py.Group)):
            out[name] = obj

    group.visititems(visit)
    return out


def _h5_attrs(obj, skip: frozenset) -> dict[str, Any]:
    return {k: v for k, v in obj.attrs.items() if k not in skip}


def _set_attrs(attrs, edits: Mapping[str, Any]) -> None:
    """Apply :func:`~xarray_vhdf5._versions.merge.merge_attrs` edits to a staged object's attributes."""
    for key, value in edits.items():
        if value is DELETED:
            if key in attrs:
                del attrs[key]
        elif key not in attrs or not same_attr_value(attrs[key], value):
            attrs[key] = value


def _match_attrs(attrs, merged: Mapping[str, Any]) -> None:
    """Make a staged object's attributes exactly ``merged`` (values already equal are left alone)."""
    for key in [k for k in attrs if k not in merged]:
        del attrs[key]
    _set_attrs(attrs, merged)


def _transplant(into: InMemoryGroup, path: str, obj: StagedDatasetBase) -> None:
    """Put the staged dataset ``obj`` (of another staged tree) at ``path`` of ``into``."""
    parent_path, last = posixpath.split(path)
    group = into.require_group(parent_path) if parent_path else into
    obj.parent = group
    group._children[last] = obj


def _check_not_rewritten(path: str, ds: InMemoryDataset) -> None:
    """Refuse ours' dataset if its raw_data rows moved since it was staged (deleting versions, modify_metadata)."""
    why = ds.rewritten()
    if why is None and ds.base_table_state is not None:
        table = hash_table_id(ds.raw_data)
        now = table_state(table)
        if now != ds.base_table_state and not table_extends(table, ds.base_table_state, now):
            why = "its raw_data was rewritten (its hash table changed)"
    if why is not None:
        raise StaleVersionError(
            f"{path!r}: {why} while this version was staged (deleting versions or modify_metadata); "
            "its staged rows cannot be merged: stage the version again"
        )


def _ours_points(path: str, o: StagedDatasetBase, from_base: bool) -> tuple[Any, bool, bool]:
    """``(points, shares_rows, changed)`` of ours' dataset (see ``merge_points``'s ``ours``)."""
    if from_base:
        assert isinstance(o, InMemoryDataset)  # the caller's from_base: a dataset of the base, staged
        if not o.has_changes:
            return None, True, False
        return o.staged_array, True, True
    if isinstance(o, ChunkedStagedDataset):
        arr = o.staged_array
        shares = not arr.n_base_slabs or (isinstance(o, InMemoryDataset) and o.origin_name == path)
        return arr, shares, True
    return o, False, True


def rebase_staged(
    versions: h5py.Group,
    base: str,
    theirs: str,
    ours: InMemoryGroup,
    into: InMemoryGroup,
    *,
    always_ours: Iterable[str] = (MESSAGE_ATTR,),
) -> RebaseReport:
    """Fill ``into`` (staged from ``theirs``) with ``ours`` (staged from ``base``) merged onto it.

    Parameters
    ----------
    versions : h5py.Group
        The file's versions group (``_version_data/versions``).
    base : str
        The version ``ours`` was staged from.
    theirs : str
        The version ``into`` was staged from, committed since ``base`` (usually
        the file's current version).
    ours : InMemoryGroup
        The root of the staged version holding our changes; its datasets may be
        moved into ``into`` (it is discarded afterwards).
    into : InMemoryGroup
        The root of a version staged from ``theirs``, not edited yet: it receives
        the merge, to be committed with ``theirs`` as parent.
    always_ours : iterable of str
        Root-group attributes taken from ``ours`` without merging (default:
        the commit message).

    Returns
    -------
    RebaseReport

    Raises
    ------
    ConflictError
        Both sides changed the same points, or attributes, differently (also: a
        dataset deleted on one side and changed on the other; a dataset both
        resized to different shapes; a dataset on one side where the other has
        a group). ``points`` maps each dataset path to its conflicting points;
        ``into`` is then partly filled and must be discarded.
    StaleVersionError
        A dataset ours staged had its raw_data rewritten since (deleting
        versions, ``modify_metadata``).
    """
    b_group, t_group = versions[base], versions[theirs]
    b_items = _inventory(b_group)
    groups_o, datasets_o = ours.members_for_commit()
    report = RebaseReport(base, theirs)
    points: dict[str, np.ndarray] = {}
    attr_conflicts: dict[str, list[str]] = {}
    shapes: dict[str, tuple] = {}
    other: list[str] = []

    touched = [p for p, d in datasets_o.items() if not isinstance(d, UnopenedDataset)]
    deleted = [p for p, obj in b_items.items() if isinstance(obj, h5py.Dataset) and p not in datasets_o]
    for path in touched + deleted:
        b = b_items.get(path)
        b = b if isinstance(b, h5py.Dataset) else None
        t_obj = t_group.get(path)
        o = datasets_o.get(path)
        if t_obj is not None and not isinstance(t_obj, h5py.Dataset):
            other.append(f"{path!r}: a dataset in ours, a group in theirs")
            continue
        t = t_obj
        from_base = False
        if (
            isinstance(o, InMemoryDataset)
            and b is not None
            and o.origin_name == path
            and o.source_path.decode() == b.name
        ):
            from_base = True
            _check_not_rewritten(path, o)
        outcome = _merge_dataset(path, b, t, o, from_base, into, report, points, attr_conflicts, shapes)
        if outcome is not None:
            report.datasets[path] = outcome

    _merge_groups(b_group, b_items, t_group, groups_o, into, attr_conflicts, other)
    # The root group's attributes (the always-ours ones are ours even when ours changed none).
    always = frozenset(always_ours)
    if ours.attrs.changed:
        edits, clash = merge_attrs(
            _h5_attrs(b_group, VERSION_ATTRS), dict(into.attrs), dict(ours.attrs), always_ours=always
        )
        if clash:
            attr_conflicts["/"] = clash
        else:
            _set_attrs(into.attrs, edits)
    else:
        _set_attrs(into.attrs, {k: ours.attrs[k] if k in ours.attrs else DELETED for k in always})

    if points or attr_conflicts or shapes or other:
        raise conflict_error(
            f"rebasing onto version {theirs!r} the changes staged from {base!r}",
            points,
            attributes=attr_conflicts,
            shapes=shapes,
            other=other,
        )
    return report


def _merge_dataset(path, b, t, o, from_base, into, report, points, attr_conflicts, shapes) -> str | None:
    """One dataset path of :func:`rebase_staged`; returns its outcome (None when in conflict).

    ``b`` / ``t``: the base's and theirs' ``h5py.Dataset`` at ``path`` (None:
    absent); ``o``: ours' staged dataset (None: deleted by ours); ``from_base``:
    ``o`` is the base's dataset at ``path``, staged (its points may be edited).
    """
    if b is None and t is None:  # added by ours only
        _transplant(into, path, o)
        return "added"
    b_attrs = None if b is None else _h5_attrs(b, RESERVED_ATTRS)
    o_attrs = None if o is None or (from_base and not o.attrs.changed) else dict(o.attrs)
    if o is None:
        ours_pts, shares, changed = None, False, True
    else:
        ours_pts, shares, changed = _ours_points(path, o, from_base)
    target = into[path] if t is not None else None
    t_attrs = dict(target.attrs) if target is not None else None

    result = None
    if changed and not (o is None and t is None):
        t_arr = target.staged_array if target is not None else None
        raw = target.raw_data if target is not None else b.file[version_dataset_layout(b)[1]]
        b_arr = mapped_array(b, raw) if b is not None else None
        result = merge_points(b_arr, t_arr, ours_pts, ours_shares_rows=shares)
        report.chunks[path] = (result.theirs_chunks, result.ours_chunks, result.both_chunks)
        if result.result == "conflict":
            if len(result.conflicts):
                points[path] = result.conflicts
            if result.shape_conflict is not None:
                shapes[path] = result.shape_conflict
    conflicted = result is not None and result.result == "conflict"

    if o is None or t is None:  # deleted on one side: any attribute change of the other conflicts
        assert b_attrs is not None  # added on one side only returned above: the base has it
        if o is None:
            clash = [] if t_attrs is None else changed_attr_names(b_attrs, t_attrs)
        else:
            clash = [] if o_attrs is None else changed_attr_names(b_attrs, o_attrs)
        if clash:
            attr_conflicts[path] = clash
        if clash or conflicted:
            return None
        if o is None and t is not None:
            del into[path]  # theirs left it as in the base
        return "deleted"

    assert target is not None and t_attrs is not None  # in ours and in theirs from here on
    edits, clash = ({}, []) if o_attrs is None else merge_attrs(b_attrs, t_attrs, o_attrs)
    if clash:
        attr_conflicts[path] = clash
    if clash or conflicted:
        return None
    outcome = "theirs" if result is None else result.result
    if outcome == "merged":
        assert result is not None and result.array is not None  # "merged" always comes with the array
        target.staged_array = result.array
    elif outcome == "ours":
        if from_base or (shares and isinstance(o, InMemoryDataset) and is_over(o.staged_array, target.raw_data)):
            # ours' base state is the base's chunk map, which theirs kept: committed on theirs as is
            target.staged_array = ours_pts
        else:
            merged = dict(t_attrs)
            _set_attrs_dict(merged, edits)
            _transplant(into, path, o)
            _match_attrs(o.attrs, merged)
            return outcome
    _set_attrs(target.attrs, edits)
    return outcome


def _set_attrs_dict(attrs: dict, edits: Mapping[str, Any]) -> None:
    for key, value in edits.items():
        if value is DELETED:
            attrs.pop(key, None)
        else:
            attrs[key] = value


def _merge_groups(b_group, b_items, t_group, groups_o, into, attr_conflicts, other) -> None:
    """Groups ours added, deleted or whose attributes it changed (root excepted)."""
    o_paths = {g.name: g for g in groups_o}
    for path, g in o_paths.items():
        b = b_items.get(path)
        t = t_group.get(path)
        if t is not None and not isinstance(t, h5py.Group):
            other.append(f"{path!r}: a group in ours, a dataset in theirs")
            continue
        if isinstance(b, h5py.Dataset):
            continue  # ours replaced a dataset by a group: the dataset's deletion was merged
        if b is None or not g.attrs.changed:
            if b is None:  # added by ours (perhaps by theirs too)
                target = into.require_group(path)
                edits, clash = merge_attrs(None, dict(target.attrs) if t is not None else None, dict(g.attrs))
                if clash:
                    attr_conflicts[path] = clash
                else:
                    _set_attrs(target.attrs, edits)
            continue
        if t is None:  # theirs deleted the group, ours changed its attributes
            if changed_attr_names(_h5_attrs(b, frozenset()), dict(g.attrs)):
                attr_conflicts[path] = ["(the group was deleted by theirs)"]
            continue
        target = into[path]
        edits, clash = merge_attrs(_h5_attrs(b, frozenset()), dict(target.attrs), dict(g.attrs))
        if clash:
            attr_conflicts[path] = clash
        else:
            _set_attrs(target.attrs, edits)
    # Groups ours deleted, deepest first.
    gone = sorted(
        (p for p, obj in b_items.items() if isinstance(obj, h5py.Group) and p not in o_paths),
        key=lambda p: -p.count("/"),
    )
    for path in gone:
        t = t_group.get(path)
        if not isinstance(t, h5py.Group) or path not in into:
            continue
        if changed_attr_names(_h5_attrs(b_items[path], frozenset()), _h5_attrs(t, frozenset())):
            attr_conflicts[path] = ["(the group was deleted by ours, its attributes changed by theirs)"]
            continue
        if _holds_datasets(into[path]):
            continue  # theirs added something inside: kept
        del into[path]


def _holds_datasets(group: InMemoryGroup) -> bool:
    found = []
    group.visititems(lambda _p, obj: found.append(1) if not isinstance(obj, InMemoryGroup) else None)
    return bool(found)
