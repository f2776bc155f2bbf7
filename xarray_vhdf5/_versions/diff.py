"""What changed between two versions, chunk by chunk, reading only chunks that differ.

Two versions of a dataset are virtual datasets mapping chunks to rows of the
same raw_data. A chunk whose mapping is identical in both (same raw_data rows,
or no mapping: all fill value) holds the same points in both, so it is
unchanged without reading anything. Only the other chunks, the *candidates*,
are read from both versions and compared point by point (a chunk can be
remapped and still hold equal values, e.g. ``-0.0`` vs ``0.0`` or another NaN
payload: these count as unchanged values).

Comparison is positional: point ``i`` of version A against point ``i`` of
version B, over B's chunk grid. Where B is larger than A (appended data),
B's extra points count as changed; where A is larger, A's extra points are
counted in ``points_removed``.

Used by ``vhdf5 diff FILE A B`` and assembled into an xarray Dataset by
:mod:`xarray_vhdf5.xr._diff`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import h5py
import numpy as np

from .._backend.chunkmap import build_slab_indices_and_offsets, version_dataset_layout
from .._backend.chunks import chunk_grid_shape, chunk_slices
from .registry import VersionKey, VersionRegistry

__all__ = [
    "ChunkChange",
    "DatasetDiff",
    "compare_datasets",
    "diff_versions",
    "equal_points",
    "finish",
    "iter_candidates",
    "iter_chunk_changes",
]

#: Statuses of a dataset between versions A and B.
STATUSES = ("added", "removed", "modified", "unchanged", "replaced")


@dataclass
class ChunkChange:
    """One chunk of B's grid with at least one changed point.

    Attributes
    ----------
    index : tuple of int
        The chunk's index in B's chunk grid.
    region : tuple of slice
        Its region in B, in points (edge-trimmed).
    a : numpy.ndarray or None
        A's stored points in ``region`` clipped to A's shape (None: the chunk
        lies entirely beyond A's shape). Raw stored values: no CF decoding.
    b : numpy.ndarray
        B's stored points in ``region``.
    changed : numpy.ndarray of bool
        Shape of ``region``: True where the point differs or does not exist in A.
    """

    index: tuple[int, ...]
    region: tuple[slice, ...]
    a: np.ndarray | None
    b: np.ndarray
    changed: np.ndarray

    @property
    def common(self) -> tuple[slice, ...] | None:
        """Part of ``region`` that exists in A, relative to the chunk (None: nothing)."""
        if self.a is None:
            return None
        return tuple(slice(0, n) for n in self.a.shape)


@dataclass
class DatasetDiff:
    """How one dataset differs between versions A and B.

    Attributes
    ----------
    path : str
        Path of the dataset inside the compared group.
    status : str
        ``"added"`` (only in B), ``"removed"`` (only in A), ``"replaced"``
        (another number of axes), ``"modified"`` or ``"unchanged"``.
    shape_a, shape_b : tuple of int or None
        Shapes in points (None where absent).
    chunks : tuple of int
        B's chunk shape (A's for a removed dataset), in points.
    chunks_total : int
        Chunks of B's grid (A's for a removed dataset).
    candidates : list of tuple of int
        Chunks of B's grid whose mapping differs from A's, or that extend
        beyond A's shape: the only ones read.
    points_changed : int or None
        Points of B that differ from A or do not exist in A; None until the
        candidates were read (:func:`diff_versions` with ``values=True``).
    points_removed : int
        Points of A beyond B's shape.
    chunks_changed : int or None
        Candidates with at least one changed point (None until read).
    """

    path: str
    status: str
    shape_a: tuple[int, ...] | None
    shape_b: tuple[int, ...] | None
    chunks: tuple[int, ...]
    chunks_total: int = 0
    candidates: list[tuple[int, ...]] = field(default_factory=list)
    points_changed: int | None = None
    points_removed: int = 0
    chunks_changed: int | None = None


def equal_points(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pointwise "same value" of two arrays of one shape: ``==``, and NaN equals NaN.

    Returns
    -------
    numpy.ndarray of bool
        Same shape as ``a``.
    """
    eq = np.asarray(a == b)
    if a.dtype.kind in "fc" and b.dtype.kind in "fc":
        eq = eq | (np.isnan(a) & np.isnan(b))
    if eq.shape != a.shape:  # object comparisons that did not broadcast elementwise
        eq = np.array([x == y for x, y in zip(a.flat, b.flat)], dtype=bool).reshape(a.shape)
    return eq


def _chunks_of(dset: h5py.Dataset) -> tuple[int, ...]:
    return version_dataset_layout(dset)[0]


def _raw_name(dset: h5py.Dataset) -> str:
    return version_dataset_layout(dset)[1]


def _mapping(dset: h5py.Dataset) -> tuple[np.ndarray, np.ndarray]:
    return build_slab_indices_and_offsets(dset, dset.shape, *version_dataset_layout(dset))


def compare_datasets(
    path: str, a: h5py.Dataset | None, b: h5py.Dataset | None, *, every_chunk: bool = False
) -> DatasetDiff:
    """Compare two versions of a dataset by their mappings alone (no chunk data read).

    Parameters
    ----------
    path : str
        The dataset's path (for the result).
    a, b : h5py.Dataset or None
        The dataset in versions A and B (virtual datasets; None where absent).
    every_chunk : bool
        Make every chunk of B a candidate (e.g. when attributes that change
        the decoded values, such as ``scale_factor``, differ).

    Returns
    -------
    DatasetDiff
        ``points_changed`` and ``chunks_changed`` are None for a modified
        dataset: :func:`iter_chunk_changes` reads the candidates.
    """
    if a is None:
        if b is None:
            raise ValueError(f"{path!r}: nothing to compare")
        chunks = _chunks_of(b)
        grid = chunk_grid_shape(b.shape, chunks)
        return DatasetDiff(
            path,
            "added",
            None,
            b.shape,
            chunks,
            math.prod(grid),
            points_changed=math.prod(b.shape),
            chunks_changed=math.prod(grid),
        )
    if b is None:
        chunks = _chunks_of(a)
        grid = chunk_grid_shape(a.shape, chunks)
        return DatasetDiff(
            path,
            "removed",
            a.shape,
            None,
            chunks,
            math.prod(grid),
            points_changed=0,
            points_removed=math.prod(a.shape),
            chunks_changed=0,
        )
    if a.ndim != b.ndim:
        chunks = _chunks_of(b)
        grid = chunk_grid_shape(b.shape, chunks)
        return DatasetDiff(
            path,
            "replaced",
            a.shape,
            b.shape,
            chunks,
            math.prod(grid),
            points_changed=math.prod(b.shape),
            points_removed=math.prod(a.shape),
            chunks_changed=math.prod(grid),
        )
    chunks = _chunks_of(b)
    grid_b = chunk_grid_shape(b.shape, chunks)
    common = tuple(min(x, y) for x, y in zip(a.shape, b.shape))
    removed = math.prod(a.shape) - math.prod(common)
    same = np.zeros(grid_b, dtype=bool)
    if not every_chunk and _raw_name(a) == _raw_name(b) and _chunks_of(a) == chunks:
        idx_a, off_a = _mapping(a)
        idx_b, off_b = _mapping(b)
        # Chunks of B lying entirely inside A's shape: only they can be unchanged
        # (B's extra points are changes); there the same mapping means the same points.
        inside = np.ones(grid_b, dtype=bool)
        for axis, (c, n_a, n_b, g) in enumerate(zip(chunks, a.shape, b.shape, grid_b)):
            ends = np.minimum((np.arange(g) + 1) * c, n_b)
            shape = [1] * len(grid_b)
            shape[axis] = g
            inside &= (ends <= n_a).reshape(shape)
        sel = tuple(slice(0, min(ga, gb)) for ga, gb in zip(idx_a.shape, grid_b))
        mapped_same = (idx_a[sel] == idx_b[sel]) & ((off_a[sel] == off_b[sel]) | (idx_b[sel] == 0))
        same[sel] = mapped_same & inside[sel]
    candidates = [tuple(int(i) for i in idx) for idx in np.argwhere(~same)]
    status = "unchanged" if not candidates and removed == 0 and a.shape == b.shape else "modified"
    diff = DatasetDiff(path, status, a.shape, b.shape, chunks, math.prod(grid_b), candidates, points_removed=removed)
    if not candidates:
        diff.points_changed = 0
        diff.chunks_changed = 0
    return diff


def iter_candidates(
    a: h5py.Dataset, b: h5py.Dataset, diff: DatasetDiff
) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...], np.ndarray | None, np.ndarray]]:
    """Read each candidate chunk of ``diff`` from both versions, compared or not.

    Yields
    ------
    index, region, a, b
        The chunk's index and region in B (points), A's stored points in the
        region clipped to A's shape (None if nothing of it is in A), B's
        stored points.
    """
    for index in diff.candidates:
        region = chunk_slices(index, b.shape, diff.chunks)
        clipped = tuple(slice(r.start, min(r.stop, n)) for r, n in zip(region, a.shape))
        avals = a[clipped] if all(s.stop > s.start for s in clipped) else None
        yield index, region, avals, b[region]


def finish(diff: DatasetDiff, points: int, chunks_changed: int) -> None:
    """Record the counts of a read diff; a dataset with no change left is ``"unchanged"``."""
    diff.points_changed = points
    diff.chunks_changed = chunks_changed
    if points == 0 and diff.points_removed == 0 and diff.shape_a == diff.shape_b:
        diff.status = "unchanged"


def iter_chunk_changes(a: h5py.Dataset, b: h5py.Dataset, diff: DatasetDiff) -> Iterator[ChunkChange]:
    """Read the candidate chunks of ``diff`` from both versions; yield those that changed.

    Stored values are compared (:func:`equal_points`). Sets
    ``diff.points_changed`` and ``diff.chunks_changed`` once exhausted, and
    ``diff.status`` to ``"unchanged"`` when no point changed and the shapes
    are equal.
    """
    points = chunks_changed = 0
    for index, region, avals, bvals in iter_candidates(a, b, diff):
        changed = np.ones(bvals.shape, dtype=bool)
        if avals is not None:
            inner = tuple(slice(0, n) for n in avals.shape)
            changed[inner] = ~equal_points(avals, bvals[inner])
        n = int(changed.sum())
        if n:
            points += n
            chunks_changed += 1
            yield ChunkChange(index, region, avals, bvals, changed)
    finish(diff, points, chunks_changed)


def _datasets(group: h5py.Group, recursive: bool, skip, prefix: str = "") -> dict[str, h5py.Dataset]:
    """The version datasets below ``group`` by relative path, in creation order."""
    found: dict[str, h5py.Dataset] = {}
    for key, obj in group.items():
        if isinstance(obj, h5py.Dataset):
            if obj.is_virtual and "raw_data" in obj.attrs and not skip(obj):
                found[prefix + key] = obj
        elif recursive and isinstance(obj, h5py.Group):
            found.update(_datasets(obj, recursive, skip, f"{prefix}{key}/"))
    return found


def diff_versions(
    f: h5py.File,
    a: VersionKey,
    b: VersionKey,
    *,
    group: str | None = None,
    recursive: bool = True,
    values: bool = True,
    skip: Callable[[h5py.Dataset], bool] = lambda ds: False,
) -> dict[str, DatasetDiff]:
    """Compare versions ``a`` and ``b`` of ``f``, dataset by dataset.

    Parameters
    ----------
    f : h5py.File
        A versioned file.
    a, b : str, int, datetime or None
        The two versions (any key ``VersionRegistry.resolve`` takes); A is the base.
    group : str, optional
        Compare only this group of both versions (default their roots).
    recursive : bool
        Include subgroups (default True); dataset paths are relative to ``group``.
    values : bool
        Read the candidate chunks to count changed points (default True);
        False compares mappings only (nothing read).
    skip : callable, optional
        ``skip(dataset) -> bool``: datasets to leave out (e.g. netCDF phony scales).

    Returns
    -------
    dict of str to DatasetDiff
        Every dataset of A or B, in B's order then A's.

    Raises
    ------
    NotVersionedError, VersionNotFoundError
        ``f`` has no history, or no such version.
    KeyError
        ``group`` is in neither version.
    """
    registry = VersionRegistry(f)
    roots = []
    for key in (a, b):
        root = registry.group[registry.resolve(key)]
        if group not in (None, "", "/"):
            path = group.strip("/")
            root = root[path] if path in root and isinstance(root[path], h5py.Group) else None
        roots.append(root)
    if roots[0] is None and roots[1] is None:
        raise KeyError(f"no group {group!r} in version {a!r} nor {b!r}")
    in_a = _datasets(roots[0], recursive, skip) if roots[0] is not None else {}
    in_b = _datasets(roots[1], recursive, skip) if roots[1] is not None else {}
    out: dict[str, DatasetDiff] = {}
    for path in [*in_b, *(p for p in in_a if p not in in_b)]:
        da, db = in_a.get(path), in_b.get(path)
        diff = compare_datasets(path, da, db)
        if values and diff.points_changed is None:
            for _ in iter_chunk_changes(da, db, diff):
                pass
        out[path] = diff
    return out
