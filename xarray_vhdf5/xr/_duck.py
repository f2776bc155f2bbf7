"""Duck-array plumbing of staged Datasets: numpy protocols, numpy keys, and :class:`CharArrayValues`.

xarray keeps an object with ``shape``, ``dtype``, ``ndim``,
``__array_function__`` and ``__array_ufunc__`` as a variable's data instead of
converting it to numpy (xarray docs, "Integrating with duck arrays").
:class:`ComputesAsNumpy` gives the staged arrays those protocols: numpy
functions and ufuncs compute on their values. The key helpers turn xarray's
numpy-style keys (``NdArrayLikeIndexingAdapter``) into what the staging engine
takes.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np

from .._staging import cast_for_storage

__all__ = ["WRITEABLE", "CharArrayValues", "ComputesAsNumpy", "Flags", "array_key", "bounding_box", "n_arrays"]


def array_key(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def n_arrays(key: tuple) -> int:
    return sum(isinstance(k, np.ndarray) or isinstance(k, list) for k in key)


def bounding_box(key: tuple, shape: tuple[int, ...]) -> tuple[tuple, tuple] | None:
    """For a numpy key with several integer arrays: (box of slices, key relative to the box).

    Returns None when the key holds something else than ints, slices, Ellipsis and integer arrays.
    """
    if Ellipsis in [k for k in key if not isinstance(k, np.ndarray)]:
        pos = next(i for i, k in enumerate(key) if not isinstance(k, np.ndarray) and k is Ellipsis)
        key = key[:pos] + (slice(None),) * (len(shape) - len(key) + 1) + key[pos + 1 :]
    key = key + (slice(None),) * (len(shape) - len(key))
    box: list[slice] = []
    rel: list[np.ndarray | slice | int] = []  # per axis: the index relative to the box
    for k, n in zip(key, shape):
        if isinstance(k, (list, np.ndarray)):
            k = np.asarray(k)
            if k.dtype == bool:
                return None
            k = np.where(k < 0, k + n, k).astype(np.intp)
            if k.size and (k.min() < 0 or k.max() >= n):
                raise IndexError(f"index out of bounds for axis of size {n}")
            lo = int(k.min()) if k.size else 0
            hi = int(k.max()) + 1 if k.size else 0
            box.append(slice(lo, hi))
            rel.append(k - lo)
        elif isinstance(k, slice):
            box.append(k)
            rel.append(slice(None))
        else:
            try:
                i = operator.index(k)
            except TypeError:
                return None
            box.append(slice(i, i + 1) if i != -1 else slice(i, None))
            rel.append(0)
    return tuple(box), tuple(rel)


class Flags(NamedTuple):
    writeable: bool
    owndata: bool


WRITEABLE = Flags(True, True)


class ComputesAsNumpy(np.lib.mixins.NDArrayOperatorsMixin):
    """numpy functions and ufuncs on a staged array compute on its values (``_as_numpy``); ``out=`` writes back."""

    def __array_function__(self, func, types, args, kwargs):
        return func(*_as_numpy(args), **_as_numpy(kwargs))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.pop("out", None)
        result = getattr(ufunc, method)(*_as_numpy(inputs), **_as_numpy(kwargs))
        if out is None:
            return result
        targets = out if isinstance(out, tuple) else (out,)
        results = result if isinstance(result, tuple) else (result,)
        for target, value in zip(targets, results):
            target[...] = value
        return out[0] if isinstance(out, tuple) and len(out) == 1 else out


class CharArrayValues(ComputesAsNumpy):
    """A staged netCDF ``char`` array's decoded strings, in memory, widening instead of truncating.

    xarray decodes a char array (``S1`` along a string dimension) to
    fixed-width strings (``|S4``, or ``<U4`` with ``_Encoding``); a numpy array
    of that dtype would keep ``b"TOOL"`` of ``b"TOOLONG"`` without a word. Here
    a longer value widens the dtype shown (the commit's
    :class:`~xarray.coding.strings.CharacterArrayCoder` then stores a wider
    string dimension, as xarray's netCDF writers would), and every value is
    cast with :func:`~xarray_vhdf5._staging.cast_for_storage` (``str`` into
    bytes: ASCII only). Char arrays are small: they are held in memory.

    Parameters
    ----------
    values : numpy.ndarray
        Decoded, fixed-width bytes (``S``) or str (``U``).
    name : str, optional
        The variable's name, for messages.

    Notes
    -----
    ``self[key]`` returns numpy arrays; numpy functions, ufuncs and operators
    (``NDArrayOperatorsMixin``) work on a numpy copy.
    """

    def __init__(self, values: np.ndarray, name: str | None = None):
        self.values = np.array(values)
        self.name = name

    shape = property(lambda self: self.values.shape)
    dtype = property(lambda self: self.values.dtype)
    ndim = property(lambda self: self.values.ndim)
    size = property(lambda self: self.values.size)
    nbytes = property(lambda self: self.values.nbytes)

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"CharArrayValues(shape={self.shape}, dtype={self.dtype})"

    def __getitem__(self, key) -> np.ndarray:
        return self.values[key]

    def __setitem__(self, key, value) -> None:
        """Store ``value`` at ``key`` (numpy's indexing), widening the dtype for a longer string.

        Raises
        ------
        ValueCastError, ValueTypeError
            A value that is not a string of the variable's kind as numpy casts
            it (non-ASCII ``str`` into bytes); nothing is stored.
        """
        value = np.asarray(value)
        kind, unit = self.dtype.kind, (4 if self.dtype.kind == "U" else 1)
        width = self.dtype.itemsize // unit
        if value.dtype.kind in "SUO":
            need = int(np.max(np.vectorize(len, otypes=[np.intp])(value))) if value.size else 0
            if need > width:
                self.values = self.values.astype(np.dtype(f"{kind}{need}"))
        self.values[key] = cast_for_storage(value, self.dtype, self.name)

    def __array__(self, dtype=None, copy=None):
        if copy is False and dtype is not None and np.dtype(dtype) != self.dtype:
            raise ValueError("a CharArrayValues cannot be cast without a copy (numpy's copy=False)")
        return self.values.copy() if dtype is None else self.values.astype(dtype)

    def astype(self, dtype, **kwargs) -> np.ndarray:
        return self.values.astype(dtype, **kwargs)

    def __copy__(self) -> CharArrayValues:
        return type(self)(self.values, self.name)

    def __deepcopy__(self, memo) -> CharArrayValues:
        return type(self)(self.values, self.name)


def _as_numpy(obj):
    if isinstance(obj, ComputesAsNumpy):
        return np.asarray(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_as_numpy(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _as_numpy(v) for k, v in obj.items()}
    return obj
