"""How a variable is encoded for storage: CF coding, filters, fill values, kept attributes.

What :func:`~xarray_vhdf5.xr._writer.write_variable` stores for an xarray
variable, decided before any chunk is written:

- CF encoding by xarray itself (:func:`cf_encode_variables`: xarray's
  ``cf_encoder``, then netCDF char arrays through xarray's ``EncodedStringCoder``
  and ``CharacterArrayCoder``, as its netCDF-4 writers store them);
- CF's ``missing_value`` with or without ``_FillValue`` (:func:`prepare_fill_encoding`);
- a variable replacing a stored dataset takes that dataset's dtype, fill value
  and packing where its own encoding is silent (:func:`inherit_stored_encoding`,
  as xarray's zarr backend does), and an unchanged attribute keeps its stored
  value and type (:func:`kept_attrs`);
- HDF5 filters from the encoding, :data:`DEFAULT_COMPRESSION` when it names none.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import xarray as xr
from xarray.coding import strings

from .._staging import cast_for_storage
from .._wrappers.group import InMemoryGroup
from ..errors import IncompatibleDataError
from ._staged_array import checked_string_encoding
from ._streaming import is_dask_array

__all__ = [
    "DEFAULT_COMPRESSION",
    "cf_encode_variables",
    "encode_char_array",
    "filters_of",
    "inherit_stored_encoding",
    "is_char_array_encoding",
    "kept_attrs",
    "prepare_fill_encoding",
    "stored_values",
]

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


def filters_of(var: xr.Variable) -> tuple[dict[str, Any], bool]:
    """The HDF5 filters of a new dataset for ``var``, and whether they are the default.

    Returns
    -------
    filters : dict
        ``h5py.Group.create_dataset`` keywords (``compression``,
        ``compression_opts``, ``shuffle``, ``fletcher32``) from ``var.encoding``,
        or :data:`DEFAULT_COMPRESSION` merged in when the encoding names no
        compression (a numeric, non-scalar variable).
    defaulted : bool
        True when the default was used: it then yields to the filters an
        existing raw_data fixed (the commit does not refuse the difference).
    """
    defaulted = _default_filters(var)
    return ({**DEFAULT_COMPRESSION, **_filters(var)} if defaulted else _filters(var)), defaulted


def _default_filters(var: xr.Variable) -> bool:
    """True when ``var`` gets :data:`DEFAULT_COMPRESSION`: numeric, not scalar, its encoding silent."""
    enc = var.encoding
    return var.ndim > 0 and var.dtype.kind in "iuf" and "compression" not in enc and "zlib" not in enc


def stored_values(name: str, var: xr.Variable) -> np.ndarray:
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
    first version fixed another dtype and fill value (``docs/format.md``: the commit
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
    extra: dict[str, Any] = {"dtype": np.dtype("S1")}
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
_DTYPE_BOUND_ATTRS = frozenset(
    {"_FillValue", "missing_value", "valid_min", "valid_max", "valid_range", "scale_factor", "add_offset", "_Unsigned"}
)


def kept_attrs(stored: Any, new: dict, same_dtype: bool) -> dict:
    """``new`` attributes, with the stored value kept wherever it means the same.

    So that an unchanged variable is stored unchanged: xarray's encoder
    rewrites some attributes in a canonical form (``units`` of CF times lose a
    ``00:00:00`` time of day: ``'days since 2024-01-01 00:00:00'`` becomes
    ``'days since 2024-01-01'``; numbers may come back as another numpy
    scalar type), which would make ``vhdf5 log`` and ``diff`` report the
    variable changed. An attribute keeps its stored value (and type) when
    the new one is equal (:func:`~xarray_vhdf5._versions.states.same_attr_value`),
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
    from .._versions.states import same_attr_value

    out = dict(new)
    for key, value in new.items():
        if key not in stored or (key in _DTYPE_BOUND_ATTRS and not same_dtype):
            continue
        old = stored[key]
        if same_attr_value(old, value):
            out[key] = old
        elif (
            key == "units"
            and isinstance(old, (str, bytes))
            and isinstance(value, (str, bytes))
            and _same_time_units(old, value, _hashable(new.get("calendar")))
        ):
            out[key] = old
    return out


def _hashable(value):
    return value if value is None or isinstance(value, (str, bytes)) else str(value)


@functools.lru_cache(maxsize=256)
def _same_time_units(a, b, calendar) -> bool:
    """Whether CF time units ``a`` and ``b`` (str or bytes) decode the same times.

    Cached: a daily commit asks the same question each time.
    """
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
