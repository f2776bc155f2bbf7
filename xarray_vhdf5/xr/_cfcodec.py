"""CF decoding and encoding of staged value blocks: :class:`CFCodec`, and the string-width check.

A staged array holds the values *as stored* (CF-encoded: ``-1e34`` fill
values, packed integers, time offsets); the Dataset shows them CF-decoded, as
``xr.open_dataset`` does. :class:`CFCodec` converts each block read or
written with xarray's own coders (:func:`xarray.conventions.decode_cf_variable`,
:func:`xarray.conventions.encode_cf_variable`), which act point by point, so a
block converts independently of the rest of the variable.
"""

from __future__ import annotations

from typing import Any, Literal

import h5py
import numpy as np
import xarray as xr

from .._staging import cast_for_storage

__all__ = ["CF_ATTRS", "CF_ENCODING", "CFCodec", "checked_string_encoding"]

#: Attributes CF decoding moves from ``attrs`` into ``encoding``.
CF_ATTRS = ("_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned", "units", "calendar")
#: The ``encoding`` keys that decide how values are stored.
CF_ENCODING = (*CF_ATTRS, "dtype")
_MASK_ATTRS = ("_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned")
#: The units xarray decodes times to (``numpy.datetime_data(dtype)[0]``), as its coders take them.
_TIME_UNITS: dict[str, Literal["s", "ms", "us", "ns"]] = {"s": "s", "ms": "ms", "us": "us", "ns": "ns"}


def _same_value(a: Any, b: Any) -> bool:
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind in "fc"))
    except (TypeError, ValueError):
        return a == b


class CFCodec:
    """CF decoding (stored -> shown) and encoding (shown -> stored) of value blocks.

    Built from the decoded variable (``attrs`` / ``encoding`` as
    ``xr.open_dataset`` left them) and the stored dataset's attributes: the CF
    attributes present on disk but absent from the decoded ``attrs`` were
    decoded, and only those are applied. A variable whose decoding changes
    its shape (character arrays), or yields objects (cftime dates), has no
    codec (:meth:`for_variable` returns None).

    Parameters
    ----------
    dims : tuple of str
    stored_dtype, dtype : numpy.dtype
        dtype on disk and shown.
    decoded : dict
        The CF attributes that were decoded (``_FillValue``, ``scale_factor``, ``units``...).
    encoding : dict
        The variable's CF ``encoding`` entries (:data:`CF_ENCODING`), used to encode.
    """

    def __init__(self, dims, stored_dtype, dtype, decoded: dict, encoding: dict):
        self.dims = tuple(dims)
        self.stored_dtype = np.dtype(stored_dtype)
        self.dtype = np.dtype(dtype)
        self.decoded = dict(decoded)
        self.encoding = dict(encoding)
        self.identity = not self.decoded and self.stored_dtype == self.dtype

    @property
    def vlen_strings(self) -> bool:
        """True for ``str`` values shown fixed-width (``<U6``) and stored as variable-length strings."""
        return self.dtype.kind == "U" and self.stored_dtype.kind == "O"

    @classmethod
    def for_variable(cls, var: xr.Variable, stored: h5py.Dataset, stored_attrs: dict) -> CFCodec | None:
        """The codec of ``var`` (decoded, as opened) over ``stored``; None if it cannot be staged.

        Strings are staged (so that a staged assignment never truncates them,
        as a fixed-width numpy array would) when shown as ``bytes`` and stored
        fixed-width (``S6``: a longer value is refused), or shown as ``str``
        and stored variable-length (any length is stored).
        """
        if var.ndim == 0 or tuple(var.shape) != tuple(stored.shape):
            return None
        if var.dtype.kind in "SU" and not any(k in stored_attrs for k in ("_Encoding", "_FillValue")):
            vlen = h5py.check_string_dtype(stored.dtype) is not None and stored.dtype.kind == "O"
            if (var.dtype.kind == "S" and stored.dtype.kind == "S") or (var.dtype.kind == "U" and vlen):
                encoding = {k: var.encoding[k] for k in CF_ENCODING if k in var.encoding}
                return cls(var.dims, stored.dtype, var.dtype, {}, encoding)
            return None
        if var.dtype.kind in "OSUV" or stored.dtype.kind in "OV":
            return None
        decoded = {k: stored_attrs[k] for k in CF_ATTRS if k in stored_attrs and k not in var.attrs}
        encoding = {k: var.encoding[k] for k in CF_ENCODING if k in var.encoding}
        codec = cls(var.dims, stored.dtype, var.dtype, decoded, encoding)
        if "units" in decoded and var.dtype.kind not in "Mm":
            return None
        try:
            probe = codec.decode(np.zeros((1,) * var.ndim, dtype=stored.dtype))
        except (ValueError, TypeError, OverflowError):
            return None
        return codec if probe.dtype == var.dtype else None

    def same_encoding(self, var: xr.Variable) -> bool:
        """True if ``var`` (the variable now) still encodes as when staged."""
        if var.dtype != self.dtype:
            return False
        now = {k: var.encoding[k] for k in CF_ENCODING if k in var.encoding}
        if now.keys() != self.encoding.keys():
            return False
        if any(k in var.attrs for k in self.decoded):  # a CF attribute set by hand
            return False
        return all(_same_value(now[k], self.encoding[k]) for k in now)

    def widened(self, value: np.ndarray) -> CFCodec:
        """This codec, or a copy showing a ``str`` width that holds ``value`` (variable-length strings)."""
        if not self.vlen_strings or value.dtype.kind not in "SU" or value.dtype.itemsize <= self.dtype.itemsize:
            return self
        width = value.dtype.itemsize // (4 if value.dtype.kind == "U" else 1)
        return type(self)(self.dims, self.stored_dtype, np.dtype(f"<U{width}"), self.decoded, self.encoding)

    def decode(self, raw: np.ndarray) -> np.ndarray:
        """Stored values -> shown values (a block of any shape)."""
        if self.identity:
            return raw
        if self.vlen_strings:  # bytes or str objects -> str, never narrower than shown, never truncated
            items = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in np.asarray(raw).flat]
            out = np.array(items, dtype=str).reshape(np.shape(raw)) if items else np.zeros(np.shape(raw), self.dtype)
            return out if out.dtype.itemsize >= self.dtype.itemsize else out.astype(self.dtype)
        kind = self.dtype.kind
        var = xr.Variable(tuple(f"_d{i}" for i in range(raw.ndim)), raw, attrs=dict(self.decoded))
        times: xr.coders.CFDatetimeCoder | bool = False
        deltas: xr.coders.CFTimedeltaCoder | bool = False
        if kind == "M":
            times = xr.coders.CFDatetimeCoder(time_unit=_TIME_UNITS[np.datetime_data(self.dtype)[0]])
        elif kind == "m":
            deltas = xr.coders.CFTimedeltaCoder(time_unit=_TIME_UNITS[np.datetime_data(self.dtype)[0]])
        shown = xr.conventions.decode_cf_variable(
            "_staged",
            var,
            concat_characters=False,
            mask_and_scale=any(k in self.decoded for k in _MASK_ATTRS),
            decode_times=times,
            decode_timedelta=deltas,
            stack_char_dim=False,
        )
        return np.asarray(shown.values)

    def encode(self, value: Any, name: str | None = None) -> np.ndarray:
        """Shown values -> stored values, cast to the stored dtype without changing any.

        Parameters
        ----------
        value : array_like
            Shown (decoded) values.
        name : str, optional
            The variable's name, for messages.

        Raises
        ------
        ValueOverflowError, ValueTypeError, ValueCastError, StringTooLongError
            A value the shown dtype, or once CF-encoded (packed, masked) the
            stored dtype, cannot hold (see
            :func:`~xarray_vhdf5._staging.cast_for_storage`): ``2**40`` into an
            ``int32`` variable, NaN into one without ``_FillValue``, a value
            beyond a packed ``int16``'s range, ``b"CHANGED"`` into ``S6``.
        """
        if self.identity:
            return cast_for_storage(value, self.stored_dtype, name)
        if self.vlen_strings:
            return np.asarray(value, dtype=object)  # any length: the storage has no width
        value = cast_for_storage(value, self.dtype, name)
        # xarray's encoder would cast to encoding["dtype"] unchecked (wrapping packed
        # values out of range): encode without it, round as it does, cast checked.
        encoding = {k: v for k, v in self.encoding.items() if k != "dtype" or self.dtype.kind in "Mm"}
        var = xr.Variable(tuple(f"_d{i}" for i in range(value.ndim)), value, encoding=encoding)
        out = np.asarray(xr.conventions.encode_cf_variable(var, name=name or "_staged").values)
        if self.stored_dtype.kind in "iu" and out.dtype.kind == "f":
            out = np.around(out)
        return cast_for_storage(out, self.stored_dtype, name)


def checked_string_encoding(name: str, var: xr.Variable) -> xr.Variable:
    """``var``, or a shallow copy, whose ``encoding["dtype"]`` truncates none of its strings.

    xarray decodes variable-length strings as fixed-width ``str`` and records
    that width in ``encoding["dtype"]`` (``<U6``); its encoder then casts to it,
    so a longer string written later is silently cut (``"CHANGED"`` stored as
    ``"CHANGE"``, with xarray's netCDF engines too). A ``str`` width is not
    stored here (``str`` values are stored as variable-length strings): a
    narrower one is dropped. A fixed-width ``bytes`` dtype (``S6``) is what
    the dataset stores: values longer than it are refused. ``S1`` asks for a
    netCDF ``char`` array (xarray's :class:`~xarray.coding.strings.CharacterArrayCoder`
    adds a string dimension as wide as the longest value): nothing is cut,
    nothing is refused.

    Parameters
    ----------
    name : str
        The variable's name, for messages.
    var : xarray.Variable
        Not yet CF-encoded.

    Returns
    -------
    xarray.Variable

    Raises
    ------
    StringTooLongError
        ``encoding["dtype"]`` is ``S<n>`` and a value is longer than ``n`` bytes.
    """
    dtype = var.encoding.get("dtype")
    if dtype is None or var.dtype.kind not in "SUO":
        return var
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return var
    if var.dtype.kind != "O" and var.dtype.itemsize <= dtype.itemsize and var.dtype.kind == dtype.kind:
        return var  # cannot be longer than the width
    if dtype == np.dtype("S1"):
        return var  # a netCDF char array: xarray's CharacterArrayCoder adds a string dimension, cuts nothing
    if dtype.kind == "U":
        narrower = var.copy(deep=False)
        narrower.encoding = {k: v for k, v in var.encoding.items() if k != "dtype"}
        return narrower
    if dtype.kind == "S" and not hasattr(var.data, "dask"):
        cast_for_storage(var.values, dtype, name)
    return var
