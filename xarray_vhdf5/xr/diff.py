"""The differences between two versions as an xarray Dataset that plots directly.

``ds.vhdf5.diff(other)`` (or :func:`diff_versions`) compares version A (the
base, ``other``) with version B (the Dataset's own version), like
``git diff other``. The chunk-level work is :mod:`xarray_vhdf5.versions.diff`:
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
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import xarray as xr

from ..backend.chunks import chunk_grid_shape
from ..backend.signature import open_h5file
from ..versions.diff import DatasetDiff, compare_datasets, equal_points, finish, iter_candidates
from ..versions.history import changed_attrs
from ..versions.registry import VersionKey, VersionRegistry
from ..backend.names import DIMENSIONS_ATTR, is_netcdf_dimension_only, visible_attrs

__all__ = ["DECODING_ATTRS", "diff_versions"]

#: Attributes that change a variable's CF-decoded values: when one differs between
#: the versions, every chunk is read and compared decoded.
DECODING_ATTRS = ("units", "calendar", "scale_factor", "add_offset", "_FillValue", "missing_value",
                  "_Unsigned", "dtype")


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


def _decode(name: str, ds: h5py.Dataset, values: np.ndarray, decode_times: bool) -> np.ndarray:
    """CF-decode stored points of ``ds`` with its own attributes (units, scale_factor, _FillValue...)."""
    var = xr.Variable(tuple(f"d{i}" for i in range(values.ndim)), values, visible_attrs(ds.attrs))
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
            changes = {}
            changed = None
            if diff.status == "modified":
                changes, changed = _assemble(name, da_, db, diff, out, decode_times)
            by_status[diff.status].append(name)
            if diff.status in ("added", "modified", "replaced"):
                _add_changed(name, db, diff, changed, out)
                _add_counts(name, db, diff, changes, out)
    out.attrs.update(version_a=name_a, version_b=name_b, group=group or "/", **by_status,
                     attrs_changed=attrs_changed)
    return out


def _variables(group: h5py.Group | None) -> dict[str, h5py.Dataset]:
    if group is None:
        return {}
    return {
        k: v for k, v in group.items()
        if isinstance(v, h5py.Dataset) and v.is_virtual and "raw_data" in v.attrs and not is_netcdf_dimension_only(v)
    }


def _index_coords(path, version: str, group: str | None, decode_times: bool) -> xr.Dataset:
    with xr.open_dataset(path, engine="vhdf5", version=version, group=group, decode_times=decode_times) as ds:
        coords = ds.coords.to_dataset()
        return coords.drop_vars([k for k in coords.variables if k not in ds.indexes]).load()


def _same_decoding(a: h5py.Dataset, b: h5py.Dataset) -> bool:
    """True when both versions decode their stored values the same way (:data:`DECODING_ATTRS`)."""
    va, vb = visible_attrs(a.attrs), visible_attrs(b.attrs)
    return not changed_attrs({k: va[k] for k in DECODING_ATTRS if k in va}, {k: vb[k] for k in DECODING_ATTRS if k in vb})


def _assemble(name: str, a: h5py.Dataset, b: h5py.Dataset, diff: DatasetDiff, out: xr.Dataset,
              decode_times: bool) -> tuple[dict, np.ndarray]:
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


def _add_changed(name: str, b: h5py.Dataset, diff: DatasetDiff, changed: np.ndarray | None,
                 out: xr.Dataset) -> None:
    """Add ``name_changed``: True at the points of B that changed (all of them when ``changed`` is None)."""
    dims, scalar = _out_dims(name, b)
    if changed is None:  # added or replaced: every point of B is new
        changed = np.broadcast_to(np.True_, b.shape)
    attrs = {
        "long_name": f"{name}: changed points",
        "status": diff.status,
        "points_changed": diff.points_changed,
        "points_removed": diff.points_removed,
    }
    if diff.shape_a is not None:
        attrs["shape_a"] = list(diff.shape_a)
    attrs["shape_b"] = list(diff.shape_b)
    out[f"{name}_changed"] = xr.Variable((), changed.reshape(()), attrs) if scalar else xr.Variable(dims, changed, attrs)


def _empty_diff(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """An all-missing array for differences of values of ``dtype``."""
    out_dtype = _diff_dtype(dtype.kind, dtype)
    return np.full(shape, np.timedelta64("NaT") if out_dtype.kind == "m" else np.nan, dtype=out_dtype)


def _add_counts(name: str, b: h5py.Dataset, diff: DatasetDiff, counts: dict, out: xr.Dataset) -> None:
    """Add ``name_changes``: changed points per chunk of B."""
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
    else:
        per_chunk = np.zeros(grid, dtype=np.int64)
        for index, n in counts.items():
            per_chunk[index] = n
    attrs = {
        "long_name": f"{name}: changed points per chunk",
        "chunks": list(chunks),
        "chunks_total": diff.chunks_total,
        "chunks_read": len(diff.candidates) if diff.status == "modified" else 0,
        "chunks_changed": int(np.count_nonzero(per_chunk)),
    }
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
