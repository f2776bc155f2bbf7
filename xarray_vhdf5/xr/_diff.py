"""The differences between two versions as an xarray Dataset that plots directly.

``ds.vhdf5.diff(other)`` (or :func:`diff_versions`) compares version A (the
base, ``other``) with version B (the Dataset's own version), like
``git diff other``. The chunk-level work is :mod:`xarray_vhdf5._versions.diff`:
unchanged chunks are recognised from the virtual dataset mappings and never
read; only chunks whose mappings differ are read, from both versions.

Structure of the returned Dataset (``V`` a variable of the group, added,
replaced or modified; coordinates are B's index coordinates; a scalar ``V``
gives scalar ``V_diff``, ``V_changed`` and ``V_changes``):

``V_diff`` : dims of ``V`` in B
    ``B - A`` (CF-decoded values) where the point changed and both values are
    numbers (not NaN/NaT); NaN (NaT for times) elsewhere: at unchanged points,
    at points that became or stopped being NaN (a fill, a mask), and at points
    that do not exist in A (B grew). ``V_changed`` shows all of those changes.
    float64 for integer and bool variables, ``timedelta64`` for times; only
    for numeric, bool and time variables of a modified dataset.
    Attributes: ``status``, ``points_changed``, ``points_removed``,
    ``shape_a``, ``shape_b``, ``long_name``, ``units`` (B's).
``V_changed`` : dims of ``V`` in B, bool
    True where the point of B differs from A's, or does not exist in A
    (appended); False where it is unchanged. NaN-aware: NaN (NaT) in both
    versions is unchanged, NaN on one side only is a change. For every added,
    replaced or modified variable, strings and other non-numeric ones
    included; all True for an added or replaced one (then a read-only
    broadcast of ``True``, no memory per point).
    ``int(V_changed.sum()) == V_changed.attrs["points_changed"]``; A's points
    beyond B's shape are not in B's grid, they are counted in ``points_removed``.
    Attributes: ``long_name``, ``status``, ``points_changed``,
    ``points_removed``, ``shape_a`` (absent for an added variable), ``shape_b``.
``V_changes`` : dims ``V_chunk_<dim>`` per dimension of ``V``
    Changed points per HDF5 chunk of B (a plot of where the changes are).
    The ``V_chunk_<dim>`` coordinates hold, per chunk, B's ``<dim>``
    coordinate at the chunk's first point (its index in points when ``<dim>``
    has no coordinate). Attributes: ``chunks`` (the chunk shape, points),
    ``chunks_total``, ``chunks_read`` (mappings that differ: the only chunks
    read), ``chunks_changed``.

Global attributes: ``version_a``, ``version_b``, ``group``, the variable
names by status: ``added``, ``removed``, ``replaced``, ``modified``,
``unchanged`` (lists; unchanged and removed variables have no data variable),
and ``attrs_changed``: variables in both versions whose attributes differ.

Values are compared CF-decoded. When an attribute that changes the decoding
(:data:`DECODING_ATTRS`: ``units``, ``scale_factor``, ...) differs between
the versions, every chunk of that variable is read, not only the remapped ones.

Lazy diffs (``lazy=True``, the default for variables larger than
:data:`EAGER_BYTES` and for ``ds.vhdf5.diff`` of a Dataset holding dask
arrays): nothing is read when the diff is built. ``V_diff``, ``V_changed``
and ``V_changes`` are dask arrays with one block per HDF5 chunk of B; a chunk
mapped to the same raw_data rows in both versions is a constant block (NaN,
False, 0) never read; each other chunk is one task reading it from A and B
(through their chunk manifests) and comparing, in memory of a few chunks.
Each computed variable reads its candidates again (compute them together,
``dask.compute(...)``, to read once). A lazy diff cannot know yet which
candidates hold equal points: a variable is ``modified`` as soon as a mapping
differs, and ``points_changed`` / ``chunks_changed`` are left out of the
attributes (``int(V_changed.sum())`` counts them).
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import xarray as xr

from .._backend.chunks import chunk_grid_shape, chunk_slices
from .._backend.names import DIMENSIONS_ATTR, is_netcdf_dimension_only, visible_attrs
from .._backend.signature import open_h5file
from .._versions.diff import DatasetDiff, compare_datasets, equal_points, finish, iter_candidates
from .._versions.registry import VersionKey, VersionRegistry
from .._versions.states import changed_attrs

__all__ = ["DECODING_ATTRS", "EAGER_BYTES", "diff_datatree", "diff_versions"]

#: Attributes that change a variable's CF-decoded values: when one differs between
#: the versions, every chunk is read and compared decoded.
DECODING_ATTRS = (
    "units",
    "calendar",
    "scale_factor",
    "add_offset",
    "_FillValue",
    "missing_value",
    "_Unsigned",
    "dtype",
)


def _dims(ds: h5py.Dataset) -> tuple[str, ...] | None:
    if DIMENSIONS_ATTR not in ds.attrs:
        return None
    return tuple(d.decode() if isinstance(d, bytes) else str(d) for d in np.atleast_1d(ds.attrs[DIMENSIONS_ATTR]))


def _out_dims(name: str, b: h5py.Dataset) -> tuple[tuple[str, ...], bool]:
    """Dimension names of ``name`` in B, and whether it is a scalar (stored as one point)."""
    dims = _dims(b)
    if dims == () and b.shape == (1,):
        return (), True
    if dims is None or len(dims) != b.ndim:
        return tuple(f"{name}_dim_{i}" for i in range(b.ndim)), False
    return dims, False


def _same_points(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`equal_points`, where NaT also equals NaT (decoded times)."""
    same = equal_points(a, b)
    if a.dtype.kind in "mM" and b.dtype.kind in "mM":
        same = same | (np.isnat(a) & np.isnat(b))
    return same


def _decode(name: str, ds: h5py.Dataset | dict, values: np.ndarray, decode_times: bool) -> np.ndarray:
    """CF-decode stored points of ``ds`` (or with attributes ``ds``, a dict) with its own attributes."""
    attrs = ds if isinstance(ds, dict) else visible_attrs(ds.attrs)
    var = xr.Variable(tuple(f"d{i}" for i in range(values.ndim)), values, attrs)
    out = np.asarray(xr.conventions.decode_cf_variable(name, var, decode_times=decode_times).values)
    return out.astype(np.int8) if out.dtype == bool else out


def _diff_dtype(decoded_kind: str, dtype: np.dtype) -> np.dtype | None:
    """dtype of ``B - A`` for decoded values of ``dtype`` (None: no difference defined)."""
    if decoded_kind in "Mm":
        return np.dtype("m8[ns]")
    if decoded_kind in "fc":
        return dtype
    if decoded_kind in "iu":  # bools are decoded to int8 by _decode
        return np.dtype("f8")
    return None


def _group(root: h5py.Group, group: str | None) -> h5py.Group | None:
    if group in (None, "", "/"):
        return root
    path = group.strip("/")
    return root[path] if path in root and isinstance(root[path], h5py.Group) else None


def diff_versions(
    path: str | os.PathLike,
    a: VersionKey,
    b: VersionKey = None,
    *,
    group: str | None = None,
    decode_times: bool = True,
    lazy: bool | None = None,
) -> xr.Dataset:
    """What changed from version ``a`` to version ``b`` in one group, as a Dataset.

    Parameters
    ----------
    path : str or os.PathLike
        The versioned file.
    a : str, int, datetime or None
        The base version (any key ``xr.open_dataset(..., engine="vhdf5")`` takes).
    b : str, int, datetime or None
        The compared version (default the current one).
    group : str, optional
        The group to compare (default the versions' roots); subgroups are not included.
    decode_times : bool
        Decode CF times before subtracting (default True; False for times
        xarray cannot decode, e.g. year-zero units).
    lazy : bool, optional
        Build ``<var>_diff``, ``<var>_changed`` and ``<var>_changes`` of
        modified variables as dask arrays, one block per HDF5 chunk of B,
        and read nothing now (module docstring, "Lazy diffs"). Default: lazy
        for variables of more than :data:`EAGER_BYTES` in B, eager (read now,
        numpy) for the others.

    Returns
    -------
    xarray.Dataset
        ``<var>_diff`` (B - A where both values are numbers and differ) per
        modified numeric or time variable; ``<var>_changed`` (bool, True at
        every changed point of B: NaN <-> value and appended points included)
        and ``<var>_changes`` (changed points per chunk) per added, replaced
        or modified variable. See the module docstring for its structure.

    Raises
    ------
    NotVersionedError, VersionNotFoundError
        No history (:class:`~xarray_vhdf5.errors.NotHDF5Error`: not an HDF5
        file), or no such version.
    KeyError
        ``group`` is in neither version.
    """
    with open_h5file(path, "r", hint="a diff needs a versioned HDF5 file") as f:
        registry = VersionRegistry(f)
        name_a, name_b = registry.resolve(a), registry.resolve(b)
        ga = _group(registry.group[name_a], group)
        gb = _group(registry.group[name_b], group)
        if ga is None and gb is None:
            raise KeyError(f"no group {group!r} in version {name_a!r} nor {name_b!r}")
        in_a = _variables(ga)
        in_b = _variables(gb)
        coords = _index_coords(path, name_b, group, decode_times) if gb is not None else xr.Dataset()
        out = xr.Dataset(coords=coords.coords)
        stored = _StoredPair(path, name_a, name_b, group)
        by_status: dict[str, list[str]] = {s: [] for s in ("added", "removed", "replaced", "modified", "unchanged")}
        attrs_changed = []
        for name in [*in_b, *(n for n in in_a if n not in in_b)]:
            da_, db = in_a.get(name), in_b.get(name)
            every = False
            if da_ is not None and db is not None:
                if changed_attrs(visible_attrs(da_.attrs), visible_attrs(db.attrs)):
                    attrs_changed.append(name)
                every = not _same_decoding(da_, db)
            diff = compare_datasets(name, da_, db, every_chunk=every)
            changes: dict[tuple[int, ...], int] | None = {}
            changed: np.ndarray | None = None
            if diff.status == "modified":
                if _is_lazy(lazy, db):
                    changes, changed = None, _assemble_lazy(name, da_, db, diff, out, decode_times, stored)
                else:
                    changes, changed = _assemble(name, da_, db, diff, out, decode_times)
            by_status[diff.status].append(name)
            if diff.status in ("added", "modified", "replaced"):
                _add_changed(name, db, diff, changed, out)
                _add_counts(name, db, diff, changes, out)
    out.attrs.update(version_a=name_a, version_b=name_b, group=group or "/", **by_status, attrs_changed=attrs_changed)
    return out


def _variables(group: h5py.Group | None) -> dict[str, h5py.Dataset]:
    if group is None:
        return {}
    return {
        k: v
        for k, v in group.items()
        if isinstance(v, h5py.Dataset) and v.is_virtual and "raw_data" in v.attrs and not is_netcdf_dimension_only(v)
    }


def _index_coords(path, version: str, group: str | None, decode_times: bool) -> xr.Dataset:
    with xr.open_dataset(path, engine="vhdf5", version=version, group=group, decode_times=decode_times) as ds:
        coords = ds.coords.to_dataset()
        return coords.drop_vars([k for k in coords.variables if k not in ds.indexes]).load()


def _same_decoding(a: h5py.Dataset, b: h5py.Dataset) -> bool:
    """True when both versions decode their stored values the same way (:data:`DECODING_ATTRS`)."""
    va, vb = visible_attrs(a.attrs), visible_attrs(b.attrs)
    return not changed_attrs(
        {k: va[k] for k in DECODING_ATTRS if k in va}, {k: vb[k] for k in DECODING_ATTRS if k in vb}
    )


def _assemble(
    name: str, a: h5py.Dataset, b: h5py.Dataset, diff: DatasetDiff, out: xr.Dataset, decode_times: bool
) -> tuple[dict, np.ndarray]:
    """Read the candidate chunks; add ``name_diff`` to ``out``.

    Points are compared CF-decoded (each version with its own attributes), so
    a change of ``units`` or ``scale_factor`` is a change of value; strings
    and other non-numeric data are compared as stored. NaN (NaT) in both
    versions is an unchanged point.

    Returns
    -------
    counts : dict
        Changed points per changed chunk (index in B's chunk grid).
    changed : numpy.ndarray of bool
        B's shape: True at the changed points (appended ones included).
    """
    dims, scalar = _out_dims(name, b)
    numeric = b.dtype.kind not in "OSUV" and a.dtype.kind not in "OSUV"
    values = None
    changed_points = np.zeros(b.shape, dtype=bool)  # pages untouched by unchanged chunks stay unallocated
    counts: dict[tuple[int, ...], int] = {}
    points = 0
    for index, region, raw_a, raw_b in iter_candidates(a, b, diff):
        changed = np.ones(raw_b.shape, dtype=bool)
        delta = None
        if raw_a is not None:
            common = tuple(slice(0, n) for n in raw_a.shape)
            if numeric:
                dec_b = _decode(name, b, raw_b, decode_times)[common]
                dec_a = _decode(name, a, raw_a, decode_times)
                changed[common] = ~_same_points(dec_a, dec_b)
                if _diff_dtype(dec_b.dtype.kind, dec_b.dtype) is not None and dec_a.dtype.kind == dec_b.dtype.kind:
                    delta = dec_b - dec_a
            else:
                changed[common] = ~_same_points(raw_a, raw_b[common])
        n = int(changed.sum())
        if not n:
            continue
        counts[index] = n
        points += n
        changed_points[region] = changed
        if delta is not None:
            if values is None:
                values = _empty_diff(delta.dtype, b.shape)
            view = values[region][common]  # basic slicing: a view of values
            mask = changed[common]
            view[mask] = delta.astype(values.dtype)[mask]
    finish(diff, points, len(counts))
    if diff.status != "modified":
        return counts, changed_points
    if values is None and numeric:
        sample = _decode(name, b, b[tuple(slice(0, min(1, n)) for n in b.shape)], decode_times)
        if _diff_dtype(sample.dtype.kind, sample.dtype) is not None:
            values = _empty_diff(sample.dtype, b.shape)
    if values is not None:
        assert diff.shape_a is not None and diff.shape_b is not None  # a modified dataset is in both versions
        attrs = {
            "long_name": f"{name}: B - A",
            "status": diff.status,
            "points_changed": diff.points_changed,
            "points_removed": diff.points_removed,
            "shape_a": list(diff.shape_a),
            "shape_b": list(diff.shape_b),
        }
        units = visible_attrs(b.attrs).get("units")
        if units is not None and values.dtype.kind != "m":
            attrs["units"] = units
        out[f"{name}_diff"] = xr.Variable((), values.reshape(()), attrs) if scalar else xr.Variable(dims, values, attrs)
    return counts, changed_points


def _add_changed(name: str, b: h5py.Dataset, diff: DatasetDiff, changed: np.ndarray | None, out: xr.Dataset) -> None:
    """Add ``name_changed``: True at the points of B that changed (all of them when ``changed`` is None)."""
    dims, scalar = _out_dims(name, b)
    if changed is None:  # added or replaced: every point of B is new
        changed = np.broadcast_to(np.True_, b.shape)
    assert diff.shape_b is not None  # added, modified or replaced: in B
    attrs: dict[str, object] = {
        "long_name": f"{name}: changed points",
        "status": diff.status,
        "points_changed": diff.points_changed,  # left out of a lazy diff: not counted yet
        "points_removed": diff.points_removed,
    }
    if diff.points_changed is None:
        del attrs["points_changed"]
    if diff.shape_a is not None:
        attrs["shape_a"] = list(diff.shape_a)
    attrs["shape_b"] = list(diff.shape_b)
    out[f"{name}_changed"] = (
        xr.Variable((), changed.reshape(()), attrs) if scalar else xr.Variable(dims, changed, attrs)
    )


def _empty_diff(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """An all-missing array for differences of values of ``dtype``."""
    out_dtype = _diff_dtype(dtype.kind, dtype)
    assert out_dtype is not None, dtype  # callers check _diff_dtype first
    return np.full(shape, np.timedelta64("NaT") if out_dtype.kind == "m" else np.nan, dtype=out_dtype)


def _count_block(block: np.ndarray) -> np.ndarray:
    """The changed points of one block of ``name_changed`` (one HDF5 chunk), as a ``(1, ..., 1)`` array."""
    return np.array(block.sum(), np.int64).reshape((1,) * block.ndim)


def _add_counts(name: str, b: h5py.Dataset, diff: DatasetDiff, counts: dict | None, out: xr.Dataset) -> None:
    """Add ``name_changes``: changed points per chunk of B (``counts`` None: lazy, from ``name_changed``)."""
    dims, scalar = _out_dims(name, b)
    chunks = diff.chunks
    grid = chunk_grid_shape(b.shape, chunks)
    if diff.status in ("added", "replaced"):  # every point of B is new
        per_chunk = np.ones(grid, dtype=np.int64)
        for axis, (n, c, g) in enumerate(zip(b.shape, chunks, grid)):
            sizes = np.minimum((np.arange(g) + 1) * c, n) - np.arange(g) * c
            shape = [1] * len(grid)
            shape[axis] = g
            per_chunk = per_chunk * sizes.reshape(shape)
    elif counts is None:  # lazy: counted per block of name_changed when computed
        per_chunk = out[f"{name}_changed"].data.map_blocks(
            _count_block, chunks=tuple((1,) * g for g in grid), dtype=np.int64
        )
    else:
        per_chunk = np.zeros(grid, dtype=np.int64)
        for index, n in counts.items():
            per_chunk[index] = n
    attrs = {
        "long_name": f"{name}: changed points per chunk",
        "chunks": list(chunks),
        "chunks_total": diff.chunks_total,
        "chunks_read": len(diff.candidates) if diff.status == "modified" else 0,
    }
    if counts is not None or diff.status != "modified":
        attrs["chunks_changed"] = int(np.count_nonzero(per_chunk))
    if scalar:
        out[f"{name}_changes"] = xr.Variable((), per_chunk.reshape(()), attrs)
        return
    chunk_dims = tuple(f"{name}_chunk_{d}" for d in dims)
    coords = {}
    for d, cd, c, g in zip(dims, chunk_dims, chunks, grid):
        starts = np.arange(g) * c
        if d in out.indexes and out.sizes.get(d) == b.shape[dims.index(d)]:
            coords[cd] = (cd, out[d].values[starts], {"long_name": f"{d} at the chunk's first point"})
        else:
            coords[cd] = (cd, starts, {"long_name": f"first point of the chunk along {d}"})
    out[f"{name}_changes"] = xr.DataArray(per_chunk, dims=chunk_dims, coords=coords, attrs=attrs)


#: Variables larger than this in B (bytes, stored dtype) are diffed lazily by default.
EAGER_BYTES = 256 * 2**20


def _is_lazy(lazy: bool | None, b: h5py.Dataset) -> bool:
    """Whether to diff ``b`` lazily: ``lazy`` if given, else when it exceeds :data:`EAGER_BYTES`."""
    if b.ndim == 0 or (b.shape == (1,) and _dims(b) == ()):
        return False  # a scalar: one point
    if lazy is not None:
        return bool(lazy)
    return b.dtype.itemsize * int(np.prod(b.shape)) > EAGER_BYTES


class _StoredPair:
    """The stored (undecoded) lazy variables of versions A and B of one group, opened on first use.

    Each read of one of their regions reads only the chunks it touches, from
    their chunk bytes (:mod:`~xarray_vhdf5._backend.manifest`); they pickle, so
    dask workers read them as well.
    """

    def __init__(self, path, name_a: str, name_b: str, group: str | None):
        self.path, self.names, self.group = path, (name_a, name_b), group
        self._opened: dict[str, xr.Dataset] = {}

    def variable(self, which: int, name: str) -> xr.Variable:
        version = self.names[which]
        if version not in self._opened:
            self._opened[version] = xr.open_dataset(
                self.path, engine="vhdf5", version=version, group=self.group, decode_cf=False
            )
        return self._opened[version][name].variable


class _ChunkPair:
    """Reads one candidate chunk of A and B and compares them (a dask task; pickles by value)."""

    def __init__(self, name, raw_a, raw_b, attrs_a, attrs_b, shape_a, numeric, decode_times, delta_dtype):
        self.name, self.raw_a, self.raw_b = name, raw_a, raw_b
        self.attrs_a, self.attrs_b, self.shape_a = attrs_a, attrs_b, shape_a
        self.numeric, self.decode_times, self.delta_dtype = numeric, decode_times, delta_dtype

    def __call__(self, region: tuple[slice, ...]) -> tuple[np.ndarray, np.ndarray | None]:
        """``(changed, B - A)`` over ``region`` of B (points), as :func:`_assemble` computes them."""
        raw_b = np.asarray(self.raw_b[region].values)
        clipped = tuple(slice(r.start, min(r.stop, n)) for r, n in zip(region, self.shape_a))
        changed = np.ones(raw_b.shape, dtype=bool)
        delta = None if self.delta_dtype is None else np.full(raw_b.shape, _missing(self.delta_dtype), self.delta_dtype)
        if all(c.stop > c.start for c in clipped):
            raw_a = np.asarray(self.raw_a[clipped].values)
            common = tuple(slice(0, n) for n in raw_a.shape)
            if self.numeric:
                dec_b = _decode(self.name, self.attrs_b, raw_b, self.decode_times)[common]
                dec_a = _decode(self.name, self.attrs_a, raw_a, self.decode_times)
                changed[common] = ~_same_points(dec_a, dec_b)
                if delta is not None and dec_a.dtype.kind == dec_b.dtype.kind:
                    mask = changed[common]  # only the changed points: no chunk-sized temporaries
                    view = delta[common]
                    view[mask] = (dec_b[mask] - dec_a[mask]).astype(self.delta_dtype)
            else:
                changed[common] = ~_same_points(raw_a, raw_b[common])
        return changed, delta


def _missing(dtype: np.dtype):
    return np.timedelta64("NaT") if dtype.kind == "m" else np.nan


def _assemble_lazy(
    name: str,
    a: h5py.Dataset,
    b: h5py.Dataset,
    diff: DatasetDiff,
    out: xr.Dataset,
    decode_times: bool,
    stored: _StoredPair,
):
    """Add a lazy ``name_diff`` to ``out``; return ``name_changed``'s dask array. Reads nothing.

    One block per chunk of B's grid: a chunk that is not a candidate (mapped
    to the same raw_data rows in A and B) is a constant block (False, NaN),
    never read; a candidate is one task reading A's and B's chunk.
    """
    import dask
    import dask.array as dsa

    dims, _ = _out_dims(name, b)
    attrs_a, attrs_b = visible_attrs(a.attrs), visible_attrs(b.attrs)
    numeric = b.dtype.kind not in "OSUV" and a.dtype.kind not in "OSUV"
    delta_dtype = None
    if numeric:  # decoded dtypes, from no point
        dec_b = _decode(name, attrs_b, np.empty((0,) * b.ndim, b.dtype), decode_times)
        delta_dtype = _diff_dtype(dec_b.dtype.kind, dec_b.dtype)
    pair = _ChunkPair(
        name,
        stored.variable(0, name),
        stored.variable(1, name),
        attrs_a,
        attrs_b,
        a.shape,
        numeric,
        decode_times,
        delta_dtype,
    )
    candidates = set(diff.candidates)
    grid = chunk_grid_shape(b.shape, diff.chunks)
    # named, not tokenized: tokenizing would pickle the stored variables
    token = dask.base.tokenize(os.fspath(stored.path), stored.names, stored.group, name, os.getpid(), id(pair))
    reader = dask.delayed(pair, name=f"vhdf5-pair-{token}")
    changed_blocks = np.empty(grid, dtype=object)
    delta_blocks = np.empty(grid, dtype=object)
    for index in np.ndindex(*grid):
        region = chunk_slices(index, b.shape, diff.chunks)
        shape = tuple(r.stop - r.start for r in region)
        if index in candidates:
            task = reader(region, dask_key_name=f"vhdf5-diff-{token}-{index}")
            changed_blocks[index] = dsa.from_delayed(task[0], shape, dtype=bool)
            if delta_dtype is not None:
                delta_blocks[index] = dsa.from_delayed(task[1], shape, dtype=delta_dtype)
        else:
            changed_blocks[index] = dsa.zeros(shape, dtype=bool, chunks=shape)
            if delta_dtype is not None:
                delta_blocks[index] = dsa.full(shape, _missing(delta_dtype), dtype=delta_dtype, chunks=shape)
    changed = dsa.block(changed_blocks.tolist())
    if delta_dtype is not None:
        assert diff.shape_a is not None and diff.shape_b is not None  # a modified dataset is in both versions
        attrs = {
            "long_name": f"{name}: B - A",
            "status": diff.status,
            "points_removed": diff.points_removed,
            "shape_a": list(diff.shape_a),
            "shape_b": list(diff.shape_b),
        }
        units = attrs_b.get("units")
        if units is not None and delta_dtype.kind != "m":
            attrs["units"] = units
        out[f"{name}_diff"] = xr.Variable(dims, dsa.block(delta_blocks.tolist()), attrs)
    return changed


def _group_paths(root: h5py.Group | None, path: str = "/") -> list[str]:
    """``["/", "/a", "/a/b", ...]``: the groups below ``root``, depth first, in creation order."""
    if root is None:
        return []
    found = [path]
    for key, item in root.items():
        if isinstance(item, h5py.Group):
            found += _group_paths(item, f"{path.rstrip('/')}/{key}")
    return found


def diff_datatree(
    path: str | os.PathLike,
    a: VersionKey,
    b: VersionKey = None,
    *,
    group: str | None = None,
    decode_times: bool = True,
    lazy: bool | None = None,
) -> xr.DataTree:
    """What changed from version ``a`` to ``b`` in every group below ``group``, as a DataTree.

    Parameters
    ----------
    path, a, b, decode_times, lazy
        As :func:`diff_versions`.
    group : str, optional
        The group that becomes the tree's root (default the versions' roots).

    Returns
    -------
    xarray.DataTree
        One node per group of A or B below ``group`` (B's groups first, in
        creation order, then those only A has), each the :func:`diff_versions`
        Dataset of that group alone (its variables; subgroups are their own
        nodes). A group only A has holds only its removed variables' names
        (attribute ``removed``).

    Raises
    ------
    NotVersionedError, VersionNotFoundError
        As :func:`diff_versions`.
    KeyError
        ``group`` is in neither version.
    ValueError
        The node Datasets do not form a valid DataTree (a group's coordinates
        do not align with those it inherits).
    """
    with open_h5file(path, "r", hint="a diff needs a versioned HDF5 file") as f:
        registry = VersionRegistry(f)
        roots = [_group(registry.group[registry.resolve(key)], group) for key in (a, b)]
        if roots[0] is None and roots[1] is None:
            raise KeyError(f"no group {group!r} in version {a!r} nor {b!r}")
        in_b = _group_paths(roots[1])
        paths = in_b + [p for p in _group_paths(roots[0]) if p not in in_b]
    base = "/" + (group or "").strip("/")
    nodes = {}
    for node in paths:
        inside = "/".join(x for x in (base.strip("/"), node.strip("/")) if x)
        nodes[node] = diff_versions(
            path, a, b, group=f"/{inside}" if inside else None, decode_times=decode_times, lazy=lazy
        )
    return xr.DataTree.from_dict(nodes)
