"""Merging branches and cherry-picking versions: a three-way merge committed on a branch.

``merge(vf, "qc", into="main")`` commits onto ``main``'s version a version that
holds the changes made on ``qc`` since the two branches' common ancestor (the
*merge base*), merged with those made on ``main`` since, as git merges: per
dataset, per chunk, per point, by the rules of :mod:`~xarray_vhdf5._versions.merge`
(written for rebasing; here *theirs* there is the target branch and *ours*
the source). ``cherry_pick(vf, "v7", onto="main")`` does the same with the
changes of one version (from its parent to it).

Names follow git's: in a merge into a branch, **ours** is the branch merged
into (the target) and **theirs** is what is merged (the source branch or the
picked version).

- A chunk changed on one side only is taken from it (not read: the merged
  version maps the same raw_data chunk); a chunk changed on both sides is read
  on all three and merged point by point; points changed on both sides to
  different values are conflicts.
- Conflicts raise :class:`~xarray_vhdf5.errors.ConflictError` listing them by
  dataset (``points``) and attribute, and nothing is committed, unless a
  resolver is given: ``resolve="ours"`` keeps the target's values,
  ``"theirs"`` takes the source's, and a callable
  ``resolve(path, points, base, ours, theirs) -> values`` chooses (points an
  int64 ``(n, ndim)`` array, the three value arrays of shape ``(n,)``, absent
  points as the dtype's fill value). Attribute conflicts take ``"ours"`` or
  ``"theirs"``; with a callable they raise.
- Shape changes: a dataset resized on one side takes that side's shape (an
  append on one branch merges like any change); resized on both to different
  shapes (e.g. appends on both branches along the same dimension) it is a
  conflict no resolver settles: rebase one branch's appends on the other first.
- A dataset added on one side is taken from it; deleted on one side and left
  alone on the other, it is deleted; deleted on one side and changed on the
  other, its changed points are conflicts (``"ours"`` / ``"theirs"`` settle it
  by keeping or dropping it).

The merged version's ``prev_version`` is the target's version; the source's
version is recorded in its group's ``_vhdf5_merge_parent`` attribute (a
cherry-pick records nothing), which :func:`merge_base` follows, so merging the
same branch again starts from the last merge.
"""

from __future__ import annotations

import collections
import dataclasses
import posixpath
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

from .._backend.chunkmap import version_dataset_layout
from .._backend.layout import FIRST_VERSION, VERSION_ATTRS
from .._backend.names import MERGE_PARENT_ATTR, MESSAGE_ATTR
from .._wrappers.attrs import RESERVED_ATTRS
from .._wrappers.group import InMemoryGroup
from ..errors import NothingToCommitError, VersionNotFoundError
from .merge import DELETED, changed_attr_names, conflict_error, mapped_array, merge_attrs, merge_points
from .refs import MAIN, branch_tip

__all__ = ["MergeReport", "cherry_pick", "merge", "merge_base"]

Resolver = str | Callable[[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray], Any] | None


@dataclasses.dataclass
class MergeReport:
    """What a merge or cherry-pick did.

    Attributes
    ----------
    version : str
        The new version (for a fast-forward: the source's version, which the
        target branch now points to).
    target : str
        The branch merged into.
    source, base : str
        The merged (or picked) version and the merge base.
    fast_forward : bool
        The target's version was the merge base: the branch was moved to the
        source, no version was made.
    datasets : dict of str to str
        Per dataset path the source changed: ``"ours"`` (the target's kept),
        ``"theirs"`` (the source's taken), ``"merged"``, ``"added"`` or ``"deleted"``.
    resolved : dict of str to int
        Per dataset path, the conflicting points the resolver settled.
    """

    version: str
    target: str
    source: str
    base: str
    fast_forward: bool = False
    datasets: dict[str, str] = dataclasses.field(default_factory=dict)
    resolved: dict[str, int] = dataclasses.field(default_factory=dict)


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _parents(versions: h5py.Group, name: str) -> list[str]:
    attrs = versions[name].attrs
    out = [_str(attrs.get("prev_version", FIRST_VERSION))]
    if MERGE_PARENT_ATTR in attrs:
        out.append(_str(attrs[MERGE_PARENT_ATTR]))
    return [p for p in out if p != FIRST_VERSION and p in versions]


def merge_base(versions: h5py.Group, a: str, b: str) -> str:
    """The nearest common ancestor of versions ``a`` and ``b`` (a version is its own ancestor).

    Ancestors follow ``prev_version`` and the merge parents of merge versions
    (``_vhdf5_merge_parent``); the nearest is the first ancestor of ``b``,
    breadth first, that is an ancestor of ``a``. ``__first_version__`` when
    they share none (an empty base: every dataset is new on both sides).
    """
    seen, queue = {a}, collections.deque([a])
    while queue:
        for p in _parents(versions, queue.popleft()):
            if p not in seen:
                seen.add(p)
                queue.append(p)
    visited, queue = {b}, collections.deque([b])
    while queue:
        name = queue.popleft()
        if name in seen:
            return name
        for p in _parents(versions, name):
            if p not in visited:
                visited.add(p)
                queue.append(p)
    return FIRST_VERSION


def _inventory(group: h5py.Group | None) -> dict[str, h5py.Dataset | h5py.Group]:
    out: dict[str, Any] = {}
    if group is not None:
        group.visititems(
            lambda name, obj: out.__setitem__(name, obj) if isinstance(obj, (h5py.Dataset, h5py.Group)) else None
        )
    return out


def _attrs(obj, skip=RESERVED_ATTRS) -> dict[str, Any]:
    return {k: v for k, v in obj.attrs.items() if k not in skip}


def _set_attrs(attrs, edits: dict[str, Any]) -> None:
    for key, value in edits.items():
        if value is DELETED:
            if key in attrs:
                del attrs[key]
        else:
            attrs[key] = value


def _same_dataset(a: h5py.Dataset, b: h5py.Dataset, ma, mb) -> bool:
    """Same shape, chunk mapping (``ma``, ``mb``: :func:`mapped_array` of each) and attributes:
    the source left the dataset as the base had it."""
    if a.shape != b.shape or a.dtype != b.dtype or version_dataset_layout(a) != version_dataset_layout(b):
        return False
    if not (np.array_equal(ma.slab_indices, mb.slab_indices) and np.array_equal(ma.slab_offsets, mb.slab_offsets)):
        return False
    return not changed_attr_names(_attrs(a), _attrs(b))  # netCDF-4 bookkeeping and references aside


def _values(arr, points: np.ndarray, dtype: np.dtype, fill) -> np.ndarray:
    out = np.full(len(points), fill if fill is not None else np.zeros((), dtype), dtype=dtype)
    if arr is None:
        return out
    for i, p in enumerate(points):
        if all(int(x) < n for x, n in zip(p, arr.shape)):
            out[i] = arr[tuple(int(x) for x in p)]
    return out


def _write(arr, points: np.ndarray, values: np.ndarray) -> None:
    for p, v in zip(points, values):
        if all(int(x) < n for x, n in zip(p, arr.shape)):
            arr[tuple(int(x) for x in p)] = v


class _Merger:
    """Fills ``into`` (staged from the target's version) with the source's changes since ``base``."""

    def __init__(
        self,
        versions,
        base: str,
        source: str,
        target: str,
        into: InMemoryGroup,
        source_root,
        resolve: Resolver,
        what: str,
    ):
        self.versions, self.into, self.source_root = versions, into, source_root
        self.resolve, self.what = resolve, what
        self.b_group = versions[base] if base != FIRST_VERSION else None
        self.s_group, self.t_group = versions[source], versions[target]
        self.b_items, self.s_items = _inventory(self.b_group), _inventory(self.s_group)
        self.t_items = _inventory(self.t_group)
        self.points: dict[str, np.ndarray] = {}
        self.attrs: dict[str, list[str]] = {}
        self.shapes: dict[str, tuple] = {}
        self.other: list[str] = []
        self.report: dict[str, str] = {}
        self.resolved: dict[str, int] = {}

    def run(self) -> None:
        def kind(items, path):
            obj = items.get(path)
            return None if obj is None else ("dataset" if isinstance(obj, h5py.Dataset) else "group")

        paths = sorted(set(self.b_items) | set(self.s_items), key=lambda p: (p.count("/"), p))
        for path in paths:
            kinds = {kind(self.b_items, path), kind(self.s_items, path), kind(self.t_items, path)} - {None}
            if len(kinds) > 1:
                self.other.append(f"{path!r}: a dataset on one side, a group on another")
            elif kinds == {"dataset"}:
                self._dataset(path)
            elif kinds == {"group"}:
                self._group(path)
        self._root_attrs()
        if self.points or self.attrs or self.shapes or self.other:
            raise conflict_error(self.what, self.points, attributes=self.attrs, shapes=self.shapes, other=self.other)

    # -- attributes ---------------------------------------------------------------------------
    def _merge_attrs(self, path: str, base, target, source, apply_to, always=()) -> None:
        edits, clash = merge_attrs(base, target, source, always_ours=always)
        if clash and self.resolve in ("ours", "theirs"):
            if self.resolve == "theirs":  # the source's value (or deletion) for each clash
                for key in clash:
                    edits[key] = (source or {}).get(key, DELETED)
            clash = []
        if clash:
            self.attrs[path] = clash
        else:
            _set_attrs(apply_to, edits)

    def _root_attrs(self) -> None:
        skip = VERSION_ATTRS | {MESSAGE_ATTR, MERGE_PARENT_ATTR}
        base = _attrs(self.b_group, skip) if self.b_group is not None else {}
        target = {k: v for k, v in self.into.attrs.items() if k not in skip}
        self._merge_attrs("/", base, target, _attrs(self.s_group, skip), self.into.attrs)

    def _group(self, path: str) -> None:
        b, s, t = self.b_items.get(path), self.s_items.get(path), self.t_items.get(path)
        if s is None:  # deleted by the source: deleted here if the target left it alone and empty
            if (
                t is not None
                and path in self.into
                and not changed_attr_names(_attrs(b), _attrs(t))
                and not any(isinstance(o, h5py.Dataset) for o in _inventory(t).values())
            ):
                del self.into[path]
            return
        target = self.into.require_group(path)
        self._merge_attrs(
            path,
            _attrs(b) if b is not None else None,
            dict(target.attrs) if t is not None else None,
            _attrs(s),
            target.attrs,
        )

    # -- datasets -----------------------------------------------------------------------------
    def _dataset(self, path: str) -> None:
        b, s, t = self.b_items.get(path), self.s_items.get(path), self.t_items.get(path)
        if b is None and t is None:  # added by the source only
            self._transplant(path)
            self.report[path] = "added"
            return
        any_side = t if t is not None else (s if s is not None else b)
        assert any_side is not None  # b or t is: added by the source only returned above
        raw = any_side.file[version_dataset_layout(any_side)[1]]
        b_arr = mapped_array(b, raw) if b is not None else None  # each side's mappings decoded once
        s_arr = mapped_array(s, raw) if s is not None else None
        if b_arr is not None and s_arr is not None and _same_dataset(b, s, b_arr, s_arr):
            return  # the source did not change it
        t_arr = self.into[path].staged_array if t is not None else None
        result = merge_points(b_arr, t_arr, s_arr, ours_shares_rows=True)
        if result.result == "conflict" and result.shape_conflict is None and self.resolve is not None:
            result = self._resolved(path, b_arr, t_arr, s_arr, result)
            if result is None:
                return
        if result.result == "conflict":
            if len(result.conflicts):
                self.points[path] = result.conflicts
            if result.shape_conflict is not None:
                self.shapes[path] = result.shape_conflict
            return
        self._apply(path, result, s_arr, t is not None)
        if result.result != "deleted" and t is not None and s is not None:
            target = self.into[path]
            self._merge_attrs(path, _attrs(b) if b is not None else None, dict(target.attrs), _attrs(s), target.attrs)

    def _apply(self, path: str, result, s_arr, in_target: bool) -> None:
        outcome = {"ours": "theirs", "theirs": "ours"}.get(result.result, result.result)  # git's names
        self.report[path] = outcome
        if result.result == "merged":
            self.into[path].staged_array = result.array
        elif result.result == "ours":  # merge_points' ours: the source's points
            if in_target:
                self.into[path].staged_array = s_arr
            else:
                self._transplant(path)
        elif result.result == "deleted" and path in self.into:
            del self.into[path]

    def _transplant(self, path: str) -> None:
        obj = self.source_root[path]
        parent_path, last = posixpath.split(path)
        group = self.into.require_group(parent_path) if parent_path else self.into
        obj.parent = group
        group._children[last] = obj

    def _resolved(self, path, b_arr, t_arr, s_arr, result):
        """The merge of ``path`` with its conflicting points settled by the resolver (None: dropped)."""
        pts = result.conflicts
        if t_arr is None or s_arr is None:  # deleted on one side, changed on the other
            self.resolved[path] = len(pts)
            keep_target = self.resolve == "ours" or callable(self.resolve)
            if callable(self.resolve):
                self.other.append(
                    f"{path!r}: deleted on one side and changed on the other (resolve with 'ours' or 'theirs')"
                )
                return None
            if t_arr is None:  # the target deleted it
                if not keep_target:
                    self._transplant(path)
                    self.report[path] = "theirs"
                return None
            if not keep_target:  # the source deleted it
                del self.into[path]
                self.report[path] = "deleted"
            return None
        dtype = t_arr.dtype
        fill = getattr(t_arr, "fill_value", None)
        ours = _values(t_arr, pts, dtype, fill)
        theirs = _values(s_arr, pts, dtype, fill)
        if self.resolve == "ours":
            chosen = ours
        elif self.resolve == "theirs":
            chosen = theirs
        elif callable(self.resolve):
            chosen = np.asarray(self.resolve(path, pts, _values(b_arr, pts, dtype, fill), ours, theirs), dtype=dtype)
            if chosen.shape != (len(pts),):
                raise ValueError(f"the resolver returned shape {chosen.shape} for {len(pts)} points of {path!r}")
        else:
            raise ValueError(f"resolve must be 'ours', 'theirs', a callable or None, got {self.resolve!r}")
        # The source first agrees with the target where they conflicted (so the merge keeps
        # the target's values there), then the chosen values are written into the merge.
        _write(s_arr, pts, ours)
        again = merge_points(b_arr, t_arr, s_arr, ours_shares_rows=True)
        if again.result == "conflict":
            return again
        if again.result == "merged":
            target = again.array
        elif again.result == "ours":
            target = s_arr
        else:  # the target's points, edited in place in the staged version
            target = t_arr
        _write(target, pts, chosen)
        self.resolved[path] = len(pts)
        return again


def _commit(vf, target: str, source: str, base: str, *, version, message, resolve, what, merge_parent):
    registry_versions = vf._registry.group
    source_root = vf._staged_root(source)
    try:
        with vf.stage_version(version, branch=target) as into:
            t_tip = branch_tip(vf.f, target)
            merger = _Merger(registry_versions, base, source, t_tip, into, source_root, resolve, what)
            merger.run()
            into.attrs[MESSAGE_ATTR] = message
            if merge_parent:
                into.attrs[MERGE_PARENT_ATTR] = source
            elif MERGE_PARENT_ATTR in into.attrs:
                del into.attrs[MERGE_PARENT_ATTR]
    finally:
        source_root._close()
    return merger


def _on_file(function):
    """Let ``function(vf, ...)`` take a path too: opened for writing (journaled), closed after."""
    import functools
    import os

    @functools.wraps(function)
    def wrapper(vf, *args, **kwargs):
        if isinstance(vf, (str, os.PathLike)):
            from .file import VersionedHDF5File
            from .mutation import open_file

            with open_file(vf, "r+") as f:
                return function(VersionedHDF5File(f), *args, **kwargs)
        return function(vf, *args, **kwargs)

    return wrapper


@_on_file
def merge(
    vf,
    source: str,
    into: str = MAIN,
    *,
    version: str | None = None,
    message: str | None = None,
    resolve: Resolver = None,
    fast_forward: bool = True,
) -> MergeReport:
    """Merge ``source`` (a branch, tag or version) into branch ``into``; see the module docstring.

    Parameters
    ----------
    vf : VersionedHDF5File, str or os.PathLike
        Open for writing, or the file's path (opened with ``open_file`` and closed).
    source : str
        What to merge: a branch, a tag or a version name.
    into : str
        The branch that receives the merge (default ``main``, the current version).
    version : str, optional
        Name of the merge version (default a UUID, as ``stage_version``).
    message : str, optional
        Its commit message (default ``"merge <source> into <into>"``).
    resolve : {"ours", "theirs"} or callable, optional
        How conflicts are settled (module docstring); default None: they raise.
    fast_forward : bool
        When ``into``'s version is an ancestor of the source, move the branch
        to it instead of making a version (git's fast-forward). Default True.

    Returns
    -------
    MergeReport

    Raises
    ------
    ConflictError
        Unresolved conflicts (``points`` and ``attributes`` list them); nothing committed.
    NothingToCommitError
        The source is already part of the branch (an ancestor of its version).
    RefNotFoundError, VersionNotFoundError
        No such branch or source.
    StaleVersionError
        The branch moved while the merge was made.
    """
    vf._check_open()
    f = vf.f
    target_version = branch_tip(f, into)
    source_version = _lookup(vf, source)
    base = merge_base(vf._registry.group, target_version, source_version)
    if base == source_version:
        raise NothingToCommitError(
            f"{source!r} ({source_version!r}) is already merged into branch {into!r} "
            f"(at {target_version!r}): nothing to merge"
        )
    if base == target_version and fast_forward:
        from .refs import reset_branch

        reset_branch(f, into, source_version)
        return MergeReport(source_version, into, source_version, base, fast_forward=True)
    what = f"merging {source!r} ({source_version!r}) into branch {into!r} ({target_version!r}, base {base!r})"
    merger = _commit(
        vf,
        into,
        source_version,
        base,
        version=version,
        message=message or f"merge {source} into {into}",
        resolve=resolve,
        what=what,
        merge_parent=True,
    )
    return MergeReport(
        branch_tip(f, into), into, source_version, base, datasets=merger.report, resolved=merger.resolved
    )


@_on_file
def cherry_pick(
    vf,
    picked: str,
    onto: str = MAIN,
    *,
    version: str | None = None,
    message: str | None = None,
    resolve: Resolver = None,
) -> MergeReport:
    """Commit on branch ``onto`` the changes version ``picked`` made to its parent (a three-way merge).

    Parameters and raises as :func:`merge` (``picked`` a version, tag or
    branch); the base is ``picked``'s parent, and no merge parent is recorded.
    """
    vf._check_open()
    f = vf.f
    picked_version = _lookup(vf, picked)
    base = vf._registry.parent(picked_version)
    target_version = branch_tip(f, onto)
    what = f"cherry-picking {picked!r} ({picked_version!r}, on {base!r}) onto branch {onto!r} ({target_version!r})"
    merger = _commit(
        vf,
        onto,
        picked_version,
        base,
        version=version,
        message=message or f"cherry-pick {picked} onto {onto}",
        resolve=resolve,
        what=what,
        merge_parent=False,
    )
    return MergeReport(
        branch_tip(f, onto), onto, picked_version, base, datasets=merger.report, resolved=merger.resolved
    )


def _lookup(vf, name: str) -> str:
    from .lookup import lookup_version

    if not isinstance(name, str):
        raise VersionNotFoundError(f"a branch, tag or version name is expected, got {name!r}")
    return lookup_version(vf._registry, name)
