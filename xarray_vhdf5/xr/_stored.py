"""A staged Dataset's in-memory coordinates as stored: committed without rewriting while unchanged.

``ds.vhdf5.stage()`` keeps the dimension coordinates (pandas indexes in
xarray) in memory (:mod:`~xarray_vhdf5.xr._stage`). Rewritten at every
commit, a daily append would CF-encode its whole ``time`` axis, hash it and
map a new virtual dataset for it, and do the same for ``lat`` and ``lon``,
unchanged: work that grows with the length of the axis and is wasted where
nothing changed. A :class:`StoredValues` records what such a variable was
when it was read from a version, or committed as one: dimensions, values
(a copy), attrs and encoding (deep copies), the version and the dataset's
path. A commit onto that version then asks :meth:`StoredValues.points_kept`:

- the variable is unchanged: the version's dataset is carried as it is
  (:func:`~xarray_vhdf5.xr._stage.commit_staged` does not touch it: nothing
  read, nothing written);
- it grew along its one dimension and its first points are the stored ones
  (an append), attrs and encoding unchanged: only the new points are
  CF-encoded (xarray's coders act point by point once the ``units``,
  ``calendar`` and ``dtype`` are fixed, and a stored variable's encoding
  holds them) and written into the dataset (``resize`` and an assignment:
  its last chunk and the new ones), provided they encode to the stored dtype
  and attributes (:func:`encode_appended`); else
- it is rewritten as any other variable (the writer's dedupe by hash).

Values are compared bit for bit (``datetime64``, floats with NaN), attrs and
encoding by type and value, so any edit (``assign_coords``, an attribute set
in place, a changed ``units``) is a rewrite. Only non-object 1-D variables
are recorded: a table of them costs a copy of each coordinate per commit.
The table lives in ``Dataset.encoding[STORED_KEY]`` (name -> StoredValues);
xarray copies a Dataset's encoding to derived Datasets, and each entry
names the version it describes, so an entry reaching a Dataset of another
version is ignored.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any

import numpy as np
import xarray as xr

from .._backend.names import HIDDEN_VARIABLE_ATTRS, NETCDF_DIMENSION_ATTRS
from ..errors import IncompatibleDataError
from ._encoding import cf_encode_variables, inherit_stored_encoding, kept_attrs, stored_values

__all__ = ["STORED_KEY", "StoredValues", "encode_appended", "same_value"]

#: ``Dataset.encoding`` key of a staged Dataset: name -> :class:`StoredValues`.
STORED_KEY = "vhdf5_stored_values"

#: Attributes on a stored dataset that are no variable attribute (format, dimension names, netCDF-4 scales).
_NOT_VARIABLE_ATTRS = HIDDEN_VARIABLE_ATTRS | NETCDF_DIMENSION_ATTRS | {"CLASS", "NAME"}


def same_value(a: Any, b: Any) -> bool:
    """True if ``a`` and ``b`` are of one type and equal (numpy arrays: same dtype, shape and bytes; NaN == NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, np.generic)):
        if a.dtype != b.dtype or np.shape(a) != np.shape(b):
            return False
        if a.dtype.hasobject:
            return all(same_value(x, y) for x, y in zip(np.ravel(a), np.ravel(b)))
        return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    if isinstance(a, float) and a != a:
        return b != b
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _copy(value: Any) -> Any:
    """A copy of an attribute or encoding value that edits of ``value`` in place do not reach."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, (str, bytes, int, float, complex, bool, tuple, np.generic, np.dtype, type(None))):
        return value  # immutable (a tuple of mutable items is not met in attrs or encoding)
    return copy.deepcopy(value)


@dataclasses.dataclass(frozen=True, eq=False)
class StoredValues:
    """An in-memory 1-D variable as the dataset ``path`` of ``version`` stores it.

    Attributes
    ----------
    version : str
        The version whose dataset holds these values.
    path : str
        The dataset's path in the version group (``"time"``, ``"ocean/time"``).
    dims : tuple of str
    values : numpy.ndarray
        The decoded values, a read-only copy (1-D, not ``object``).
    attrs, encoding : dict
        Deep copies of the variable's ``attrs`` and ``encoding``.
    """

    version: str
    path: str
    dims: tuple
    values: np.ndarray | None
    attrs: dict
    encoding: dict

    @classmethod
    def of(cls, var: xr.Variable, version: str, path: str) -> StoredValues | None:
        """The record of ``var`` as stored at ``path`` in ``version``; None for one not recorded.

        Recorded: 1-D variables of a dtype other than ``object`` (numbers,
        times, fixed-width strings).
        """
        if var.ndim != 1 or var.dtype.hasobject:
            return None
        values = np.array(var.values, copy=True)
        if values.dtype.hasobject:
            return None
        values.flags.writeable = False
        return cls(version, path, tuple(var.dims), values, _copy(dict(var.attrs)), _copy(dict(var.encoding)))

    @classmethod
    def metadata_of(cls, var: xr.Variable, version: str, path: str) -> StoredValues:
        """A record of ``var``'s dims, attrs and encoding only (a staged variable: its values are staged)."""
        return cls(version, path, tuple(var.dims), None, _copy(dict(var.attrs)), _copy(dict(var.encoding)))

    def same_metadata(self, var: xr.Variable, version: str, path: str) -> bool:
        """True if ``var`` has this record's dims, attrs and encoding, and ``version``/``path`` are the record's."""
        return (
            version == self.version
            and path == self.path
            and tuple(var.dims) == self.dims
            and same_value(dict(var.attrs), self.attrs)
            and same_value(dict(var.encoding), self.encoding)
        )

    def points_kept(self, var: xr.Variable, version: str, path: str) -> int | None:
        """How many of ``var``'s first points the stored dataset holds; None: rewrite it.

        Parameters
        ----------
        var : xarray.Variable
            The variable to commit, not yet CF-encoded.
        version, path : str
            The parent of the commit and the dataset's path in it.

        Returns
        -------
        int or None
            ``len(values)`` when ``var`` has this record's dims, attrs and
            encoding, is at least as long, and starts with these values bit
            for bit (equal length: unchanged; longer: appended to); None
            otherwise, or when the record is of another version or path.
        """
        if self.values is None:
            return None
        n = len(self.values)
        if var.dtype != self.values.dtype or var.ndim != 1 or var.shape[0] < n:
            return None
        if not self.same_metadata(var, version, path):
            return None
        head = np.asarray(var.values[:n] if var.shape[0] > n else var.values)
        return n if same_value(np.ascontiguousarray(head), np.ascontiguousarray(self.values)) else None


def encode_appended(group, name: str, var: xr.Variable, kept: int) -> np.ndarray | None:
    """The stored values of ``var[kept:]``, or None when they would not be stored as dataset ``group[name]`` is.

    Encoded as a rewrite of the whole variable would be (the dataset's
    stored encoding inherited where ``var`` is silent:
    :func:`~xarray_vhdf5.xr._encoding.inherit_stored_encoding`); None when
    the encoder warns or refuses, or its dtype or attributes differ from the
    dataset's (then the whole variable is rewritten, which reports them).
    The attributes compared are the staged dataset's, the parent's as it
    holds them (loaded once: the commit writes them; netCDF-4's object
    references are not read).

    Parameters
    ----------
    group : InMemoryGroup
        The staged group holding dataset ``name`` (the parent version's, not
        yet grown).
    name : str
        The dataset's name in ``group``.
    var : xarray.Variable
        1-D, not yet CF-encoded; its first ``kept`` points are stored.
    kept : int
        Points of ``var`` the dataset already holds.

    Returns
    -------
    numpy.ndarray or None
        1-D, ``len(var) - kept`` points of the dataset's dtype.
    """
    dataset = group[name]
    tail = var.to_base_variable()[kept:]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            encoded, _ = cf_encode_variables(inherit_stored_encoding(group, {name: tail}), {})
            new = encoded[name]
            values = stored_values(name, new)
    except (Warning, ValueError, TypeError, OverflowError, IncompatibleDataError):
        return None
    if values.dtype != np.dtype(dataset.dtype) or values.ndim != 1:
        return None
    attrs = dataset.attrs
    kept_now = {k: attrs[k] for k in attrs if k not in _NOT_VARIABLE_ATTRS}
    if not same_value(kept_attrs(kept_now, dict(new.attrs), True), kept_now):
        return None
    return values
