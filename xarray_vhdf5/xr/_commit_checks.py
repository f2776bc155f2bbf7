"""What a commit from xarray checks before writing: an empty commit, labels going backwards.

- :func:`refuse_empty_commit` / :func:`staged_change`: a version identical to its
  parent is refused unless ``allow_empty=True`` (icechunk's rule);
- :func:`check_sorted_index`: a dimension coordinate sorted before an append
  stays sorted unless ``allow_unsorted=True``.
"""

from __future__ import annotations

import h5py
import numpy as np
import xarray as xr

from .._backend.names import (
    DIMENSIONS_ATTR,
    HIDDEN_GROUP_ATTRS,
    is_netcdf_dimension_only,
    visible_attrs,
)
from .._wrappers.group import InMemoryGroup
from ..errors import IncompatibleDataError, NothingToCommitError

__all__ = ["check_appended_indexes", "check_sorted_index", "refuse_empty_commit", "staged_change"]


def check_sorted_index(name: str, before, after, *, what: str) -> None:
    """Refuse a dimension coordinate that was sorted and is no longer (labels going backwards).

    Parameters
    ----------
    name : str
        The dimension.
    before : pandas.Index
        Its labels before (the parent version's, or the staged Dataset's).
    after : pandas.Index
        Its labels after the append or commit.
    what : str
        The call, for the message (``"append(dim='time')"``).

    Raises
    ------
    IncompatibleDataError
        ``before`` is strictly increasing (or decreasing) and ``after``
        is not, in the same direction. Pass ``allow_unsorted=True`` to the
        call to store such labels.
    """
    if len(after) < 2 or len(before) < 1:
        return
    try:
        if len(before) >= 2:
            increasing = bool(before.is_monotonic_increasing and before.is_unique)
            decreasing = bool(before.is_monotonic_decreasing and before.is_unique)
        else:
            increasing = decreasing = True
        if not (increasing or decreasing):
            return  # not sorted before: nothing to keep
        ok = after.is_unique and (
            (increasing and after.is_monotonic_increasing) or (decreasing and after.is_monotonic_decreasing)
        )
    except TypeError:  # labels that do not compare
        return
    if ok:
        return
    steps = [
        i
        for i in range(1, len(after))
        if not ((increasing and after[i] > after[i - 1]) or (decreasing and after[i] < after[i - 1]))
    ]
    i = steps[0] if steps else len(after) - 1
    order = "increasing" if increasing and len(before) >= 2 else "decreasing" if len(before) >= 2 else "sorted"
    raise IncompatibleDataError(
        f"{what}: the {name!r} labels were {order} and would no longer be: label {i} ({after[i]!r}) "
        f"comes after {after[i - 1]!r}; sort the appended Dataset first (other.sortby({name!r})) or pass "
        "allow_unsorted=True to store them in this order"
    )


def staged_change(root: InMemoryGroup, parent: h5py.Group | None) -> str | None:
    """The first difference between a staged version and its parent, or None if there is none.

    What an empty commit is for ``allow_empty`` (icechunk's rule): no
    dataset or group added or removed, no dataset whose points, shape, dtype
    or attributes differ, no group attribute changed. The commit message does
    not count; netCDF-4 dimension scales that are not variables are left
    out (they are rebuilt after each commit). Datasets carried from the
    parent, and staged ones without changes, are compared without reading
    their points; a dataset rewritten from values (``write_variable``) is
    compared with the parent's points, stopping at the first difference.
    A dataset streamed from dask counts as a change (not computed here).

    Parameters
    ----------
    root : InMemoryGroup
        The staged version's root.
    parent : h5py.Group or None
        The parent version's group (None: there is none, every commit is a change).

    Returns
    -------
    str or None
        What differs first (for messages), e.g. ``"'sst': points"``.
    """
    from .._versions.states import changed_attrs
    from .._wrappers.chunked import InMemoryDataset
    from .._wrappers.dataset import InMemoryArrayDataset
    from .._wrappers.group import UnopenedDataset

    if parent is None:
        return "the first version"
    groups, datasets = root.members_for_commit()
    for path, ds in datasets.items():  # the common case (an append, an edit) without a walk of the parent
        if isinstance(ds, InMemoryDataset) and ds.has_changes:
            return f"{path!r}: points"
    mine = {k: v for k, v in root.attrs.items() if k not in HIDDEN_GROUP_ATTRS}
    theirs = {k: v for k, v in parent.attrs.items() if k not in HIDDEN_GROUP_ATTRS}
    if changed_attrs(mine, theirs):
        return f"group attributes {changed_attrs(mine, theirs)}"
    their_groups, their_sets, scales = set(), {}, set()

    def visit(path: str, obj) -> None:
        if isinstance(obj, h5py.Group):
            their_groups.add(path)
        elif is_netcdf_dimension_only(obj):
            scales.add(path)
        else:
            their_sets[path] = obj

    parent.visititems(visit)
    if {g.name for g in groups} != their_groups:
        return "groups"
    # a phony scale carried from the parent is bookkeeping; a variable written in its place is a change
    datasets = {p: d for p, d in datasets.items() if not (p in scales and _carried(d, p))}
    if datasets.keys() != their_sets.keys():
        return f"datasets {sorted(set(datasets) ^ set(their_sets))}"
    pending = []
    for path, ds in datasets.items():
        old = their_sets[path]
        if isinstance(ds, UnopenedDataset):
            if ds.source_path.decode() != old.name:
                return f"{path!r}: moved"
            continue
        if changed_attrs(_compared(ds.attrs), _compared(old.attrs)):
            return f"{path!r}: attributes"
        if isinstance(ds, InMemoryDataset):
            if ds.has_changes or ds.origin_name != path or tuple(ds.shape) != tuple(old.shape):
                return f"{path!r}: points"
        elif isinstance(ds, InMemoryArrayDataset):
            if tuple(ds.shape) != tuple(old.shape) or np.dtype(ds.dtype) != old.dtype:
                return f"{path!r}: shape or dtype"
            pending.append((path, ds, old))
        else:
            return f"{path!r}: points"
    for path, ds, old in sorted(pending, key=lambda p: p[1].size):
        new, was = np.asarray(ds[()]), np.asarray(old[()])
        if new.dtype.kind == "O" or was.dtype.kind == "O":
            same = [_as_bytes(v) for v in new.ravel()] == [_as_bytes(v) for v in was.ravel()]
        else:
            same = new.tobytes() == was.astype(new.dtype, copy=False).tobytes()
        if not same:
            return f"{path!r}: points"
    return None


def _carried(ds, path: str) -> bool:
    from .._wrappers.chunked import InMemoryDataset
    from .._wrappers.group import UnopenedDataset

    if isinstance(ds, UnopenedDataset):
        return True
    return isinstance(ds, InMemoryDataset) and not ds.has_changes and ds.origin_name == path


def _compared(attrs) -> dict:
    out = visible_attrs(attrs)
    if DIMENSIONS_ATTR in attrs:
        out[DIMENSIONS_ATTR] = attrs[DIMENSIONS_ATTR]
    return out


def _as_bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def refuse_empty_commit(root: InMemoryGroup, f: h5py.File, parent: str | None, name: str) -> None:
    """Refuse to commit staged version ``name`` (``root``) if it equals version ``parent``.

    Raises
    ------
    NothingToCommitError
        :func:`staged_change` finds no difference (never for a first version).
    """
    from .._backend.layout import FIRST_VERSION, version_path

    if parent is None or parent == FIRST_VERSION:
        return
    if staged_change(root, f[version_path(parent)]) is None:
        raise NothingToCommitError(
            f"nothing to commit: version {name!r} would be identical to its parent {parent!r} (same "
            "datasets, points and attributes); pass allow_empty=True to commit it anyway"
        )


def check_appended_indexes(group: InMemoryGroup, dataset: xr.Dataset) -> None:
    """:func:`check_sorted_index` for each dimension coordinate of ``dataset`` longer than ``group``'s."""
    import pandas as pd

    for dim, index in dataset.indexes.items():
        name = str(dim)
        if dim not in dataset.dims or name not in group or isinstance(group[name], InMemoryGroup):
            continue
        stored = group[name]
        if len(stored.shape) != 1 or len(index) <= stored.shape[0] or np.dtype(stored.dtype).kind not in "biufMm":
            continue
        check_sorted_index(name, pd.Index(np.asarray(stored[()])), index, what=f"commit (appending along {name!r})")
