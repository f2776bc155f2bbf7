"""The arrays behind a staged Dataset: :class:`StagedVariableArray`.

``ds.vhdf5.stage()`` (:mod:`~xarray_vhdf5.xr._stage`) puts one
:class:`StagedVariableArray` in each variable it can stage. It is a *duck
array* in xarray's sense (xarray docs, "Integrating with duck arrays": an
object with ``shape``, ``dtype``, ``ndim``, ``__array_function__`` and
``__array_ufunc__``), so xarray keeps it as the variable's data instead of
converting it to numpy. xarray routes item assignment to it through that
public protocol: ``Variable.__setitem__`` broadcasts the value to the
selection and calls ``array[key] = value`` on the duck array, with ``key`` a
numpy-style tuple of ints, slices and integer arrays (xarray's
``NdArrayLikeIndexingAdapter``); ``Variable.__getitem__`` / ``isel`` call
``array[key]``. Both reach :class:`~xarray_vhdf5._staging.StagedChangesArray`,
which reads only the chunks a selection touches and keeps every change in
memory. Nothing here imports a private xarray module.

The staged array holds the values *as stored* (CF-encoded: ``-1e34`` fill
values, packed integers, time offsets); the Dataset shows them CF-decoded,
as ``xr.open_dataset`` does. :class:`CFCodec` converts each block read or
written with xarray's own coders (:func:`xarray.conventions.decode_cf_variable`,
:func:`xarray.conventions.encode_cf_variable`), which act point by point, so
a block converts independently of the rest of the variable.

The staging state lives here, with the data, not on the accessor (xarray
builds a new accessor for every derived Dataset): the file, the version the
data came from, the dataset's path in it, the file's current version when
staged. ``copy.deepcopy`` (``staged.copy(deep=True)``) gives a copy-on-write
copy that keeps it.

File handles: the base slab is the raw_data ``h5py.Dataset`` of a read-only
handle owned by the stage (:class:`StageFile`), registered with the engine's
handles so that :func:`~xarray_vhdf5.xr._reading.close_read_handles` closes it
before a commit opens the file for writing (libhdf5 refuses a read-write open
while the process holds a read-only one). Before closing, each array swaps
its base slab for a :class:`RawRows` (same rows, read through the stage's
handle, which reopens the file); the next read swaps the reopened
``h5py.Dataset`` back in (:meth:`~xarray_vhdf5._staging.StagedChangesArray.astype`
with ``base_slabs``, "Hot-swapping the base slabs"), so staged changes
survive and reads stay on the compiled path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import os
import weakref
from collections.abc import Iterator
from typing import Any, Literal, NamedTuple

import h5py
import numpy as np
import xarray as xr

from .._backend.hashtable import hash_table_id, table_extends, table_state
from .._backend.signature import open_for_reading
from .._staging import StagedChangesArray, cast_for_storage
from .._versions import generation
from .._versions.locking import file_locks
from ..errors import StaleVersionError

__all__ = [
    "CFCodec",
    "CharArrayValues",
    "RawRows",
    "StageFile",
    "StageOrigin",
    "StagedVariableArray",
    "checked_string_encoding",
]

#: Attributes CF decoding moves from ``attrs`` into ``encoding``.
CF_ATTRS = ("_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned", "units", "calendar")
#: The ``encoding`` keys that decide how values are stored.
CF_ENCODING = (*CF_ATTRS, "dtype")
_MASK_ATTRS = ("_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned")
#: The units xarray decodes times to (``numpy.datetime_data(dtype)[0]``), as its coders take them.
_TIME_UNITS: dict[str, Literal["s", "ms", "us", "ns"]] = {"s": "s", "ms": "ms", "us": "us", "ns": "ns"}


@dataclasses.dataclass(frozen=True)
class StageOrigin:
    """Where staged data came from.

    Attributes
    ----------
    source : str
        Real path of the versioned HDF5 file.
    version : str
        The version the data was staged from (the parent of the next commit).
    head : str
        The file's current version when staged; a commit finding another one
        raises :class:`~xarray_vhdf5.errors.StaleVersionError`.
    path : str
        The dataset's path inside the version group (``"sst"``, ``"ocean/sst"``).
    """

    source: str
    version: str
    head: str
    path: str

    def rebased(self, version: str) -> StageOrigin:
        """The same dataset in ``version``, which is also the file's current version."""
        return dataclasses.replace(self, version=version, head=version)


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


class StageFile:
    """The read-only handle a stage owns on its file, shared by its arrays.

    :meth:`close` (called by :func:`~xarray_vhdf5.xr._reading.close_read_handles`
    before a commit, and by the staged Dataset's ``close()``) first detaches
    every array from the handle (their base slab becomes a :class:`RawRows`,
    which reopens the file when read), so staged changes survive it.

    Parameters
    ----------
    path : str
        Real path of the file.
    """

    def __init__(self, path: str):
        self.path = path
        self._file: h5py.File | None = None
        self.arrays: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        #: Bases found stale when the file was last opened: ``base_key`` -> message.
        self._stale: dict[tuple, str] = {}
        #: What the handle's libhdf5 caches reflect: the file's counters (or stat) at its opening.
        self._opened_at: tuple | None = None

    def _state(self, f: h5py.File | None = None) -> tuple:
        """The file's write counters (read as bytes), or its (mtime, size) when it has none."""
        if f is not None:
            self._offset = generation.locate(f)
        offset: int | None = getattr(self, "_offset", None)
        if offset is None:
            st = os.stat(self.path)
            return ("stat", st.st_mtime_ns, st.st_size)
        return tuple(generation.read_at_bytes(file_locks(self.path).pread(16, offset).ljust(16, b"\0")))

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the file's ``WRITE`` lock shared while the stage reads through its handle.

        A commit of another process rewrites libhdf5's metadata in place: a
        read meanwhile, or through a cache that predates it, is torn. So reads
        wait for a running commit, and a handle opened before a commit is
        closed first (the arrays keep their rows: :meth:`StagedVariableArray.detach`)
        and opened again, checked, by :meth:`acquire`.

        Raises
        ------
        FileBusyError
            A writer held the file past the reader's timeout.
        """
        with file_locks(self.path).resolving():
            if self._file is not None and self._file.id.valid and self._state() != self._opened_at:
                self.close()
            yield

    def acquire(self, base: tuple | None = None) -> h5py.File:
        """The open file (opened read-only if needed).

        On reopening, every registered array is checked
        (:meth:`StagedVariableArray.check_base`); the stale ones are only
        recorded, so the others stay readable.

        Parameters
        ----------
        base : tuple, optional
            ``(raw_path, base_table_state)`` of the array about to read
            (:attr:`StagedVariableArray.base_key`); refused if that base was
            found stale.

        Raises
        ------
        StaleVersionError
            ``base`` was rewritten by another writer meanwhile (its raw_data
            rows moved: versions deleted, or ``modify_metadata``).
        """
        if self._file is None or not self._file.id.valid:
            # Holding no flock: the stage never blocks a writer (a commit of this
            # process holds libhdf5's lock on its own handle while it reads the stage).
            f = open_for_reading(self.path, held=True)
            states: dict = {}  # each hash table's state read once (arrays share raw_data)
            stale: dict[tuple, str] = {}
            try:
                for array in list(self.arrays.values()):
                    try:
                        array.check_base(f, states)
                    except StaleVersionError as err:
                        stale[array.base_key] = str(err)
            except BaseException:
                f.close()
                raise
            self._file, self._stale = f, stale
            self._opened_at = self._state(f)
        if base is not None and base in self._stale:
            raise StaleVersionError(self._stale[base])
        return self._file

    def register(self, array: StagedVariableArray) -> None:
        self.arrays[id(array)] = array

    def close(self) -> None:
        """Detach the arrays, then close the handle (it reopens on the next read)."""
        for array in list(self.arrays.values()):
            array.detach()
        if self._file is not None and self._file.id.valid:
            self._file.close()
        self._file = None


class RawRows:
    """A raw_data read through a :class:`StageFile`: a base slab that survives closing the file.

    Also stands for the first rows of a raw_data that grew since it was
    staged (another commit appended to it): staged chunks only address rows
    below ``shape[0]``, which commits never change. Deleting versions and
    ``modify_metadata`` rewrite raw_data; the file is then refused when
    reopened (:meth:`StageFile.acquire`).
    Read-only array-like (``shape``, ``dtype``, numpy slicing).
    """

    def __init__(
        self,
        handle: StageFile,
        raw_path: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        table_state: tuple[int, bytes] | None = None,
    ):
        self.handle = handle
        self.raw_path = raw_path
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        #: The hash-table state the rows were mapped under (``StagedVariableArray.base_table_state``).
        self.table_state = table_state

    def __getitem__(self, key):
        return self.handle.acquire((self.raw_path, self.table_state))[self.raw_path][key]


def _array_key(key: Any) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _n_arrays(key: tuple) -> int:
    return sum(isinstance(k, np.ndarray) or isinstance(k, list) for k in key)


def _bounding_box(key: tuple, shape: tuple[int, ...]) -> tuple[tuple, tuple] | None:
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


class _Flags(NamedTuple):
    writeable: bool
    owndata: bool


_WRITEABLE = _Flags(True, True)


class _ComputesAsNumpy(np.lib.mixins.NDArrayOperatorsMixin):
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


class StagedVariableArray(_ComputesAsNumpy):
    """A staged variable's data: CF-decoded view of a :class:`~xarray_vhdf5._staging.StagedChangesArray`.

    Parameters
    ----------
    staged : StagedChangesArray
        Stored (CF-encoded) values; base slab: the dataset's raw_data.
    codec : CFCodec
        Conversion between stored and shown values.
    origin : StageOrigin
        File, version and dataset path the data came from.
    handle : StageFile
        The stage's read-only handle on the file; reopened after a commit closed it.
    raw_path : str
        Absolute HDF5 path of the dataset's raw_data.
    base_table_state : tuple of (int, bytes), optional
        ``backend.hashtable.table_state`` of raw_data's hash table, taken
        before the chunk map: :meth:`check_base` compares it with the file.

    Notes
    -----
    Arithmetic and comparison operators come from numpy's
    ``NDArrayOperatorsMixin`` (through ``__array_ufunc__``).
    ``self[key]`` returns a numpy array (only the touched chunks are read);
    ``self[key] = value`` stages the touched chunks; numpy functions and
    ufuncs (``np.where``, ``+``...) read the whole array and return numpy
    arrays. Keys with several integer arrays (xarray's vectorized indexing)
    read or rewrite the bounding box of the selection.
    """

    def __init__(
        self,
        staged: StagedChangesArray,
        codec: CFCodec,
        origin: StageOrigin,
        handle: StageFile,
        raw_path: str,
        base_table_state: tuple[int, bytes] | None = None,
    ):
        self.staged = staged
        self.codec = codec
        self.origin = origin
        self.handle = handle
        self.raw_path = raw_path
        self.base_table_state = base_table_state
        handle.register(self)

    @property
    def base_key(self) -> tuple:
        """``(raw_path, base_table_state)``: what :meth:`check_base` checks (copies share it)."""
        return (self.raw_path, self.base_table_state)

    def check_base(self, f: h5py.File, states: dict | None = None) -> None:
        """Refuse a file whose raw_data was rewritten since the chunk map was taken.

        The staged array reads its unchanged chunks, and a commit maps them, at
        the raw_data rows of the staged-from version. Deleting versions
        (which compacts raw_data) and ``modify_metadata`` move those rows and
        rebuild the hash table; commits only append rows
        (``backend.hashtable.table_extends``).

        Parameters
        ----------
        f : h5py.File
            The file, open.
        states : dict, optional
            Hash-table states already read from ``f``, by raw_data path
            (filled here): arrays staged over the same raw_data read it once.

        Raises
        ------
        StaleVersionError
            The hash table beside raw_data no longer extends the one seen
            when staging (or raw_data is gone).
        """
        if self.base_table_state is None:
            return
        known = states.get(self.raw_path) if states is not None else None
        if known is not None:
            table, now = known
        else:
            try:
                table = hash_table_id(f[self.raw_path])
            except KeyError:
                table, now = None, None
            else:
                now = table_state(table)
            if states is not None:
                states[self.raw_path] = (table, now)
        if now is None or (now != self.base_table_state and not table_extends(table, self.base_table_state, now)):
            raise StaleVersionError(
                f"{self.origin.source!r}: the raw_data of {self.origin.path!r} ({self.raw_path}) was rewritten "
                f"since it was staged from version {self.origin.version!r} (versions deleted, or "
                "modify_metadata); the staged data would map chunks that moved: stage again"
            )

    # -- duck array attributes ---------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.staged.shape

    @property
    def dtype(self) -> np.dtype:
        return self.codec.dtype

    @property
    def ndim(self) -> int:
        return self.staged.ndim

    @property
    def size(self) -> int:
        return self.staged.size

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def flags(self) -> _Flags:
        """numpy's ``writeable`` and ``owndata`` flags, both True: an editable array of its own.

        xarray reads them when an assignment raises ``ValueError`` (to tell a
        read-only numpy view apart); the original error (e.g. numpy's "could
        not broadcast") then reaches the caller.
        """
        return _WRITEABLE

    @property
    def has_changes(self) -> bool:
        """True if a chunk differs from the staged-from version (or the shape does)."""
        return self.staged.has_changes

    def __repr__(self) -> str:
        return (
            f"StagedVariableArray(shape={self.shape}, dtype={self.dtype}, "
            f"path={self.origin.path!r}, version={self.origin.version!r}, changes={self.has_changes})"
        )

    def _repr_inline_(self, max_width: int) -> str:
        text = f"staged from {self.origin.version!r}" + (", changed" if self.has_changes else "")
        return text[:max_width]

    # -- file handle -----------------------------------------------------------------
    def detach(self) -> None:
        """Make the base slab a :class:`RawRows` (before the file handle closes)."""
        bases = self.staged.base_slabs
        if bases and isinstance(bases[0], h5py.Dataset) and bases[0].id.valid:
            # the shape libhdf5 sees now: a commit in this process may have grown raw_data
            rows = RawRows(self.handle, self.raw_path, tuple(bases[0].shape), self.staged.dtype, self.base_table_state)
            self.staged = self.staged.astype(self.staged.dtype, base_slabs=[rows])

    def _ensure_open(self) -> StagedChangesArray:
        """Read the base slab through an open h5py dataset again (fast compiled reads)."""
        bases = self.staged.base_slabs
        if bases and isinstance(bases[0], RawRows):
            raw = self.handle.acquire(self.base_key)[self.raw_path]  # acquire() checked the rows did not move
            old = bases[0].shape
            if raw.shape[1:] == old[1:] and raw.shape[0] >= old[0]:  # the same rows, perhaps more after
                self.staged = self.staged.astype(self.staged.dtype, base_slabs=[raw])
        return self.staged

    def for_commit(self, raw_data: h5py.Dataset) -> StagedChangesArray:
        """The staged array with ``raw_data`` (a writable handle on the same dataset) as base slab.

        raw_data may have grown since staging (other commits appended chunks);
        the rows the staged chunk map addresses are unchanged
        (:meth:`check_base`, called before).
        """
        self.detach()
        bases = self.staged.base_slabs
        if not bases or bases[0] is None:
            return self.staged
        return self.staged.astype(self.staged.dtype, base_slabs=[raw_data])

    def rebase(self, staged: StagedChangesArray, version: str) -> None:
        """After a commit of this data as ``version``: no changes left, parent ``version``."""
        self.staged = staged
        self.origin = self.origin.rebased(version)

    # -- indexing ----------------------------------------------------------------------
    def _read_raw(self, key: tuple) -> np.ndarray:
        with self.handle.reading():
            staged = self._ensure_open()
            if _n_arrays(key) <= 1:
                return np.asarray(staged[key])
            box = _bounding_box(key, self.shape)
            if box is None:
                return np.asarray(staged[...])[key]
            return np.asarray(staged[box[0]])[box[1]]

    def __getitem__(self, key) -> np.ndarray:
        """The decoded points of ``key`` (numpy's indexing; ``None`` axes with a basic index).

        xarray inserts axes with ``None`` (``Variable.set_dims``, e.g. in
        ``xr.concat`` of a variable lacking the concatenated dimension); the
        staging engine, like h5py, takes no ``None``: the points are read
        without, and the axes added to the result.
        """
        key = _array_key(key)
        if any(k is None for k in key) and all(
            k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer)) for k in key
        ):
            inner = tuple(k for k in key if k is not None)
            outer = tuple(
                np.newaxis if k is None else (Ellipsis if k is Ellipsis else slice(None))
                for k in key
                if k is None or not isinstance(k, (int, np.integer))
            )
            return self.codec.decode(self._read_raw(inner))[outer]
        return self.codec.decode(self._read_raw(key))

    def __setitem__(self, key, value) -> None:
        """Stage ``value`` (shown values) at ``key`` (numpy's indexing).

        Raises
        ------
        ValueOverflowError, ValueTypeError, ValueCastError
            A value the variable's dtype cannot hold, where numpy raises
            ``OverflowError`` / ``TypeError`` / ``ValueError`` for such a
            scalar (:meth:`CFCodec.encode`); nothing is staged.
        StringTooLongError
            A string longer than a fixed-width (``S6``) variable holds (numpy
            would truncate it); nothing is staged. A ``str`` variable stored
            as variable-length strings takes any length (its dtype widens).
        """
        key = _array_key(key)
        raw = self.codec.encode(value, self.origin.path)
        with self.handle.reading():
            staged = self._ensure_open()
            if _n_arrays(key) <= 1:
                staged[key] = raw
                self.codec = self.codec.widened(np.asarray(value))
                return
            box = _bounding_box(key, self.shape)
            if box is None:
                block_key, rel = (Ellipsis,), key
            else:
                block_key, rel = box
            block = np.array(staged[block_key])
            block[rel] = raw
            staged[block_key] = block
            self.codec = self.codec.widened(np.asarray(value))

    def resize(self, shape) -> None:
        """Change the shape in place (new points: the fill value); see ``StagedChangesArray.resize``."""
        with self.handle.reading():
            self._ensure_open().resize(shape)

    # -- numpy protocols -------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a StagedVariableArray cannot be viewed as numpy without a copy (numpy's copy=False)")
        out = self[(Ellipsis,)]
        return out if dtype is None else out.astype(dtype)

    def astype(self, dtype, **kwargs) -> np.ndarray:
        return np.asarray(self).astype(dtype, **kwargs)

    def _like(self, staged: StagedChangesArray) -> StagedVariableArray:
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.staged = staged
        self.handle.register(new)  # checked with the others when the stage's file reopens
        return new

    def __copy__(self) -> StagedVariableArray:
        """As :meth:`__deepcopy__`: a copy never shares staged chunks (a numpy array's copy does not share data)."""
        with self.handle.reading():
            return self._like(self._ensure_open().copy())

    def __deepcopy__(self, memo) -> StagedVariableArray:
        """A copy-on-write copy (no chunk copied until either side writes), same origin."""
        with self.handle.reading():
            return self._like(self._ensure_open().copy())


class CharArrayValues(_ComputesAsNumpy):
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
    if isinstance(obj, (StagedVariableArray, CharArrayValues)):
        return np.asarray(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_as_numpy(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _as_numpy(v) for k, v in obj.items()}
    return obj


def same_file(a: str | os.PathLike | None, b: str | os.PathLike | None) -> bool:
    """True if both paths name the same file."""
    if a is None or b is None:
        return False
    return os.path.realpath(os.fspath(a)) == os.path.realpath(os.fspath(b))
