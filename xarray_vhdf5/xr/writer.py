"""Committing an xarray Dataset as a version (``ds.vhdf5.commit(version, path=...)``).

The Dataset is CF-encoded by xarray itself (:func:`xarray.conventions.encode_dataset_coordinates`
and :func:`xarray.conventions.cf_encoder`, as xarray's own writers do), then each
variable becomes a dataset of the version's group:

- dimension names in the ``_ARRAY_DIMENSIONS`` attribute (scalars are stored as
  one point with an empty list there);
- ``encoding["chunks"]`` (or netCDF4's ``chunksizes``) gives the chunk shape,
  else one record per chunk for n-d variables (see ``guess_chunks_record``);
- ``encoding`` compression (``compression``/``compression_opts``, or netCDF4's
  ``zlib``/``complevel``), ``shuffle`` and ``fletcher32`` become HDF5 filters;
- ``_FillValue`` becomes the HDF5 fill value too, so chunks entirely missing
  (land in an ocean field) are not stored at all.

The new version replaces the group's content: variables absent from the
Dataset are absent from the version. Unchanged chunks are deduplicated by hash
against every earlier version, so re-committing a mostly unchanged Dataset
writes only the chunks that differ.

dask-backed variables are not computed here: they are staged lazily and the
commit streams them chunk by chunk in bounded memory, computing and hashing
chunks on the dask workers (:mod:`~xarray_vhdf5.xr.streaming`).

After the commit, the writer makes the version readable by netCDF tools
(:func:`~xarray_vhdf5.xr.dimscales.attach_dimension_scales`).
:func:`commit_datatree` commits a whole ``xr.DataTree`` as one version.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
from typing import Any

import h5py
import numpy as np
import xarray as xr
from xarray.coding import strings

from ..backend.chunks import guess_chunks_record
from ..errors import IncompatibleDataError, NothingToCommitError, NotVersionedError, StaleVersionError
from ..staging import cast_for_storage
from ..versions.file import VersionedHDF5File
from ..versions.mutation import open_for_writing
from ..versions.registry import is_versioned
from ..wrappers.group import InMemoryGroup
from .dimscales import attach_dimension_scales
from .engine import close_read_handles
from .names import (
    DIMENSIONS_ATTR,
    HIDDEN_GROUP_ATTRS,
    MESSAGE_ATTR,
    is_netcdf_dimension_only,
    names_dimensions,
    visible_attrs,
)
from .streaming import DEFAULT_MAX_BYTES, is_dask_array, stage_lazy_dataset
from .staged_array import checked_string_encoding

__all__ = [
    "DEFAULT_COMPRESSION",
    "check_sorted_index",
    "cf_encode_variables",
    "commit_dataset",
    "commit_datatree",
    "encode_char_array",
    "inherit_stored_encoding",
    "is_char_array_encoding",
    "kept_attrs",
    "next_version_name",
    "prepare_fill_encoding",
    "refuse_empty_commit",
    "staged_change",
    "variable_chunks",
    "write_variable",
    "write_variables",
]

_COMPRESSION_KEYS = ("compression", "compression_opts", "zlib", "complevel", "shuffle", "fletcher32")

#: HDF5 filters of a new numeric variable whose encoding names no compression (neither
#: ``compression`` nor netCDF4's ``zlib``): byte shuffle, then deflate level 1, which every
#: HDF5 and netCDF tool reads. Opt out per variable with ``encoding={"compression": None}``
#: (or ``"zlib": False``); choose another with ``compression``/``compression_opts`` or
#: ``zlib``/``complevel``. Variables opened from a netCDF file carry their source's choice
#: (xarray's netcdf4 and h5netcdf engines put it in the encoding). A dataset that exists
#: keeps the filters its first version fixed.
DEFAULT_COMPRESSION = {"compression": "gzip", "compression_opts": 1, "shuffle": True}

#: The attributes that say how a dataset's stored numbers map to values (xarray's
#: CFMaskCoder and CFScaleOffsetCoder); with ``dtype``, the encoding a replacing
#: variable takes from the dataset when its own is silent.
_STORAGE_ATTRS = ("_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned")


def next_version_name(vf: VersionedHDF5File) -> str:
    """Auto-generated version name: ``"r<N>"`` with N one more than the versions in the file.

    If that name exists (versions deleted or named so by hand), N grows until free.
    """
    n = len(vf) + 1
    while f"r{n}" in vf:
        n += 1
    return f"r{n}"


def variable_chunks(name: str, var: xr.Variable) -> tuple[int, ...]:
    """Chunk shape of an encoded variable, in points (see the module docstring).

    Raises
    ------
    IncompatibleDataError
        ``encoding["chunks"]`` does not have one positive int per dimension.
    """
    chunks = var.encoding.get("chunks") or var.encoding.get("chunksizes")
    shape = var.shape if var.ndim else (1,)
    if chunks:
        chunks = tuple(int(c) for c in chunks)
        if len(chunks) != len(shape) or any(c <= 0 for c in chunks):
            raise IncompatibleDataError(
                f"variable {name!r}: encoding['chunks'] {chunks} does not fit its shape {var.shape}"
            )
        return chunks
    if len(shape) == 1:
        return (min(4096, max(512, shape[0])),)
    return guess_chunks_record(shape, var.dtype.itemsize if var.dtype.kind != "O" else 8)


def _filters(var: xr.Variable) -> dict[str, Any]:
    enc = var.encoding
    kw: dict[str, Any] = {}
    if enc.get("compression") is not None:
        kw["compression"] = enc["compression"]
        if enc.get("compression_opts") is not None:
            kw["compression_opts"] = enc["compression_opts"]
    elif enc.get("zlib"):
        kw["compression"] = "gzip"
        kw["compression_opts"] = enc.get("complevel", 4)
    if enc.get("shuffle") and kw:
        kw["shuffle"] = True
    if enc.get("fletcher32"):
        kw["fletcher32"] = True
    return kw


def _default_filters(var: xr.Variable) -> bool:
    """True when ``var`` gets :data:`DEFAULT_COMPRESSION`: numeric, not scalar, its encoding silent."""
    enc = var.encoding
    return var.ndim > 0 and var.dtype.kind in "iuf" and "compression" not in enc and "zlib" not in enc


def _stored_values(name: str, var: xr.Variable) -> np.ndarray:
    values = np.asarray(var.values)
    if values.dtype.kind == "U":
        values = values.astype(object)
    if values.dtype.kind == "O":
        bad = next((v for v in values.flat if not isinstance(v, (str, bytes))), None)
        if bad is not None:
            raise IncompatibleDataError(
                f"variable {name!r} holds {type(bad).__name__} objects; only str/bytes objects can be stored"
            )
    if values.dtype.kind not in "biufcSOV":
        raise IncompatibleDataError(
            f"variable {name!r}: dtype {values.dtype} cannot be stored in HDF5 after CF encoding"
        )
    return values if var.ndim else values.reshape(1)


def inherit_stored_encoding(group: InMemoryGroup, variables: dict) -> dict:
    """``variables``, each replacing a dataset of ``group`` encoded as that dataset is stored where it is silent.

    xarray drops a variable's encoding through arithmetic
    (``staged["SST"] = staged["SST"] + 1``), so the CF encoder would choose
    defaults (a NaN ``_FillValue`` for floats, no packing) where the dataset's
    first version fixed another dtype and fill value (FORMAT.md: the commit
    then refuses with :class:`~xarray_vhdf5.errors.IncompatibleDataError`),
    or give its stored numbers another meaning. As xarray's own zarr backend
    encodes variables written into an existing store as the store holds them,
    a variable replacing a numeric dataset of ``group`` takes, of ``dtype`` and
    the attributes in ``_STORAGE_ATTRS``, those it sets neither in its
    ``encoding`` nor its ``attrs``, decoded from the dataset by xarray
    (:func:`xarray.conventions.decode_cf_variable`). A dataset stored without
    ``_FillValue`` gives ``_FillValue=None`` (none). ``dtype`` is taken only
    where it cannot change what a number means: the dataset is packed
    (``scale_factor``/``add_offset``: the decoded values are quantized into
    it by design), or both dtypes are of one kind (float64 arithmetic on a
    float32 dataset); float values for an integer dataset keep their dtype,
    and the commit refuses them instead of truncating (nothing is inherited
    then: the stored fill value need not fit their dtype). What the variable sets
    itself wins: a choice that conflicts with the first version is still
    refused at commit.

    Parameters
    ----------
    group : InMemoryGroup
        The staged version's group, still holding the parent version's datasets.
    variables : dict of name to xarray.Variable
        Not yet CF-encoded (:func:`xarray.conventions.encode_dataset_coordinates`'s output).

    Returns
    -------
    dict
        The same variables; those that inherit something are shallow copies
        with the extended encoding (``variables`` is not changed).
    """
    out = dict(variables)
    for key, var in variables.items():
        name = str(key)
        dataset = group[name] if "/" not in name and name in group else None
        if isinstance(dataset, InMemoryGroup):
            dataset = None
        if dataset is not None and var.dtype.kind in "OSU":
            var = _inherit_char_array(var, dataset)
        var = out[key] = checked_string_encoding(name, var)  # no silently truncated strings
        if dataset is None:
            continue
        stored = _stored_encoding(name, dataset)
        packed = "scale_factor" in stored or "add_offset" in stored
        if "dtype" in stored and not packed and np.dtype(stored["dtype"]).kind != var.dtype.kind:
            continue  # int <-> float: refused at commit, not cast
        inherited = {k: v for k, v in stored.items() if k not in var.encoding and k not in var.attrs}
        if "dtype" in inherited and not packed and not is_dask_array(var.data):
            cast_for_storage(var.values, inherited["dtype"], name)  # xarray's encoder would cast it unchecked
        if inherited:
            var = var.copy(deep=False)
            var.encoding = {**inherited, **var.encoding}
            out[key] = var
    return out


def _inherit_char_array(var: xr.Variable, dataset) -> xr.Variable:
    """``var`` (strings) replacing netCDF char array ``dataset``: encoded as one again where it is silent.

    A dataset stored as a char array (``S1``, one more dimension than ``var``)
    was written from strings whose ``encoding["dtype"]`` was ``S1``; xarray
    drops that encoding through ``xr.concat`` or arithmetic, and its default
    for strings is not a char array. Without a ``dtype`` of its own, ``var``
    takes ``S1`` and, if ``dataset`` has one, its ``_Encoding``.
    """
    if "dtype" in var.encoding or np.dtype(dataset.dtype) != np.dtype("S1") or len(dataset.shape) != var.ndim + 1:
        return var
    extra = {"dtype": np.dtype("S1")}
    if var.dtype.kind in "UO" and "_Encoding" in dataset.attrs and "_Encoding" not in var.attrs:
        value = dataset.attrs["_Encoding"]
        extra["_Encoding"] = value.decode() if isinstance(value, bytes) else str(value)
    var = var.copy(deep=False)
    var.encoding = {**var.encoding, **extra}
    return var


def is_char_array_encoding(var: xr.Variable) -> bool:
    """True if ``var`` (strings, not yet CF-encoded) is stored as a netCDF ``char`` array.

    As xarray's netCDF writers do: ``encoding["dtype"] == "S1"``, which
    xarray's decoders record for every char array they decode (with
    ``char_dim_name``, the string dimension), and which users set to ask for one.
    """
    dtype = var.encoding.get("dtype")
    if var.dtype.kind not in "OSU" or dtype is None or dtype is str:
        return False
    try:
        return np.dtype(dtype) == np.dtype("S1")
    except TypeError:
        return False


def encode_char_array(name: str, var: xr.Variable) -> xr.Variable:
    """A CF-encoded string variable with ``encoding["dtype"] == "S1"`` as a netCDF ``char`` array.

    What xarray's netCDF-4 writers do (their ``encode_variable``):
    :class:`xarray.coding.strings.EncodedStringCoder` (``str`` becomes bytes in
    ``_Encoding``, default UTF-8, recorded as that attribute), then
    :class:`xarray.coding.strings.CharacterArrayCoder` (fixed-width bytes
    become ``S1`` characters along a new last dimension, named by
    ``encoding["char_dim_name"]`` or ``string<width>``). An object array of
    bytes (or of str) is first given xarray's variable-length dtype
    (:func:`xarray.coding.strings.create_vlen_dtype`), missing values
    (``None``, NaN) becoming empty strings, as xarray's writers do; the width is
    that of the longest value, so nothing is cut. Other variables are
    returned as they are (one dtype check).

    Parameters
    ----------
    name : str
        The variable's name, for messages.
    var : xarray.Variable
        CF-encoded (:func:`xarray.conventions.cf_encoder`), which keeps an
        ``S1`` ``encoding["dtype"]`` for this step.

    Returns
    -------
    xarray.Variable
        ``S1`` with one more dimension than ``var``, or ``var``.

    Raises
    ------
    IncompatibleDataError
        An object array holding other objects than str or bytes, or both.
    """
    if not is_char_array_encoding(var):
        return var
    if var.dtype.kind == "O" and strings.check_vlen_dtype(var.dtype) is None and not is_dask_array(var.data):
        values = np.asarray(var.values)
        types = {type(v) for v in values.flat if not _missing(v)}
        kind = bytes if types <= {bytes, np.bytes_} else str if types <= {str, np.str_} else None
        if kind is None:
            raise IncompatibleDataError(
                f"variable {name!r}: a char array (encoding dtype 'S1') holds "
                f"{sorted(t.__name__ for t in types)} objects; only all bytes or all str can be stored"
            )
        empty = b"" if kind is bytes else ""
        filled = np.empty(values.shape, dtype=strings.create_vlen_dtype(kind))
        filled[...] = [empty if _missing(v) else kind(v) for v in values.flat] if values.size else []
        var = xr.Variable(var.dims, filled, var.attrs, var.encoding)
    var = strings.EncodedStringCoder(allows_unicode=True).encode(var, name=name)
    return strings.CharacterArrayCoder().encode(var, name=name)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _stored_encoding(name: str, dataset) -> dict[str, Any]:
    """``dtype`` and the mask/scale encoding of a numeric staged dataset, as xarray decodes them."""
    dtype = np.dtype(dataset.dtype)
    if dtype.kind not in "biuf":
        return {}
    attrs = {k: dataset.attrs[k] for k in _STORAGE_ATTRS if k in dataset.attrs}
    stand_in = xr.Variable((), np.zeros((), dtype), attrs)
    decoded = xr.conventions.decode_cf_variable(name, stand_in, decode_times=False, decode_timedelta=False)
    encoding = {k: v for k, v in decoded.encoding.items() if k == "dtype" or k in _STORAGE_ATTRS}
    encoding.setdefault("_FillValue", None)
    return encoding


def prepare_fill_encoding(variables: dict) -> tuple[dict, dict]:
    """``variables`` made encodable when CF's ``missing_value`` comes without a matching ``_FillValue``.

    xarray's encoder (:func:`xarray.conventions.encode_cf_variable`) adds a
    NaN ``_FillValue`` to a float variable whose ``encoding`` and ``attrs``
    name none, even when they name a ``missing_value``; read back, the pair
    (NaN, ``missing_value``) then makes its ``CFMaskCoder`` refuse every later
    write ("conflicting _FillValue and missing_value"): a dead end after one
    round trip, with xarray's netCDF engines too. Here:

    - ``missing_value`` without any ``_FillValue``: encoded with
      ``_FillValue=None`` (no default NaN added); missing points are stored as
      ``missing_value`` and the dataset keeps ``missing_value`` only, as in
      the source file (CF readers mask either).
    - both, and they differ (e.g. the NaN a first round trip added beside a
      ``missing_value``): missing points are encoded as ``missing_value`` when
      ``_FillValue`` is NaN, else as ``_FillValue``, and both attributes are
      stored as they were (xarray decodes either as missing).

    Parameters
    ----------
    variables : dict of name to xarray.Variable
        Not yet CF-encoded.

    Returns
    -------
    variables : dict
        The same variables; those changed are shallow copies (``variables``
        is not changed).
    restore : dict
        Name -> ``{attribute: value}`` to set on the encoded variable
        (:func:`cf_encode_variables` applies it).
    """
    out, restore = dict(variables), {}
    for key, var in variables.items():
        enc, attrs = var.encoding, var.attrs
        mv = enc.get("missing_value", attrs.get("missing_value"))
        if mv is None:
            continue
        has_fv = "_FillValue" in enc or "_FillValue" in attrs
        fv = enc.get("_FillValue", attrs.get("_FillValue"))
        if has_fv and fv is not None and _equivalent_fill(fv, mv):
            continue
        var = var.copy(deep=False)
        var.attrs = {k: v for k, v in attrs.items() if k not in ("_FillValue", "missing_value")}
        encoding = {k: v for k, v in enc.items() if k not in ("_FillValue", "missing_value")}
        if fv is None or bool(np.all(np.isnan(np.asarray(fv, dtype=float)))):
            encoding.update(_FillValue=None, missing_value=mv)
            if fv is not None:
                restore[key] = {"_FillValue": fv}
        else:
            encoding.update(_FillValue=fv, missing_value=None)
            restore[key] = {"missing_value": mv}
        var.encoding = encoding
        out[key] = var
    return out, restore


def _equivalent_fill(fv, mv) -> bool:
    try:
        a, b = np.asarray(fv), np.asarray(mv)
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc"))
    except (TypeError, ValueError):
        return False


def cf_encode_variables(variables: dict, attrs: dict) -> tuple[dict, dict]:
    """:func:`xarray.conventions.cf_encoder` after :func:`prepare_fill_encoding`, then char arrays.

    As xarray's netCDF-4 writers: strings with ``encoding["dtype"] == "S1"``
    become netCDF ``char`` arrays (:func:`encode_char_array`); other strings
    are left as they are (``str``: variable-length strings, fixed-width bytes:
    fixed-length HDF5 strings).

    Raises
    ------
    ValueError
        As xarray's encoder; the message names the variable.
    IncompatibleDataError
        A char array of objects other than all bytes or all str.
    """
    prepared, restore = prepare_fill_encoding(variables)
    encoded, enc_attrs = xr.conventions.cf_encoder(prepared, attrs)
    for key, extra in restore.items():
        var = encoded[key]
        for attr, value in extra.items():
            var.attrs[attr] = _attr_of_dtype(value, var.dtype, var.attrs)
    for key, var in encoded.items():
        if var.dtype.kind in "OSU":  # numbers: this one check
            encoded[key] = encode_char_array(str(key), var)
    return encoded, enc_attrs


def _attr_of_dtype(value, dtype: np.dtype, attrs: dict):
    """A fill attribute in the stored dtype (as xarray casts them), unless the data is packed."""
    if "scale_factor" in attrs or "add_offset" in attrs or np.dtype(dtype).kind not in "biuf":
        return value
    try:
        return np.dtype(dtype).type(value)
    except (TypeError, ValueError, OverflowError):
        return value


#: Attributes whose stored value must also match the stored dtype to be kept.
_DTYPE_BOUND_ATTRS = frozenset({"_FillValue", "missing_value", "valid_min", "valid_max", "valid_range",
                                "scale_factor", "add_offset", "_Unsigned"})


def kept_attrs(stored: Any, new: dict, same_dtype: bool) -> dict:
    """``new`` attributes, with the stored value kept wherever it means the same.

    So that an unchanged variable is stored unchanged: xarray's encoder
    rewrites some attributes in a canonical form (``units`` of CF times lose a
    ``00:00:00`` time of day: ``'days since 2024-01-01 00:00:00'`` becomes
    ``'days since 2024-01-01'``; numbers may come back as another numpy
    scalar type), which would make ``vhdf5 log`` and ``diff`` report the
    variable changed. An attribute keeps its stored value (and type) when
    the new one is equal (:func:`~xarray_vhdf5.versions.history.same_attr_value`),
    or both are CF time units that decode the same numbers to the same times
    (xarray's :class:`~xarray.coders.CFDatetimeCoder`); attributes tied to the
    stored numbers (``_FillValue``, ``scale_factor``...) only when the stored
    dtype is unchanged.

    Parameters
    ----------
    stored : mapping
        The attributes of the dataset being replaced (h5py or staged ``attrs``).
    new : dict
        The CF-encoded variable's attributes.
    same_dtype : bool
        The new values are stored in the dataset's dtype.

    Returns
    -------
    dict
        ``new`` with kept values.
    """
    from ..versions.history import same_attr_value

    out = dict(new)
    for key, value in new.items():
        if key not in stored or (key in _DTYPE_BOUND_ATTRS and not same_dtype):
            continue
        old = stored[key]
        if same_attr_value(old, value):
            out[key] = old
        elif (key == "units" and isinstance(old, (str, bytes)) and isinstance(value, (str, bytes))
              and _same_time_units(old, value, _hashable(new.get("calendar")))):
            out[key] = old
    return out


def _hashable(value):
    return value if value is None or isinstance(value, (str, bytes)) else str(value)


@functools.lru_cache(maxsize=256)
def _same_time_units(a, b, calendar) -> bool:
    """Whether CF time units ``a`` and ``b`` (str or bytes) decode the same times (cached: a daily commit asks the same)."""
    a = a.decode() if isinstance(a, bytes) else a
    b = b.decode() if isinstance(b, bytes) else b
    if not (isinstance(a, str) and isinstance(b, str)) or " since " not in a or " since " not in b:
        return False
    attrs = {} if calendar is None else {"calendar": calendar.decode() if isinstance(calendar, bytes) else calendar}
    probe = np.array([0, 1, 1000], dtype="int64")
    try:
        coder = xr.coders.CFDatetimeCoder()
        one = coder.decode(xr.Variable(("t",), probe, {**attrs, "units": a})).values
        two = coder.decode(xr.Variable(("t",), probe, {**attrs, "units": b})).values
    except (ValueError, TypeError, OverflowError):
        return False
    return bool(np.array_equal(one, two))


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
        ok = after.is_unique and ((increasing and after.is_monotonic_increasing)
                                  or (decreasing and after.is_monotonic_decreasing))
    except TypeError:  # labels that do not compare
        return
    if ok:
        return
    steps = [i for i in range(1, len(after)) if not (
        (increasing and after[i] > after[i - 1]) or (decreasing and after[i] < after[i - 1]))]
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
    from ..versions.history import changed_attrs
    from ..wrappers.chunked import InMemoryDataset
    from ..wrappers.dataset import InMemoryArrayDataset
    from ..wrappers.group import UnopenedDataset

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
    from ..wrappers.chunked import InMemoryDataset
    from ..wrappers.group import UnopenedDataset

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
    from ..backend.layout import FIRST_VERSION, version_path

    if parent is None or parent == FIRST_VERSION:
        return
    if staged_change(root, f[version_path(parent)]) is None:
        raise NothingToCommitError(
            f"nothing to commit: version {name!r} would be identical to its parent {parent!r} (same "
            "datasets, points and attributes); pass allow_empty=True to commit it anyway"
        )


def _streamable(var: xr.Variable) -> bool:
    """True for a dask-backed variable the commit can stream (fixed-size dtype, not scalar)."""
    return is_dask_array(var.data) and var.ndim > 0 and var.size > 0 and var.dtype.kind in "biufcSV"


def _check_appended_indexes(group: InMemoryGroup, dataset: xr.Dataset) -> None:
    """:func:`check_sorted_index` for each dimension coordinate of ``dataset`` longer than ``group``'s."""
    import pandas as pd

    for dim, index in dataset.indexes.items():
        name = str(dim)
        if dim not in dataset.dims or name not in group or isinstance(group[name], InMemoryGroup):
            continue
        stored = group[name]
        if len(stored.shape) != 1 or len(index) <= stored.shape[0] or np.dtype(stored.dtype).kind not in "biufMm":
            continue
        check_sorted_index(name, pd.Index(np.asarray(stored[()])), index,
                           what=f"commit (appending along {name!r})")


def write_variables(
    group: InMemoryGroup,
    dataset: xr.Dataset,
    *,
    progress: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    allow_unsorted: bool = True,
) -> None:
    """Replace the content of staged ``group`` by the CF-encoded ``dataset``.

    Parameters
    ----------
    group : InMemoryGroup
        A group of a staged version; its subgroups are kept.
    dataset : xarray.Dataset
        numpy- or dask-backed; dask variables are staged lazily (streamed at commit).
    progress : bool or None
        Progress bars while streaming dask variables; None: when stderr is a terminal.
    max_bytes : int
        Bytes computed per batch when streaming dask variables (see
        :class:`~xarray_vhdf5.xr.streaming.DaskChunkSource`).
    allow_unsorted : bool
        False: refuse a dimension coordinate that grows (an append) and is
        no longer sorted as ``group``'s dataset was (:func:`check_sorted_index`).

    Raises
    ------
    IncompatibleDataError
        A variable name with ``/``, objects other than str/bytes, or a dtype HDF5
        cannot store; with ``allow_unsorted=False``, appended labels out of order.
    """
    if not allow_unsorted:
        _check_appended_indexes(group, dataset)
    variables, attrs = xr.conventions.encode_dataset_coordinates(dataset)
    variables, attrs = cf_encode_variables(inherit_stored_encoding(group, variables), attrs)
    for name in list(group):
        if name not in variables and not isinstance(group[name], InMemoryGroup):
            del group[name]
    attrs = kept_attrs(dict(group.attrs), attrs, True)
    for key in list(group.attrs):
        del group.attrs[key]
    for key, value in attrs.items():
        group.attrs[key] = value
    for name, var in variables.items():
        write_variable(group, str(name), var, progress=progress, max_bytes=max_bytes)


def write_variable(
    group: InMemoryGroup,
    name: str,
    var: xr.Variable,
    *,
    progress: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> None:
    """Write one CF-encoded variable as dataset ``name`` of staged ``group`` (replacing it).

    Parameters
    ----------
    group : InMemoryGroup
        A group of a staged version.
    name : str
        The variable's name (no ``/``).
    var : xarray.Variable
        Already CF-encoded (:func:`xarray.conventions.cf_encoder`); numpy- or
        dask-backed (dask: staged lazily, streamed at commit).
    progress, max_bytes
        See :func:`write_variables`.

    Raises
    ------
    IncompatibleDataError
        A name with ``/``, objects other than str/bytes, or a dtype HDF5 cannot store.
    """
    if "/" in name:
        raise IncompatibleDataError(f"variable name {name!r} contains '/'")
    var_attrs = dict(var.attrs)
    fill = var_attrs.get("_FillValue")
    replaced = group[name] if name in group else None
    if replaced is not None and isinstance(replaced, InMemoryGroup):
        replaced = None
    named = names_dimensions(var.dims, replaced is not None and DIMENSIONS_ATTR in replaced.attrs)
    if replaced is not None:
        stored_dtype = np.dtype(replaced.dtype)
        new_dtype = np.dtype(var.dtype) if var.dtype.kind not in "OU" else np.dtype(object)
        var_attrs = kept_attrs(replaced.attrs, var_attrs, stored_dtype == new_dtype)
    if name in group:
        del group[name]
    defaulted = _default_filters(var)
    filters = {**DEFAULT_COMPRESSION, **_filters(var)} if defaulted else _filters(var)
    if _streamable(var):
        values = var.data  # dask: computed chunk by chunk at commit
        ds = stage_lazy_dataset(
            group, name, values, max_bytes=max_bytes, progress=progress,
            chunks=variable_chunks(name, var),
            fillvalue=None if fill is None else np.asarray(fill, values.dtype)[()],
            **filters,
        )
    else:
        values = _stored_values(name, var)
        ds = group.create_dataset(
            name,
            data=values,
            chunks=variable_chunks(name, var),
            fillvalue=None if (fill is None or values.dtype.kind == "O") else np.asarray(fill, values.dtype)[()],
            **filters,
        )
    # chunks from encoding are user choices; without them, an existing raw_data's win.
    ds.chunks_given = bool(var.encoding.get("chunks") or var.encoding.get("chunksizes"))
    # so are filters: the default yields to those of an existing raw_data
    ds.filters_given = not defaulted
    if values.dtype.kind == "O" and all(isinstance(v, str) for v in np.asarray(values).flat):
        ds._dtype = h5py.string_dtype("utf-8")
    for key, value in var_attrs.items():
        ds.attrs[key] = value
    if named:
        ds.attrs[DIMENSIONS_ATTR] = np.array(list(map(str, var.dims)), dtype=h5py.string_dtype())


def commit_dataset(
    dataset: xr.Dataset,
    path: str | os.PathLike,
    version: str | None = None,
    *,
    group: str | None = None,
    prev_version: str | None = None,
    message: str | None = None,
    timestamp: _dt.datetime | np.datetime64 | None = None,
    make_current: bool = True,
    progress: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    expected_current: str | None = None,
    durable: bool = False,
    allow_empty: bool = False,
    allow_unsorted: bool = False,
) -> str:
    """Commit ``dataset`` as a new version of the file at ``path`` (created if missing).

    Parameters
    ----------
    dataset : xarray.Dataset
        numpy- or dask-backed. dask variables are streamed: rechunked to the
        HDF5 chunk grid and computed a batch of at most ``max_bytes`` at a
        time; with a ``dask.distributed`` client, chunks are computed and
        hashed on the workers and only this process writes the file.
    path : str or os.PathLike
        The versioned HDF5 file; created if it does not exist.
    version : str, optional
        Name of the new version; default :func:`next_version_name` (``r1``, ``r2``, ...).
    group : str, optional
        Group inside the version that receives the Dataset (default the root);
        other groups of the previous version are kept.
    prev_version : str, optional
        Parent version (default the current one).
    message : str, optional
        Stored as the version group's ``_vhdf5_message`` attribute.
    timestamp : datetime or numpy.datetime64, optional
        The version's timestamp (UTC), default now.
    make_current : bool
        Make it the current version (default True).
    progress : bool or None
        Progress bars while streaming dask variables; default: only when
        stderr is a terminal.
    max_bytes : int
        Bytes of dask data computed per batch (default 64 MiB).
    durable : bool
        Make the commit survive a power cut, not only a killed process: the
        journal is ``fsync``'d in order (:mod:`~xarray_vhdf5.versions.journal`).
        Default False.
    expected_current : str, optional
        Refuse to commit unless the file's current version is this one (checked
        under the file's write lock). ``ds.vhdf5.commit(path=...)`` passes the
        version a Dataset was opened from, so that committing it does not undo
        versions committed since.
    allow_empty : bool
        Commit even if the new version would equal its parent (no dataset,
        point or attribute changed: :func:`staged_change`); default False:
        :class:`~xarray_vhdf5.errors.NothingToCommitError` (icechunk's rule).
        ``VersionedHDF5File.stage_version`` itself, like versioned-hdf5,
        commits an empty version.
    allow_unsorted : bool
        Store a dimension coordinate that grows (an append) and is no longer
        sorted as the parent's was; default False:
        :class:`~xarray_vhdf5.errors.IncompatibleDataError`.

    Returns
    -------
    str
        The new version's name.

    Raises
    ------
    NothingToCommitError
        Nothing changed from the parent version and ``allow_empty`` is False;
        nothing is written (a ``ValueError``).
    StaleVersionError
        ``expected_current`` is not the file's current version; nothing is written.
    FileBusyError
        Another writer kept the file past the lock timeout
        (:mod:`~xarray_vhdf5.versions.locking`); nothing is written.
    NotVersionedError
        ``path`` is an HDF5 file without version history that holds other data;
        :class:`~xarray_vhdf5.errors.NotHDF5Error` (also an ``OSError``): it is
        not an HDF5 file (e.g. netCDF-3). Nothing is written to it.
    VersionExistsError
        ``version`` exists.
    IncompatibleDataError
        A variable's dtype, chunks or fill value cannot be stored or differ from
        those fixed by its first version; labels appended out of order (without
        ``allow_unsorted``). Nothing is committed.
    """

    def write(target: InMemoryGroup) -> None:
        write_variables(target, dataset, progress=progress, max_bytes=max_bytes, allow_unsorted=allow_unsorted)

    return _commit(path, version, group, write, prev_version=prev_version, message=message,
                   timestamp=timestamp, make_current=make_current, expected_current=expected_current,
                   durable=durable, allow_empty=allow_empty)


def commit_datatree(
    tree: xr.DataTree,
    path: str | os.PathLike,
    version: str | None = None,
    *,
    group: str | None = None,
    prev_version: str | None = None,
    message: str | None = None,
    timestamp: _dt.datetime | np.datetime64 | None = None,
    make_current: bool = True,
    progress: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> str:
    """Commit a whole ``xr.DataTree`` as one new version of the file at ``path``.

    Each node becomes a group of the version (the tree's root: the version's
    root, or ``group``), holding the node's own variables and attrs
    (``node.to_dataset(inherit=False)``: coordinates inherited from a parent
    are stored once, in the parent's group, as netCDF-4 does). The tree
    replaces everything below ``group``: groups absent from the tree are absent
    from the version. Chunks are deduplicated against every earlier version, as
    :func:`commit_dataset` does.

    Parameters
    ----------
    tree : xarray.DataTree
        numpy- or dask-backed nodes.
    path, version, prev_version, message, timestamp, make_current, progress, max_bytes
        See :func:`commit_dataset`.
    group : str, optional
        Group of the version that receives the tree's root (default the
        version's root); other groups of the previous version are kept.

    Returns
    -------
    str
        The new version's name.

    Raises
    ------
    NotVersionedError, VersionExistsError, IncompatibleDataError
        See :func:`commit_dataset`; nothing is committed.
    """

    def write(target: InMemoryGroup) -> None:
        keep = set()
        for rel, node in tree.subtree_with_keys:
            node_group = target if rel == "." else target.require_group(rel)
            keep.add(rel)
            write_variables(node_group, node.to_dataset(inherit=False), progress=progress, max_bytes=max_bytes)
        stale: list[str] = []
        target.visititems(
            lambda p, obj: stale.append(p) if isinstance(obj, InMemoryGroup) and p not in keep else None
        )
        for rel in stale:
            if rel in target:  # a parent may have gone already
                del target[rel]

    return _commit(path, version, group, write, prev_version=prev_version, message=message,
                   timestamp=timestamp, make_current=make_current)


def _commit(path, version, group, write, *, prev_version, message, timestamp, make_current,
            expected_current=None, durable=False, allow_empty=True) -> str:
    """Stage a version, let ``write(target group)`` fill it, commit, then attach dimension scales."""
    path = os.fspath(path)
    # Lazily opened Datasets of this file (the data being committed, maybe) hold it
    # read-only, which would keep libhdf5 from opening it for writing; they reopen it.
    close_read_handles(path)
    hint = "commit into a new file (or an HDF5 file holding versions) instead; nothing was written"
    with open_for_writing(path, hint=hint, durable=durable) as f:
        if len(f) and not is_versioned(f):
            raise NotVersionedError(
                f"{path!r} is an HDF5 file without version history; commit into a new file instead"
            )
        vf = VersionedHDF5File(f)
        if expected_current is not None and vf.current_version != expected_current:
            raise StaleVersionError(
                f"{path!r}: the Dataset was opened from version {expected_current!r}, but the current "
                f"version is now {vf.current_version!r}: committing it would undo the versions since. "
                f"Open the current version and redo the change, or commit(force=True) to commit on top "
                f"of {expected_current!r} anyway (a branch); nothing was written"
            )
        name = version if version is not None else next_version_name(vf)
        # The scales reference the version's own datasets: attached inside its commit.
        with vf.stage_version(name, prev_version=prev_version, make_current=make_current, timestamp=timestamp,
                              finish=attach_dimension_scales) as root:
            target = root if group in (None, "", "/") else root.require_group(group.strip("/"))
            write(target)
            if not allow_empty:
                parent = vf.current_version if prev_version is None else vf.resolve(prev_version)
                refuse_empty_commit(root, f, parent, name)
            root.attrs.pop(MESSAGE_ATTR, None)
            if message is not None:
                root.attrs[MESSAGE_ATTR] = message
        close_read_handles(path)  # opened during the commit, they would not survive its close
    return name
