"""Values written to a dataset, cast to its dtype without changing any of them.

numpy converts a *Python* scalar with checks (``np.asarray(2**40, "i4")``
raises ``OverflowError``, ``np.asarray(float("nan"), "i4")`` ``ValueError``,
``np.asarray(1+2j, "i4")`` ``TypeError``) but casts *arrays* of another dtype
without any (``int64`` to ``int32`` wraps around, NaN becomes
``-2147483648``, the imaginary part is dropped, ``"CHANGED"`` into ``S6``
becomes ``"CHANGE"``). A versioned dataset stores the same number it was
given or refuses it: :func:`cast_for_storage` applies numpy's scalar rules to
every point, whatever the value's type, and raises the exception numpy raises
for such a scalar (:class:`~xarray_vhdf5.errors.ValueCastError` and its
children, which also subclass that builtin).

What is accepted, as numpy accepts it for a Python scalar: fractions into
integers (truncated toward zero), any number into ``bool``, numeric strings
into numbers, ints into floats (rounded to the nearest float). What is
refused: NaN into integers (``ValueError``); infinities and values outside the
range into integers, and finite values that overflow a narrower float
(``OverflowError``; numpy only warns there); complex values into a real dtype
(``TypeError``); strings longer than a fixed-width string dtype
(:class:`~xarray_vhdf5.errors.StringTooLongError`, a ``ValueError``).

Cost: nothing beyond a dtype comparison when the value already has the
dataset's dtype (the common case); otherwise one pass over the value (a
min/max, an ``isfinite``), never per chunk.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import StringTooLongError, ValueCastError, ValueOverflowError, ValueTypeError

__all__ = ["cast_for_storage"]

_WRAP = ((OverflowError, ValueOverflowError), (TypeError, ValueTypeError), (ValueError, ValueCastError))


def _where(name: str | None) -> str:
    return f"{name!r}" if name else "the dataset"


def _first(arr: np.ndarray, mask: np.ndarray) -> Any:
    """The first point of ``arr`` where ``mask`` is true, as a Python scalar."""
    return arr[np.unravel_index(int(np.argmax(mask)), arr.shape)].item() if arr.ndim else arr.item()


def _refuse(cls, name, dtype, arr_dtype, value, why: str, **extra):
    raise cls(
        f"cannot store {value!r} (dtype {arr_dtype}) in {_where(name)} of dtype {dtype}: {why}; nothing was written",
        name=name,
        dtype=dtype,
        value=value,
        **extra,
    )


def _check_integer_target(arr: np.ndarray, dtype: np.dtype, name: str | None) -> None:
    kind = arr.dtype.kind
    if kind == "b" or np.can_cast(arr.dtype, dtype, "safe") or arr.size == 0:
        return
    info = np.iinfo(dtype)
    if kind in "iu":
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            bad = _first(arr, (arr < info.min) | (arr > info.max))
            _refuse(
                ValueOverflowError, name, dtype, arr.dtype, bad, f"out of bounds for {dtype} [{info.min}, {info.max}]"
            )
        return
    if kind == "f":
        finite = np.isfinite(arr)
        if not finite.all():
            bad = _first(arr, ~finite)
            if np.isnan(bad):
                _refuse(ValueCastError, name, dtype, arr.dtype, bad, "cannot convert float NaN to integer")
            _refuse(ValueOverflowError, name, dtype, arr.dtype, bad, "cannot convert float infinity to integer")
        # Powers of two are exact floats: the comparison is exact at int64's ends too.
        bits = dtype.itemsize * 8
        low, high = (0.0, 2.0**bits) if dtype.kind == "u" else (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1))
        t = np.trunc(arr)
        out = (t < low) | (t >= high)
        if out.any():
            _refuse(
                ValueOverflowError,
                name,
                dtype,
                arr.dtype,
                _first(arr, out),
                f"out of bounds for {dtype} [{info.min}, {info.max}]",
            )
        return
    if kind == "c":
        _refuse(
            ValueTypeError, name, dtype, arr.dtype, arr.flat[0].item(), "complex values do not cast to a real dtype"
        )


def _check_float_target(arr: np.ndarray, dtype: np.dtype, name: str | None) -> np.ndarray:
    """``arr`` cast to the float/complex ``dtype``; refuses complex into real, finite overflow."""
    kind = arr.dtype.kind
    if kind == "c" and dtype.kind == "f":
        _refuse(
            ValueTypeError,
            name,
            dtype,
            arr.dtype,
            arr.flat[0].item() if arr.size else None,
            "complex values do not cast to a real dtype",
        )
    if kind in "biufc" and np.can_cast(arr.dtype, dtype, "safe"):
        return arr.astype(dtype)
    with np.errstate(over="ignore"):
        out = arr.astype(dtype)
    overflow = ~np.isfinite(out) & np.isfinite(arr) if kind in "fc" else ~np.isfinite(out)
    if overflow.any():
        _refuse(ValueOverflowError, name, dtype, arr.dtype, _first(arr, overflow), f"out of the range of {dtype}")
    return out


def _string_lengths(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind in "SU":
        return np.strings.str_len(arr)
    return np.vectorize(len, otypes=[np.intp])(arr) if arr.size else np.zeros(arr.shape, np.intp)


def _cast_string(arr: np.ndarray, dtype: np.dtype, name: str | None) -> np.ndarray:
    """``arr`` as the fixed-width string ``dtype``; refuses a longer string (numpy truncates)."""
    width = dtype.itemsize // (4 if dtype.kind == "U" else 1)
    kind = arr.dtype.kind
    if kind == "O":
        if dtype.kind == "S":
            items = [v.encode("ascii") if isinstance(v, str) else v for v in arr.flat]
        else:
            items = [v.decode("ascii") if isinstance(v, bytes) else v for v in arr.flat]
        arr = np.array(items if items else [], dtype=dtype.kind).reshape(arr.shape)
        kind = arr.dtype.kind
    if kind in "SU" and arr.size and arr.dtype.itemsize // (4 if kind == "U" else 1) > width:
        if dtype.kind == "S" and kind == "U":
            lengths = np.strings.str_len(np.strings.encode(arr, "ascii"))
        else:
            lengths = _string_lengths(arr)
        long = lengths > width
        if long.any():
            bad = _first(arr, long)
            raise StringTooLongError(
                f"cannot store {bad!r} ({len(bad)} characters) in {_where(name)} of dtype {dtype}: its strings "
                f"hold at most {width} characters and the dtype is fixed by the dataset's first version, so the "
                "value would be truncated; nothing was written (store variable-length strings, "
                "h5py.string_dtype(), from the first version to allow any length)",
                name=name,
                dtype=dtype,
                value=bad,
                width=width,
            )
    return arr.astype(dtype)


def cast_for_storage(value: Any, dtype: Any, name: str | None = None) -> np.ndarray:
    """``value`` as an array of ``dtype`` holding the same values, or an exception.

    Parameters
    ----------
    value : array_like
        What is written: a scalar, a sequence, a numpy array or scalar.
    dtype : numpy.dtype or str
        The dataset's dtype.
    name : str, optional
        The dataset's or variable's name, for messages.

    Returns
    -------
    numpy.ndarray
        ``value`` itself (as an array) when it already has ``dtype``, else a
        new array of ``dtype``; its shape is the value's (not broadcast).

    Raises
    ------
    xarray_vhdf5.errors.ValueOverflowError
        A value out of the range of ``dtype`` (an ``OverflowError``).
    xarray_vhdf5.errors.ValueTypeError
        A complex value into a real ``dtype``, or a value numpy refuses with
        ``TypeError`` (``None`` into a number).
    xarray_vhdf5.errors.StringTooLongError
        A string longer than a fixed-width string ``dtype`` (a ``ValueError``).
    xarray_vhdf5.errors.ValueCastError
        NaN into an integer ``dtype``, or a value numpy refuses with
        ``ValueError`` (``"abc"`` into a number).

    Notes
    -----
    The rules are numpy's for Python scalars (see the module docstring),
    checked by ``tests/test_bad_input.py`` against what numpy raises.
    """
    dtype = np.dtype(dtype)
    if type(value) is np.ndarray and value.dtype == dtype:
        return value  # the hot path: one comparison
    kind = dtype.kind
    try:
        # Python scalars numpy checks itself as wanted (ints: range; floats into float64: exact).
        if (type(value) is int and kind in "iu") or (type(value) is float and dtype == np.float64):
            return np.asarray(value, dtype=dtype)
        if type(value) is float and kind in "iu" and math.isfinite(value):
            return np.asarray(int(value), dtype=dtype)  # truncated toward zero, as numpy; range checked
        arr = np.asarray(value)
        if arr.dtype == dtype:
            return arr
        if kind in "iu":
            _check_integer_target(arr, dtype, name)
            return np.asarray(arr, dtype=dtype)  # object / string sources: numpy's per-element checks
        if kind in "fc":
            if arr.dtype.kind in "OSU":
                return _check_float_target(
                    np.asarray(arr, dtype=np.complex128 if kind == "c" else np.float64), dtype, name
                )
            return _check_float_target(arr, dtype, name)
        if kind in "SU":
            return _cast_string(arr, dtype, name)
        return np.asarray(arr, dtype=dtype)
    except ValueCastError:
        raise
    except (OverflowError, TypeError, ValueError) as exc:
        cls = next(ours for builtin, ours in _WRAP if isinstance(exc, builtin))
        got = value.dtype if isinstance(value, (np.ndarray, np.generic)) else type(value).__name__
        raise cls(
            f"cannot store a value of {got} in {_where(name)} of dtype {dtype}: {exc}; nothing was written",
            name=name,
            dtype=dtype,
        ) from None
