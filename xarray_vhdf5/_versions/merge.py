"""Three-way merge of one dataset's points and of attributes: base, theirs, ours.

A writer stages changes on a version, the *base*; meanwhile another writer
commits a version, *theirs*, on the same base. Rebasing the staged changes,
*ours*, onto theirs merges both sides' changes since the base
(:func:`merge_points` for a dataset's points, :func:`merge_attrs` for the
attributes of a group or dataset; :mod:`~xarray_vhdf5._versions.rebase` applies
them to a staged version's whole tree).

Chunks first. The base and theirs are mapped over the dataset's raw_data
(``slab_indices`` / ``slab_offsets``, :mod:`~xarray_vhdf5._backend.chunkmap`);
raw_data stores each distinct chunk once, so a chunk mapped to the same row on
two sides holds the same bytes and is compared without being read. A chunk of
ours is on a raw_data row (when ``ours_shares_rows``), on the fill value, or
in memory (staged). A side *changed* a chunk when the chunk exists on one side
only, has another extent (a resize moved the edge), or lies elsewhere (another
row; in memory: always counted as changed, its points may still equal the
base's). Then, per chunk:

- changed by neither side, or by theirs only: theirs' mapping is kept, nothing
  is read;
- changed by ours only: our points are copied into the merged array (from
  memory; a chunk of ours mapped to another raw_data row than the base's is
  read);
- changed by both: the chunk is read on all three sides and merged point by
  point.

Points. A point has a value, or is absent (outside the dataset's shape on that
side). A side *changed* a point when it is present on one of base and that
side only, or present on both with another value: NaN equals NaN (every NaN
payload; complex values component by component), every other value is
compared bit for bit (``-0.0`` differs from ``0.0``), variable-length strings
by their text. A point changed on one side takes that side's value (or
absence); changed on both to the same value (or both removed) it takes that
value; changed on both to different values it is a *conflict*.

Shapes. The merged shape is ours when only ours resized the dataset, theirs
when only theirs did or when both resized it to the same shape. When both
resized it to different shapes the merge is a conflict: its points are those
inside one of the two new shapes but not the other, together with the point
conflicts where both exist. A shrink needs no rule of its own: a point
beyond it is removed (changed) on the shrinking side, so a point the other
side changed there is a conflict, and one it left alone is dropped. New points
of a growth exist on the growing side only and are taken from it.

Added and deleted datasets. A dataset only one side added is taken from it
(by the caller). Both sides adding the same name is merged as above with an
empty base: equal shapes and equal points merge; any point with different
values (or shapes that differ) is a conflict. A dataset deleted on one side
is deleted when the other side left it unchanged; when the other side changed
it, the points that side changed or added are conflicts (not those it
removed: both sides removed them).

Attributes merge one by one with the same rule, an absent attribute being a
value of its own: changed on one side, that side's value (or deletion) is
taken; changed on both, equal values are fine and different values conflict,
except for the HDF5 dimension-scale and netCDF-4 bookkeeping attributes
(:data:`BOOKKEEPING_ATTRS`, and any attribute holding object references),
for which ours wins: a commit drops object references and the xarray writer
rebuilds the rest after every commit (``xr._dimscales``).

Cost: the chunk maps of base and theirs (no chunk data), a copy of each chunk
changed by ours only, and three reads per chunk changed on both sides; the
merged array is a copy-on-write copy of theirs, so the commit stores only the
chunks that differ from theirs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

import h5py
import numpy as np

from .._backend.chunkmap import build_slab_indices_and_offsets, version_dataset_layout
from .._backend.chunks import chunk_grid_shape
from .._staging import StagedChangesArray
from ..errors import ConflictError

__all__ = [
    "BOOKKEEPING_ATTRS",
    "DELETED",
    "PointMerge",
    "changed_attr_names",
    "conflict_error",
    "mapped_array",
    "merge_attrs",
    "merge_points",
    "same_attr_value",
    "same_points",
]

#: Attributes where ours wins when both sides changed them: the HDF5 Dimension Scales
#: API's reserved names and netCDF-4's dimension bookkeeping (rebuilt by the xarray
#: writer after each commit, ``xr._dimscales``; object references are dropped by every
#: commit).
BOOKKEEPING_ATTRS = frozenset(
    {"CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST", "_Netcdf4Dimid", "_Netcdf4Coordinates"}
)


class _Deleted:
    """The value :func:`merge_attrs` gives an attribute that the merge deletes."""

    def __repr__(self) -> str:
        return "DELETED"


#: An attribute the merge deletes (a value of :func:`merge_attrs`'s result).
DELETED = _Deleted()

# Where a chunk of a side lies (merge_points): absent from the side's shape, all fill
# value, on a raw_data row, or in memory (staged: counted as changed).
_ABSENT, _FILL, _ROW, _MEMORY = -1, 0, 1, 2


# -- values --------------------------------------------------------------------------------


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def same_points(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Which points of two arrays of the same shape and dtype kind hold the same value.

    NaN equals NaN (any payload; complex values component by component); other
    values compare bit for bit (``-0.0`` and ``0.0`` differ); object arrays
    (variable-length strings) compare elements by their text (``bytes`` read by
    h5py equal the ``str`` written). The rule of this module's "changed".

    Parameters
    ----------
    a, b : numpy.ndarray
        Same shape; ``b`` is cast to ``a``'s dtype when they differ.

    Returns
    -------
    numpy.ndarray of bool
        Same shape.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if b.dtype != a.dtype:
        b = b.astype(a.dtype)
    if a.dtype.kind == "O":
        if not a.size:
            return np.ones(a.shape, dtype=bool)
        eq = np.frompyfunc(lambda x, y: bool(_text(x) == _text(y)), 2, 1)
        return eq(a, b).astype(bool)
    if a.dtype.kind in "fc":
        parts = (a.real, a.imag) if a.dtype.kind == "c" else (a,)
        others = (b.real, b.imag) if a.dtype.kind == "c" else (b,)
        out = np.ones(a.shape, dtype=bool)
        for x, y in zip(parts, others):
            out &= _same_bytes(x, y) | (np.isnan(x) & np.isnan(y))
        return out
    return _same_bytes(a, b)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    size = a.dtype.itemsize
    if size == 0:
        return np.ones(a.shape, dtype=bool)
    if size in (1, 2, 4, 8) and not a.dtype.fields:
        view = np.dtype(f"u{size}")
        return np.ascontiguousarray(a).view(view) == np.ascontiguousarray(b).view(view)
    bytes_a = np.ascontiguousarray(a).view(np.uint8).reshape(*a.shape, size)
    bytes_b = np.ascontiguousarray(b).view(np.uint8).reshape(*b.shape, size)
    return np.all(bytes_a == bytes_b, axis=-1)


def same_attr_value(x: Any, y: Any) -> bool:
    """True when two attribute values are equal: same shape and values, NaN equal to NaN.

    ``bytes`` and ``str`` compare by text (h5py reads a string attribute as
    ``str`` however it was written); values of another kind (a string against
    a number) are unequal; values numpy cannot compare (object references)
    are unequal unless they are the same object.
    """
    if x is y:
        return True
    x, y = _text(x), _text(y)
    if isinstance(x, str) or isinstance(y, str):
        return isinstance(x, str) and isinstance(y, str) and x == y
    try:
        ax, ay = np.asarray(x), np.asarray(y)
        if ax.dtype.kind == "O" or ay.dtype.kind == "O":
            if ax.shape != ay.shape:
                return False
            return all(_text(p) == _text(q) for p, q in zip(ax.flat, ay.flat))
        if ax.dtype.kind in "SU" and ay.dtype.kind in "SU":
            ax, ay = ax.astype(str), ay.astype(str)
        nan_ok = ax.dtype.kind in "fc" and ay.dtype.kind in "fc"
        return bool(np.array_equal(ax, ay, equal_nan=nan_ok))
    except (TypeError, ValueError):
        return False


def _holds_references(value: Any) -> bool:
    if isinstance(value, (h5py.Reference, h5py.RegionReference)):
        return True
    if not isinstance(value, np.ndarray):
        return False
    if value.dtype.names:
        return any(_holds_references(value[name]) for name in value.dtype.names)
    return value.dtype.kind == "O" and any(_holds_references(v) for v in value.flat)


# -- attributes ----------------------------------------------------------------------------


def changed_attr_names(
    a: Mapping[str, Any], b: Mapping[str, Any], *, ours_wins: Iterable[str] = BOOKKEEPING_ATTRS
) -> list[str]:
    """Attributes added, removed or changed from ``a`` to ``b`` that a merge counts, sorted.

    For an object deleted on one side: the other side's changes to these
    names conflict. Names in ``ours_wins`` (default :data:`BOOKKEEPING_ATTRS`)
    and values holding object references are left out: they never conflict.
    """
    wins = frozenset(ours_wins)
    out = []
    for key in {*a, *b}:
        if key in wins or (key in a and _holds_references(a[key])) or (key in b and _holds_references(b[key])):
            continue
        if key not in a or key not in b or not same_attr_value(a[key], b[key]):
            out.append(key)
    return sorted(out)


def merge_attrs(
    base: Mapping[str, Any] | None,
    theirs: Mapping[str, Any] | None,
    ours: Mapping[str, Any] | None,
    *,
    ours_wins: Iterable[str] = BOOKKEEPING_ATTRS,
    always_ours: Iterable[str] = (),
) -> tuple[dict[str, Any], list[str]]:
    """Three-way merge of the attributes of one object (see the module docstring).

    Parameters
    ----------
    base, theirs, ours : mapping of str to value, or None
        The object's attributes on each side (None: the object is absent there,
        as an empty mapping).
    ours_wins : iterable of str
        Names whose conflicts resolve to ours (default :data:`BOOKKEEPING_ATTRS`);
        attributes holding object references resolve to ours too.
    always_ours : iterable of str
        Names not merged: ours is taken (e.g. a version's commit message).

    Returns
    -------
    edits : dict of str to value
        What to change on theirs to get the merged attributes: a new value, or
        :data:`DELETED`. Empty when the merge is theirs.
    conflicts : list of str
        Names changed on both sides to different values (or one deleted and
        one changed), sorted; when not empty, ``edits`` is not to be applied.
    """
    base, theirs, ours = base or {}, theirs or {}, ours or {}
    wins, always = frozenset(ours_wins), frozenset(always_ours)
    edits: dict[str, Any] = {}
    conflicts: list[str] = []
    for key in sorted({*base, *theirs, *ours}):
        in_b, in_t, in_o = key in base, key in theirs, key in ours
        if key in always:
            if in_o and not (in_t and same_attr_value(theirs[key], ours[key])):
                edits[key] = ours[key]
            elif not in_o and in_t:
                edits[key] = DELETED
            continue
        ours_changed = in_o != in_b or (in_o and not same_attr_value(base[key], ours[key]))
        if not ours_changed:
            continue  # theirs (changed or not) stays
        theirs_changed = in_t != in_b or (in_t and not same_attr_value(base[key], theirs[key]))
        agree = in_t == in_o and (not in_t or same_attr_value(theirs[key], ours[key]))
        if theirs_changed and agree:
            continue
        if theirs_changed and not (
            key in wins or (in_t and _holds_references(theirs[key])) or (in_o and _holds_references(ours[key]))
        ):
            conflicts.append(key)
            continue
        edits[key] = ours[key] if in_o else DELETED
    return edits, conflicts


# -- points ----------------------------------------------------------------------------------


def mapped_array(vds: h5py.Dataset, raw_data: h5py.Dataset) -> StagedChangesArray:
    """A version's dataset as a :class:`~xarray_vhdf5._staging.StagedChangesArray` over its raw_data.

    Its chunk map is read from the virtual dataset's mappings
    (:func:`~xarray_vhdf5._backend.chunkmap.build_slab_indices_and_offsets`);
    no chunk is read until the array is indexed.

    Parameters
    ----------
    vds : h5py.Dataset
        A dataset of a committed version.
    raw_data : h5py.Dataset
        The raw_data its ``raw_data`` attribute names (any handle to it).

    Returns
    -------
    StagedChangesArray
        Shape ``vds.shape``, the chunks of its ``chunks`` attribute, dtype and
        fill value of raw_data; ``slab_indices`` 0 (fill value) or 1 (raw_data).

    Raises
    ------
    IncompatibleDataError
        ``vds`` is not a versioned dataset (no ``chunks`` / ``raw_data`` attributes).
    ValueError
        Its mappings are not chunk aligned (see ``build_slab_indices_and_offsets``).
    """
    chunks, _ = version_dataset_layout(vds)
    indices, offsets = build_slab_indices_and_offsets(vds, vds.shape, chunks, raw_data)
    fill = None if raw_data.dtype.kind == "O" else raw_data.fillvalue
    return StagedChangesArray(vds.shape, chunks, [raw_data], indices, offsets, fill_value=fill, dtype=raw_data.dtype)


class _Counts(TypedDict):
    """Chunks changed by one side or both: :class:`PointMerge`'s counts."""

    theirs_chunks: int
    ours_chunks: int
    both_chunks: int


@dataclasses.dataclass
class PointMerge:
    """What :func:`merge_points` decided for one dataset.

    Attributes
    ----------
    result : {"theirs", "ours", "merged", "deleted", "conflict"}
        ``"theirs"``: theirs' points are the merge (ours changed no chunk);
        ``"ours"``: ours are (theirs changed no chunk and kept the base's
        shape); ``"merged"``: :attr:`array` holds the merge; ``"deleted"``: the
        dataset is deleted; ``"conflict"``: see :attr:`conflicts`.
    array : StagedChangesArray or None
        For ``"merged"``: a copy-on-write copy of theirs (its base state is
        theirs' chunk map) with ours' chunks and the merged points written in;
        its changes plan lists exactly the chunks that differ from theirs.
    shape : tuple of int or None
        The merged shape, in points (None when deleted or in conflict).
    conflicts : numpy.ndarray of int64, shape (n, ndim)
        Indices of the conflicting points, in points, C order, no repeats.
    shape_conflict : tuple of (tuple of int, tuple of int) or None
        ``(theirs' shape, ours' shape)`` when both sides resized the dataset to
        different shapes.
    theirs_chunks, ours_chunks, both_chunks : int
        Chunks changed by theirs only (kept as mapped, not read), by ours only
        (copied from ours), and by both (read on each side and merged point by
        point), on the grid of the largest shape.
    """

    result: str
    array: StagedChangesArray | None = None
    shape: tuple[int, ...] | None = None
    conflicts: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 1), np.int64))
    shape_conflict: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    theirs_chunks: int = 0
    ours_chunks: int = 0
    both_chunks: int = 0


def _locations(
    arr: StagedChangesArray | None, grid_u: tuple[int, ...], shares_rows: bool, fill_bytes: bytes | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(kind, offset)`` of every chunk of ``arr`` on the grid ``grid_u`` (absent beyond its shape).

    ``kind``: ``_ABSENT``, ``_FILL``, ``_ROW`` (raw_data row ``offset``, in
    points along axis 0) or ``_MEMORY``. The fill slab of an array whose fill
    value is not ``fill_bytes`` counts as memory; with ``shares_rows`` False,
    so do its base slabs (without base slabs, slab 1 is a staged one).
    """
    kind = np.full(grid_u, _ABSENT, dtype=np.int8)
    offset = np.zeros(grid_u, dtype=np.uint64)
    if arr is None:
        return kind, offset
    own = chunk_grid_shape(tuple(arr.shape), tuple(arr.chunk_size))
    region = tuple(slice(0, g) for g in own)
    si = np.asarray(arr.slab_indices)
    k = np.full(own, _MEMORY, dtype=np.int8)
    if arr.dtype.kind == "O" or np.asarray(arr.fill_value, arr.dtype).tobytes() == fill_bytes:
        k[si == 0] = _FILL
    if shares_rows and arr.n_base_slabs >= 1:
        k[si == 1] = _ROW
    kind[region] = k
    offset[region] = np.where(k == _ROW, np.asarray(arr.slab_offsets), 0)
    return kind, offset


def _existing(shape: tuple[int, ...] | None, chunks: tuple[int, ...], grid_u: tuple[int, ...]) -> list[np.ndarray]:
    """Per axis, the extent in points of chunk ``i`` along it (0: beyond ``shape``)."""
    out = []
    for axis, (c, g) in enumerate(zip(chunks, grid_u)):
        n = 0 if shape is None else shape[axis]
        out.append(np.clip(n - np.arange(g, dtype=np.int64) * c, 0, c))
    return out


def _changed_chunks(
    grid_u: tuple[int, ...],
    chunks: tuple[int, ...],
    base_shape: tuple[int, ...] | None,
    base_loc: tuple,
    shape: tuple[int, ...] | None,
    loc: tuple,
) -> np.ndarray:
    """Chunks a side changed from the base: present on one only, another extent, or elsewhere."""
    ndim = len(grid_u)
    ext_b = _existing(base_shape, chunks, grid_u)
    ext_x = _existing(shape, chunks, grid_u)
    in_b = np.ones(grid_u, dtype=bool)
    in_x = np.ones(grid_u, dtype=bool)
    extent = np.zeros(grid_u, dtype=bool)
    for axis in range(ndim):
        view = [1] * ndim
        view[axis] = -1
        in_b &= (ext_b[axis] > 0).reshape(view)
        in_x &= (ext_x[axis] > 0).reshape(view)
        extent |= (ext_b[axis] != ext_x[axis]).reshape(view)
    kind_b, off_b = base_loc
    kind_x, off_x = loc
    moved = (kind_b != kind_x) | (kind_x == _MEMORY) | ((kind_x == _ROW) & (off_b != off_x))
    return (in_b != in_x) | (in_b & in_x & (extent | moved))


def _read(arr: Any, shape: tuple[int, ...] | None, lo: np.ndarray, hi: np.ndarray, dtype: np.dtype):
    """``(present, values)`` of the box ``[lo, hi)`` on one side (values where present)."""
    local = tuple(int(h - a) for a, h in zip(lo, hi))
    present = np.zeros(local, dtype=bool)
    values = np.zeros(local, dtype=dtype)
    if arr is None or shape is None:
        return present, values
    top = np.minimum(hi, np.asarray(shape, dtype=np.int64))
    if np.any(top <= lo):
        return present, values
    inner = tuple(slice(0, int(t - a)) for a, t in zip(lo, top))
    present[inner] = True
    values[inner] = np.asarray(arr[tuple(slice(int(a), int(t)) for a, t in zip(lo, top))], dtype=dtype)
    return present, values


def _box_points(lo: Iterable[int], hi: Iterable[int]) -> np.ndarray:
    lo, hi = np.asarray(list(lo), np.int64), np.asarray(list(hi), np.int64)
    if np.any(hi <= lo):
        return np.zeros((0, len(lo)), np.int64)
    grid = np.indices(tuple(hi - lo), dtype=np.int64).reshape(len(lo), -1).T
    return grid + lo


def _outside(a: tuple[int, ...], b: tuple[int, ...]) -> list[np.ndarray]:
    """The points of the box ``[0, a)`` outside ``[0, b)``, as disjoint boxes of points."""
    out = []
    for axis in range(len(a)):
        if a[axis] <= b[axis]:
            continue
        lo = [0] * len(a)
        hi = [min(x, y) if k < axis else x for k, (x, y) in enumerate(zip(a, b))]
        lo[axis] = b[axis]
        out.append(_box_points(lo, hi))
    return out


def _sorted_unique(parts: list[np.ndarray], ndim: int) -> np.ndarray:
    parts = [p for p in parts if len(p)]
    if not parts:
        return np.zeros((0, ndim), np.int64)
    return np.unique(np.concatenate(parts).astype(np.int64), axis=0)


def merge_points(
    base: StagedChangesArray | None,
    theirs: StagedChangesArray | None,
    ours: Any,
    *,
    ours_shares_rows: bool = False,
) -> PointMerge:
    """Three-way merge of one dataset's points (rules in the module docstring).

    Parameters
    ----------
    base : StagedChangesArray or None
        The base version's dataset mapped over its raw_data (e.g.
        :func:`mapped_array`): ``slab_indices`` 0 (fill value) or 1 (a raw_data
        row), no staged changes. None: the base has no such dataset.
    theirs : StagedChangesArray or None
        Theirs, mapped over the same raw_data in the same way; None: theirs
        deleted it (or, with ``base`` None, never had it).
    ours : StagedChangesArray, array-like or None
        Ours: a StagedChangesArray (its chunks on ``slab_indices`` 1 are raw_data
        rows when ``ours_shares_rows``; others are in memory or all fill
        value), or any array-like with ``shape``, ``dtype`` and numpy slicing
        (every chunk counted as changed); None: ours deleted it. Its values
        are cast to theirs' (or the base's) dtype.
    ours_shares_rows : bool
        True when ours' first base slab is the same raw_data as base and
        theirs' (an array staged from a version of the same dataset).

    Returns
    -------
    PointMerge
        What to commit, or the conflicts (``result == "conflict"``; nothing
        else is then usable).

    Raises
    ------
    ValueError
        Both ``base`` and ``theirs`` are None (nothing to merge: ours is added),
        or the sides have another number of dimensions or chunk shape.

    Notes
    -----
    Reads only the chunks changed on both sides (three reads each, through
    the arrays' own indexing), and copies the chunks changed by ours only.
    """
    if base is None and (theirs is None or ours is None):
        raise ValueError(
            "merge_points needs a base, or theirs and ours both: a dataset only one side has is taken as it is"
        )
    ref = theirs if theirs is not None else base
    assert ref is not None, "base is None only when theirs is given"
    chunks = tuple(ref.chunk_size)
    dtype = ref.dtype
    ndim = len(chunks)
    for side, arr in (("base", base), ("ours", ours)):
        if arr is not None and len(arr.shape) != ndim:
            raise ValueError(f"{side} has {len(arr.shape)} dimensions, theirs {ndim}")
        if isinstance(arr, StagedChangesArray) and tuple(arr.chunk_size) != chunks:
            if side == "base":
                raise ValueError(f"base has chunks {tuple(arr.chunk_size)}, theirs {chunks}")
            ours_shares_rows = False  # another chunking: compared as plain values
            ours = _Plain(arr)
    s_b = tuple(base.shape) if base is not None else None
    s_t = tuple(theirs.shape) if theirs is not None else None
    s_o = tuple(ours.shape) if ours is not None else None
    shapes = [s for s in (s_b, s_t, s_o) if s is not None]
    union = tuple(max(n) for n in zip(*shapes))
    grid_u = chunk_grid_shape(union, chunks)
    fill_bytes = np.asarray(ref.fill_value, dtype).tobytes() if dtype.kind != "O" else None

    loc_b = _locations(base, grid_u, True, fill_bytes)
    loc_t = _locations(theirs, grid_u, True, fill_bytes)
    loc_o = _locations_of_ours(ours, grid_u, chunks, ours_shares_rows, fill_bytes)
    changed_t = _changed_chunks(grid_u, chunks, s_b, loc_b, s_t, loc_t)
    changed_o = _changed_chunks(grid_u, chunks, s_b, loc_b, s_o, loc_o)
    both = changed_t & changed_o
    counts: _Counts = {
        "theirs_chunks": int(np.count_nonzero(changed_t & ~changed_o)),
        "ours_chunks": int(np.count_nonzero(changed_o & ~changed_t)),
        "both_chunks": int(np.count_nonzero(both)),
    }
    cs = np.asarray(chunks, np.int64)
    u = np.asarray(union, np.int64)

    def boxes(mask):
        for index in np.argwhere(mask):
            lo = index.astype(np.int64) * cs
            yield lo, np.minimum(lo + cs, u)

    # A side deleted the dataset: conflicts are the points the other side changed or added.
    if ours is None or theirs is None:
        other, s_x, changed = (theirs, s_t, changed_t) if ours is None else (ours, s_o, changed_o)
        if other is None:
            return PointMerge("deleted", **counts)
        found = []
        for lo, hi in boxes(changed):
            p_b, v_b = _read(base, s_b, lo, hi, dtype)
            p_x, v_x = _read(other, s_x, lo, hi, dtype)
            hit = p_x & (~p_b | ~same_points(v_x, v_b))
            found.append(np.argwhere(hit) + lo)
        conflicts = _sorted_unique(found, ndim)
        if len(conflicts):
            return PointMerge("conflict", conflicts=conflicts, **counts)
        return PointMerge("deleted", **counts)

    # The merged shape; both sides resizing to different shapes is a conflict.
    assert s_t is not None and s_o is not None, "both sides hold the dataset here"
    resized_t = base is None or s_t != s_b
    resized_o = base is None or s_o != s_b
    shape_conflict = None
    if resized_t and resized_o and s_t != s_o:
        shape_conflict = (s_t, s_o)
        merged_shape = None
    else:
        merged_shape = s_o if not resized_t else s_t

    if not both.any() and shape_conflict is None:
        none = np.zeros((0, ndim), np.int64)
        if not changed_o.any() and merged_shape == s_t:
            return PointMerge("theirs", shape=s_t, conflicts=none, **counts)
        if not changed_t.any() and s_t == s_b:
            return PointMerge("ours", shape=s_o, conflicts=none, **counts)

    merged = None
    if shape_conflict is None:
        merged = theirs.copy()
        if merged_shape != s_t:
            merged.resize(merged_shape)
    found = []
    wrote = False
    r = np.asarray(merged_shape, np.int64) if merged_shape is not None else None
    for lo, hi in boxes(both):
        p_b, v_b = _read(base, s_b, lo, hi, dtype)
        p_t, v_t = _read(theirs, s_t, lo, hi, dtype)
        p_o, v_o = _read(ours, s_o, lo, hi, dtype)
        ch_t = (p_t != p_b) | (p_t & p_b & ~same_points(v_t, v_b))
        ch_o = (p_o != p_b) | (p_o & p_b & ~same_points(v_o, v_b))
        agree = (p_t == p_o) & (~p_t | same_points(v_t, v_o))
        clash = ch_t & ch_o & ~agree
        if clash.any():
            found.append(np.argwhere(clash) + lo)
        if merged is None or r is None or found:
            continue
        top = np.minimum(hi, r)
        if np.any(top <= lo):
            continue
        inner = tuple(slice(0, int(t - a)) for a, t in zip(lo, top))
        if not (ch_o & ~agree)[inner].any():
            continue  # ours changed nothing theirs did not change alike: theirs' chunk stays mapped
        values = np.where(ch_o, v_o, v_t)[inner]
        merged[tuple(slice(int(a), int(t)) for a, t in zip(lo, top))] = values
        wrote = True
    if shape_conflict is not None:
        found.extend(_outside(s_t, s_o))
        found.extend(_outside(s_o, s_t))
    conflicts = _sorted_unique(found, ndim)
    if len(conflicts) or shape_conflict is not None:
        return PointMerge("conflict", conflicts=conflicts, shape_conflict=shape_conflict, **counts)
    assert merged is not None and r is not None, "no shape conflict: theirs was copied"
    for lo, hi in boxes(changed_o & ~changed_t):
        top = np.minimum(hi, r)
        if np.any(top <= lo):
            continue
        region = tuple(slice(int(a), int(t)) for a, t in zip(lo, top))
        merged[region] = np.asarray(ours[region], dtype=dtype)
        wrote = True
    if not wrote and merged_shape == s_t:
        return PointMerge("theirs", shape=s_t, conflicts=np.zeros((0, ndim), np.int64), **counts)
    return PointMerge("merged", array=merged, shape=merged_shape, conflicts=np.zeros((0, ndim), np.int64), **counts)


class _Plain:
    """A StagedChangesArray of another chunking, read as a plain array-like."""

    def __init__(self, arr: StagedChangesArray):
        self._arr = arr
        self.shape = tuple(arr.shape)
        self.dtype = arr.dtype

    def __getitem__(self, key):
        return self._arr[key]


def _locations_of_ours(ours, grid_u, chunks, shares_rows, fill_bytes) -> tuple:
    if ours is None or isinstance(ours, StagedChangesArray):
        return _locations(ours, grid_u, shares_rows, fill_bytes)
    kind = np.full(grid_u, _ABSENT, dtype=np.int8)
    kind[tuple(slice(0, g) for g in chunk_grid_shape(tuple(ours.shape), chunks))] = _MEMORY
    return kind, np.zeros(grid_u, dtype=np.uint64)


# -- the error ---------------------------------------------------------------------------------


def _fmt_points(points: np.ndarray, first: int) -> str:
    shown = ", ".join(str(tuple(int(i) for i in p)) for p in points[:first])
    return shown + (", ..." if len(points) > first else "")


def conflict_error(
    what: str,
    points: Mapping[str, np.ndarray],
    *,
    attributes: Mapping[str, list[str]] | None = None,
    shapes: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]] | None = None,
    other: Iterable[str] = (),
    first: int = 5,
) -> ConflictError:
    """The :class:`~xarray_vhdf5.errors.ConflictError` of a merge, its message listing the conflicts.

    Parameters
    ----------
    what : str
        The merge, for the message (e.g. ``"rebasing 'r3' (staged from 'r1') onto 'r2'"``).
    points : mapping of str to numpy.ndarray of int64, shape (n, ndim)
        Conflicting points by dataset path (paths with none are left out).
    attributes : mapping of str to list of str, optional
        Conflicting attribute names by object path (``"/"`` for the root group).
    shapes : mapping of str to (tuple, tuple), optional
        ``(theirs' shape, ours' shape)`` of datasets both sides resized differently.
    other : iterable of str
        Further conflicts, one sentence each (a dataset against a group).
    first : int
        Points shown per dataset.

    Returns
    -------
    ConflictError
        ``points`` holds the datasets with conflicting points, ``attributes``
        the attribute conflicts.
    """
    points = {k: v for k, v in points.items() if len(v)}
    attributes = {k: v for k, v in (attributes or {}).items() if v}
    shapes = dict(shapes or {})
    lines = []
    for path in sorted(set(points) | set(shapes)):
        pts = points.get(path, np.zeros((0, 0), np.int64))
        text = f"  {path!r}: {len(pts)} point{'s' if len(pts) != 1 else ''}"
        if path in shapes:
            theirs, ours = shapes[path]
            text += f" (resized on both sides: theirs to {theirs}, ours to {ours})"
        if len(pts):
            text += f": {_fmt_points(pts, first)}"
        lines.append(text)
    for path in sorted(attributes):
        lines.append(f"  {path!r}: attributes {attributes[path]} changed on both sides to different values")
    lines.extend(f"  {line}" for line in other)
    n_points = sum(len(v) for v in points.values())
    n_attrs = sum(map(len, attributes.values()))
    message = (
        f"{what}: both sides changed the same data differently ({n_points} conflicting "
        f"point{'s' if n_points != 1 else ''} in {len(points)} dataset{'s' if len(points) != 1 else ''}"
        + (f", {n_attrs} attribute{'s' if n_attrs != 1 else ''}" if attributes else "")
        + "); nothing was committed:\n"
        + "\n".join(lines)
        + "\nTo resolve, give those points (attributes, shapes) theirs' values in the staged data, or "
        "stage again from the current version, and commit again"
    )
    return ConflictError(message, points=points, attributes=attributes)
