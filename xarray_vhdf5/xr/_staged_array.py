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

The staged array holds the values *as stored* (CF-encoded); the Dataset
shows them CF-decoded, as ``xr.open_dataset`` does, through a
:class:`~xarray_vhdf5.xr._cfcodec.CFCodec` applied block by block.

The staging state lives here, with the data, not on the accessor (xarray
builds a new accessor for every derived Dataset): the file, the version the
data came from, the dataset's path in it, the file's current version when
staged. ``copy.deepcopy`` (``staged.copy(deep=True)``) gives a copy-on-write
copy that keeps it. The base slab is raw_data read through the stage's
read-only handle (:mod:`~xarray_vhdf5.xr._stagefile`), which a commit closes
and the next read reopens.

The module re-exports the names its neighbours define (``CFCodec``,
``StageFile``, ``RawRows``, ``CharArrayValues``, ``checked_string_encoding``)
for the modules that import them from here.
"""

from __future__ import annotations

import dataclasses
import os

import h5py
import numpy as np

from .._backend.hashtable import hash_table_id, table_extends, table_state
from .._staging import StagedChangesArray
from ..errors import StaleVersionError
from ._cfcodec import CF_ATTRS, CF_ENCODING, CFCodec, checked_string_encoding
from ._duck import WRITEABLE, CharArrayValues, ComputesAsNumpy, Flags, array_key, bounding_box, n_arrays
from ._stagefile import RawRows, StageFile

__all__ = [
    "CF_ATTRS",
    "CF_ENCODING",
    "CFCodec",
    "CharArrayValues",
    "RawRows",
    "StageFile",
    "StageOrigin",
    "StagedVariableArray",
    "checked_string_encoding",
    "same_file",
]


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


class StagedVariableArray(ComputesAsNumpy):
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
    def flags(self) -> Flags:
        """numpy's ``writeable`` and ``owndata`` flags, both True: an editable array of its own.

        xarray reads them when an assignment raises ``ValueError`` (to tell a
        read-only numpy view apart); the original error (e.g. numpy's "could
        not broadcast") then reaches the caller.
        """
        return WRITEABLE

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

    def rebase(
        self, staged: StagedChangesArray, origin: StageOrigin, base_table_state: tuple[int, bytes] | None
    ) -> None:
        """After a commit of this data: ``staged`` (no changes) over the new version, ``origin`` naming it.

        Parameters
        ----------
        staged : StagedChangesArray
            The committed points, mapped as the new version maps them.
        origin : StageOrigin
            The new version (the parent of the next commit) and the file's head.
        base_table_state : tuple of (int, bytes) or None
            The hash-table state ``staged``'s map was taken under (the one
            it had when the commit carried the dataset unchanged).
        """
        self.staged = staged
        self.origin = origin
        self.base_table_state = base_table_state

    # -- indexing ----------------------------------------------------------------------
    def _read_raw(self, key: tuple) -> np.ndarray:
        with self.handle.reading():
            staged = self._ensure_open()
            if n_arrays(key) <= 1:
                return np.asarray(staged[key])
            box = bounding_box(key, self.shape)
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
        key = array_key(key)
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
        key = array_key(key)
        raw = self.codec.encode(value, self.origin.path)
        with self.handle.reading():
            # chunks of the base are read (partly overwritten ones) through RawRows if detached:
            # the file opens only then, not for a write of whole chunks (a daily append)
            staged = self.staged
            if n_arrays(key) <= 1:
                staged[key] = raw
                self.codec = self.codec.widened(np.asarray(value))
                return
            box = bounding_box(key, self.shape)
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
        with self.handle.reading():  # the edge chunk is read, if partly filled, as __setitem__ reads
            self.staged.resize(shape)

    # -- numpy protocols -------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a StagedVariableArray cannot be viewed as numpy without a copy (numpy's copy=False)")
        out = self[(Ellipsis,)]
        return out if dtype is None else out.astype(dtype)

    def astype(self, dtype, **kwargs) -> np.ndarray:
        return np.asarray(self).astype(dtype, **kwargs)

    def _like(self, staged: StagedChangesArray) -> StagedVariableArray:
        """A new array of ``staged``, same codec, origin and base (registered with the handle by the constructor)."""
        return type(self)(staged, self.codec, self.origin, self.handle, self.raw_path, self.base_table_state)

    def __copy__(self) -> StagedVariableArray:
        """As :meth:`__deepcopy__`: a copy never shares staged chunks (a numpy array's copy does not share data)."""
        return self._like(self.staged.copy())

    def __deepcopy__(self, memo) -> StagedVariableArray:
        """A copy-on-write copy (no chunk copied until either side writes), same origin; nothing read."""
        return self._like(self.staged.copy())


def same_file(a: str | os.PathLike | None, b: str | os.PathLike | None) -> bool:
    """True if both paths name the same file."""
    if a is None or b is None:
        return False
    return os.path.realpath(os.fspath(a)) == os.path.realpath(os.fspath(b))
