"""``vhdf5 diff FILE A B``: what changed from version A to version B, as a table.

Chunks and points come from :func:`xarray_vhdf5._versions.diff.diff_versions`;
attributes are compared with :func:`xarray_vhdf5._versions.states.changed_attrs`,
as ``vhdf5 log`` does, so a dataset differs here exactly when the log lists it
as changed (with ``--mappings-only``; reading the chunks, one rewritten with
equal values counts as unchanged).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from .._versions.diff import DatasetDiff
from .._versions.registry import VersionKey, VersionRegistry
from .._versions.states import changed_attrs, compared_attrs
from ._log import format_table

__all__ = ["AttrChange", "attribute_changes", "format_diff"]

#: Longest attribute value shown (characters of its repr).
VALUE_WIDTH = 40


@dataclass(frozen=True)
class AttrChange:
    """One attribute of one dataset that differs from version A to version B.

    ``old`` / ``new`` are the values as h5py reads them; ``absent_a`` /
    ``absent_b`` tell an attribute added or removed from one valued None.
    """

    name: str
    old: Any
    new: Any
    absent_a: bool = False
    absent_b: bool = False


def _version_root(registry: VersionRegistry, key: VersionKey, group: str | None) -> h5py.Group | None:
    root = registry.group[registry.resolve(key)]
    if group in (None, "", "/"):
        return root
    path = group.strip("/")
    return root[path] if path in root and isinstance(root[path], h5py.Group) else None


def attribute_changes(
    f: h5py.File, a: VersionKey, b: VersionKey, paths: Iterable[str], group: str | None = None
) -> dict[str, list[AttrChange]]:
    """The attribute changes of the datasets at ``paths`` present in both versions.

    Parameters
    ----------
    f : h5py.File
        A versioned file.
    a, b : str, int, datetime or None
        The base and the compared version.
    paths : iterable of str
        Dataset paths relative to ``group`` (e.g. the keys of ``diff_versions``).
    group : str, optional
        The compared group (default the versions' roots).

    Returns
    -------
    dict of str to list of AttrChange
        Only datasets with at least one change; attributes as
        :func:`~xarray_vhdf5._versions.states.compared_attrs` selects them.
    """
    registry = VersionRegistry(f)
    root_a, root_b = _version_root(registry, a, group), _version_root(registry, b, group)
    out: dict[str, list[AttrChange]] = {}
    if root_a is None or root_b is None:
        return out
    for path in paths:
        if path not in root_a or path not in root_b:
            continue
        attrs_a, attrs_b = compared_attrs(root_a[path]), compared_attrs(root_b[path])
        names = changed_attrs(attrs_a, attrs_b)
        if names:
            out[path] = [
                AttrChange(n, attrs_a.get(n), attrs_b.get(n), n not in attrs_a, n not in attrs_b) for n in names
            ]
    return out


def brief(value: Any) -> str:
    """A short repr of an attribute value: text as ``'text'``, arrays as lists, cut at :data:`VALUE_WIDTH`."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif isinstance(value, np.ndarray):
        value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value.tolist()]
    elif isinstance(value, np.generic):
        value = value.item()
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
    text = repr(value)
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 3] + "..."


def _points_added(d: DatasetDiff) -> int:
    """Points of B that do not exist in A (all of B for an added or replaced dataset)."""
    if d.shape_b is None:
        return 0
    if d.shape_a is None or d.status == "replaced":
        return int(np.prod(d.shape_b))
    common = [min(x, y) for x, y in zip(d.shape_a, d.shape_b)]
    return int(np.prod(d.shape_b)) - int(np.prod(common))


def _chunks_compared(d: DatasetDiff, values: bool) -> int:
    """Chunks read (``values``), else chunks whose mapping differs (all of an added, removed or replaced one)."""
    if values or d.status in ("modified", "unchanged"):
        return len(d.candidates)
    return d.chunks_total


def format_diff(
    diffs: Iterable[DatasetDiff],
    a: str,
    b: str,
    attrs: Mapping[str, list[AttrChange]] | None = None,
    values: bool = True,
) -> str:
    """The per-dataset diff as an aligned text table (``vhdf5 diff``).

    Columns, counts in points (array elements) or chunks: status, both
    shapes, points added (in B only, B grew), chunks read/total (chunks whose
    mapping differs, read from both versions / chunks of B; ``mappings
    differ/total`` when ``values`` is False: nothing read, and every mapping
    of an added, removed or replaced dataset differs), chunks changed,
    points changed (points of both shapes whose value differs), points
    removed (in A only), attributes changed (names). The attribute changes
    (old -> new) and a count of the datasets that differ follow.

    Parameters
    ----------
    diffs : iterable of DatasetDiff
        :func:`xarray_vhdf5._versions.diff.diff_versions`' values.
    a, b : str
        The versions' names as the user gave them (headers).
    attrs : mapping, optional
        :func:`attribute_changes`; a dataset with one is modified.
    values : bool
        Whether the candidate chunks were read; False shows ``?`` for chunks
        and points changed.

    Returns
    -------
    str
        The table, attribute changes and summary, without a final newline.
    """
    attrs = attrs or {}

    def shape(s):
        return "-" if s is None else str(tuple(int(n) for n in s))

    def count(n):
        return "?" if n is None else str(n)

    header = (
        "dataset",
        "status",
        f"shape {a}",
        f"shape {b}",
        "points added",
        "chunks read/total" if values else "mappings differ/total",
        "chunks changed",
        "points changed",
        "points removed",
        "attributes changed",
    )
    rows = [header]
    changed = 0
    for d in diffs:
        status = "modified" if d.status == "unchanged" and d.path in attrs else d.status
        changed += status != "unchanged"
        added = _points_added(d)
        rows.append(
            (
                d.path,
                status,
                shape(d.shape_a),
                shape(d.shape_b),
                str(added),
                f"{_chunks_compared(d, values)}/{d.chunks_total}",
                count(d.chunks_changed),
                count(None if d.points_changed is None else d.points_changed - added),
                str(d.points_removed),
                ",".join(c.name for c in attrs.get(d.path, ())),
            )
        )
    lines = format_table(rows)
    if attrs:
        lines.append("attributes changed:")
        for path, changes in attrs.items():
            for c in changes:
                old = "(absent)" if c.absent_a else brief(c.old)
                new = "(absent)" if c.absent_b else brief(c.new)
                lines.append(f"  {path}: {c.name}: {old} -> {new}")
    if not values:
        lines.append("(--mappings-only: no chunk read; '?' = not counted)")
    lines.append(f"{changed} of {len(rows) - 1} datasets differ from {a} to {b}")
    return "\n".join(lines)
