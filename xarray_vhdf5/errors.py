"""Exceptions raised by xarray_vhdf5.

Every exception the package raises on purpose derives from :class:`VHDF5Error`
and *also* from the builtin exception a user of h5py, numpy or versioned-hdf5
would already catch, so existing ``except KeyError:`` / ``except ValueError:``
code keeps working::

    VHDF5Error (Exception)
    ├── VersionNotFoundError   (KeyError, ValueError, IndexError)
    │                                             no version of that name / index / time
    │   ├── VersionKeyTypeError (TypeError)       a version designated by neither a name,
    │   │                                         an int nor a timestamp
    │   └── RefNotFoundError                      no such branch or tag, or its version deleted
    ├── DatasetNotFoundError   (KeyError)         no versioned dataset of that name
    ├── VersionExistsError     (ValueError)       a version of that name already exists
    │   └── RefExistsError                        a branch or tag name already in use
    ├── NothingToCommitError   (ValueError)       an xarray commit that changes nothing
    │                                             (``allow_empty=True`` commits it anyway)
    ├── HistoryExistsError     (FileExistsError: OSError, ValueError)
    │                                             ``commit(path, mode="w-")`` into a file
    │                                             that already holds versions
    ├── StaleVersionError      (ValueError)       committing staged edits whose parent is no
    │                                             longer the file's current version
    │   └── ConflictError      (ValueError)       a rebase or merge where both sides changed
    │                                             the same points (``points`` lists them)
    ├── FileBusyError          (BlockingIOError: OSError)
    │                                             another writer held the file's lock for
    │                                             longer than the timeout
    ├── NotVersionedError      (ValueError)       the HDF5 file has no ``_version_data``
    │   └── NotHDF5Error       (OSError)          the file is not HDF5 at all (e.g. netCDF-3)
    ├── ReadOnlyError          (PermissionError, ValueError)
    │                                             writing to a committed version or a
    │                                             file opened read-only
    ├── IncompatibleDataError  (ValueError)       shape / dtype / chunks / fill value that
    │                                             cannot be stored or do not match
    │   ├── LabelsNotFoundError (KeyError)        ``commit(region="auto")``: coordinate labels
    │   │                                         the stored version does not have
    │   ├── DatasetMismatchError (TypeError)      ``require_dataset`` found one of another
    │   │                                         shape or dtype (h5py raises TypeError)
    │   ├── AxisOutOfBoundsError (numpy.exceptions.AxisError: ValueError, IndexError)
    │   │                                         ``ds.resize(n, axis=a)`` with an axis the
    │   │                                         dataset does not have
    │   └── ValueCastError     (ValueError)       a written value the dataset's dtype cannot
    │       │                                     hold (NaN into integers, as numpy refuses)
    │       ├── ValueOverflowError (OverflowError) out of the dtype's range (2**40 into
    │       │                                     int32, inf into integers, 1e300 into float32)
    │       ├── ValueTypeError (TypeError)        a kind numpy does not cast to it implicitly
    │       │                                     (complex into a real dtype)
    │       └── StringTooLongError (ValueError)   a string longer than a fixed-width string
    │                                             dtype (``S6``) holds: never truncated
    ├── ClosedFileError        (ValueError)       the file (or version) was closed, also
    │                                             under an object read from it
    ├── UnsupportedError       (NotImplementedError)
    │                                             valid for numpy but not supported here
    │                                             (scalar datasets, ``h5py.Empty``, ...)
    ├── HDF5Error              (OSError)          libhdf5 reported a failure in a kernel
    ├── MemoryBudgetError      (ValueError)       a rechunk's ``max_mem`` below the plan's
    │                                             minimum (one input and one output chunk)
    └── CorruptFileError       (OSError)          the file is damaged: truncated, a chunk that
                                                  does not decompress or whose hash differs,
                                                  a mapping past raw_data

One warning: :class:`RepairedFileWarning` (a ``UserWarning``), issued when this package
opened a file left damaged by a writer killed mid-commit and repaired it first
(``docs/howto/repair.md``).

The builtin bases cover what versioned-hdf5 2.6 raises in the same situation (a missing
version: ``KeyError`` from ``vf[name]``, ``ValueError`` from ``stage_version(prev_version=)``
and ``delete_versions``, ``IndexError`` from ``vf[-n]`` past the first version; a key of
another type: ``KeyError``), so code written for it catches ours. A file that is
not HDF5 at all raises :class:`NotHDF5Error`: the ``OSError`` h5py, versioned-hdf5
and xarray's h5netcdf engine raise for it, and a :class:`NotVersionedError`, since
such a file holds no versions either.

Arguments of the wrong type (a path where an open file is expected, a list where a
str is) raise a plain ``TypeError``, as Python's own functions do: they are bugs of
the calling code, not conditions to handle, and the message says what is accepted.

Messages say what happened, what was received and, where there is one, what
to do instead.
"""

from __future__ import annotations

from numpy.exceptions import AxisError

__all__ = [
    "AxisOutOfBoundsError",
    "ClosedFileError",
    "ConflictError",
    "CorruptFileError",
    "DatasetMismatchError",
    "DatasetNotFoundError",
    "FileBusyError",
    "HDF5Error",
    "HistoryExistsError",
    "IncompatibleDataError",
    "LabelsNotFoundError",
    "MemoryBudgetError",
    "NotHDF5Error",
    "NotVersionedError",
    "NothingToCommitError",
    "ReadOnlyError",
    "RefExistsError",
    "RefNotFoundError",
    "RepairedFileWarning",
    "StaleVersionError",
    "StringTooLongError",
    "UnsupportedError",
    "VHDF5Error",
    "ValueCastError",
    "ValueOverflowError",
    "ValueTypeError",
    "VersionExistsError",
    "VersionKeyTypeError",
    "VersionNotFoundError",
]


class VHDF5Error(Exception):
    """Base class of every exception raised on purpose by xarray_vhdf5."""


class VersionNotFoundError(VHDF5Error, KeyError, ValueError, IndexError):
    """A version name, index or timestamp does not match any committed version."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class RefNotFoundError(VersionNotFoundError):
    """No branch or tag of that name, or one whose version was deleted (a ``KeyError``).

    Raised by ``reset_branch``, ``delete_branch``, ``delete_tag`` and by opening
    a version through a ref whose version is gone (:mod:`xarray_vhdf5._versions.refs`).
    """


class VersionKeyTypeError(VersionNotFoundError, TypeError):
    """``vf[key]`` with a key that is neither a name, an int nor a timestamp."""


class DatasetNotFoundError(VHDF5Error, KeyError):
    """No versioned dataset of that name in the file (e.g. ``modify_metadata``)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class VersionExistsError(VHDF5Error, ValueError):
    """A version of that name already exists in the file."""


class RefExistsError(VersionExistsError):
    """A branch or tag name already names a branch, a tag or a version (a ``ValueError``)."""


class NothingToCommitError(VHDF5Error, ValueError):
    """A commit from xarray whose version would equal its parent: nothing changed.

    Raised by ``ds.vhdf5.commit(...)`` (staged or with ``path=``) unless
    ``allow_empty=True``, as icechunk refuses an empty commit; nothing is
    written. ``VersionedHDF5File.stage_version`` does not raise it: a block that
    changes nothing commits an empty version there, as in versioned-hdf5.
    """


class HistoryExistsError(VHDF5Error, FileExistsError, ValueError):
    """``ds.vhdf5.commit(path, mode="w-")``: the file already holds versions.

    ``to_zarr(mode="w-")`` refuses an existing store the same way (zarr raises a
    ``ValueError`` subclass; Python's ``open(path, "x")`` a ``FileExistsError``).
    """


class StaleVersionError(VHDF5Error, ValueError):
    """Staged edits would be committed onto data that is no longer what was staged.

    Raised by ``staged.vhdf5.commit()`` when another version was committed to
    the file since ``ds.vhdf5.stage()``; ``commit(force=True)`` commits anyway
    (the new version's parent stays the staged-from version), ``commit(rebase=True)``
    merges onto the current version (:class:`ConflictError` if it cannot). Raised when a
    ``VersionedHDF5File.stage_version`` block ends if another handle rewrote
    a staged dataset's raw_data or the previous version's datasets meanwhile
    (deleting versions, ``modify_metadata``): nothing is committed then.
    """


class NotVersionedError(VHDF5Error, ValueError):
    """The HDF5 file (or group) is not a versioned file: it has no ``_version_data``."""


class NotHDF5Error(NotVersionedError, OSError):
    """The file is not an HDF5 file at all (no HDF5 signature), e.g. a netCDF-3 classic file.

    An ``OSError`` as h5py's "file signature not found" is, so ``except OSError``
    written for h5py, versioned-hdf5 or another xarray engine still catches it.
    """


class ReadOnlyError(VHDF5Error, PermissionError, ValueError):
    """Writing to a committed version, or to a file opened read-only."""


class IncompatibleDataError(VHDF5Error, ValueError):
    """Data whose shape, dtype, chunks or fill value cannot be stored or do not match."""


class LabelsNotFoundError(IncompatibleDataError, KeyError):
    """``commit(region="auto")`` with coordinate labels the stored version does not have.

    A ``KeyError``, as ``to_zarr(region="auto")`` raises for labels missing
    from the store.
    """

    def __str__(self) -> str:  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else ""


class DatasetMismatchError(IncompatibleDataError, TypeError):
    """``require_dataset`` found a dataset of another shape or dtype (h5py and versioned-hdf5 raise TypeError)."""


class AxisOutOfBoundsError(IncompatibleDataError, AxisError):
    """An ``axis`` argument beyond the dataset's axes (``ds.resize(n, axis=2)`` in 2-d).

    numpy's ``AxisError`` (a ``ValueError`` and an ``IndexError``), as versioned-hdf5
    2.6 raises; ``axis`` and ``ndim`` hold the axis given and the dataset's number of
    axes.
    """

    def __init__(self, axis: int, ndim: int, msg_prefix: str | None = None):
        AxisError.__init__(self, axis, ndim, msg_prefix)  # "<msg_prefix>: axis 2 is out of bounds ..."


class ClosedFileError(VHDF5Error, ValueError):
    """The file, or the version object, was closed.

    Also raised by a committed version's groups, datasets and attributes, and by
    staged objects that read from the file, once their h5py file was closed (h5py
    raises libhdf5's ``RuntimeError`` / ``KeyError`` / ``ValueError`` there), and
    when a ``stage_version`` block ends after its h5py file was closed inside it.
    """


class UnsupportedError(VHDF5Error, NotImplementedError):
    """Valid for numpy or h5py, but not supported by the versioned format."""


class MemoryBudgetError(VHDF5Error, ValueError):
    """A memory budget (``max_mem``) below what the operation needs at least.

    Raised by the resplit planner (:func:`xarray_vhdf5.resplit.plan_resplit`)
    when ``max_mem`` cannot hold one input chunk and one output chunk; ``minimum``
    holds that least budget, in bytes.
    """

    def __init__(self, message: str, minimum: int):
        super().__init__(message)
        self.minimum = int(minimum)


class HDF5Error(VHDF5Error, OSError):
    """libhdf5 returned an error code inside one of the compiled kernels."""


class FileBusyError(VHDF5Error, BlockingIOError):
    """Another process (or thread) held the file's lock for longer than the timeout.

    A writer (a commit, ``delete_versions``, ``modify_metadata``) waits for the
    writer before it; a reader opening a version waits for a commit to finish
    writing the file's metadata. Both wait ``timeout`` seconds (see
    :mod:`xarray_vhdf5._versions.locking`), then raise this: a
    ``BlockingIOError`` (an ``OSError``), as libhdf5's own lock refusal is in
    h5py. ``holder_pid`` is the process holding the lock when it is known,
    else None; ``path`` the file.
    """

    def __init__(self, message: str, *, path: str | None = None, holder_pid: int | None = None):
        super().__init__(message)
        self.path = path
        self.holder_pid = holder_pid

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConflictError(StaleVersionError):
    """Both sides of a rebase or merge changed the same points of a variable.

    ``points`` maps each dataset path to an ``(n, ndim)`` int64 array of the
    conflicting points' indices (in points, not chunks), in C order;
    ``attributes`` maps each object path (``"/"``: the root group) to the
    sorted names of the attributes both sides changed differently; ``keys``
    lists the store keys in conflict (a zarr store's forks). Nothing is
    committed when it is raised.
    """

    def __init__(
        self,
        message: str,
        *,
        points: dict | None = None,
        attributes: dict | None = None,
        keys: list[str] | None = None,
    ):
        super().__init__(message)
        self.points = dict(points or {})
        self.attributes = dict(attributes or {})
        self.keys = list(keys or [])


class CorruptFileError(VHDF5Error, OSError):
    """The file is damaged: what was read does not match what the format promises.

    Raised for a truncated file, a chunk that does not decompress or whose
    SHA-256 differs from its hash-table digest (``verify=True``), a mapping
    that points past raw_data, or metadata libhdf5 cannot decode. An
    ``OSError``, as h5py's errors for unreadable files are. The message names
    the file and what failed; ``vhdf5 check FILE`` lists every problem.
    """

    def __init__(self, message: str, *, path: str | None = None, hdf5_object: str | None = None):
        super().__init__(message)
        self.path = path
        #: The HDF5 object that could not be read (absolute path), when one is known.
        self.hdf5_object = hdf5_object
        #: Whether the damage was repaired since (the operation that met it can be run again).
        self.repaired = False

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ValueCastError(IncompatibleDataError):
    """A value written to a dataset that its dtype cannot hold; nothing is written.

    Raised where numpy refuses the same value (``np.asarray(value, dtype)``,
    ``arr[i] = value``): NaN into an integer dtype is a ``ValueError`` there
    too. numpy casts *arrays* of another dtype without a check (``int64`` to
    ``int32`` wraps around); a versioned dataset refuses those values as well,
    so a stored number is always the one written. Fractions into integers are
    truncated, as numpy does.

    Attributes
    ----------
    name : str or None
        The dataset or variable written to.
    dtype : numpy.dtype
        Its dtype (the stored one).
    value : object
        The first value that does not fit (None when not known).
    """

    def __init__(self, message: str, *, name: str | None = None, dtype=None, value=None):
        super().__init__(message)
        self.name = name
        self.dtype = dtype
        self.value = value


class ValueOverflowError(ValueCastError, OverflowError):
    """A value out of the dtype's range: ``2**40`` or ``inf`` into ``int32``, ``-1`` into ``uint8``.

    An ``OverflowError``, as numpy raises for a Python int out of bounds and for
    a float infinity into integers (also a ``ValueError``). A finite float that
    overflows a narrower float dtype (``1e300`` into ``float32``; numpy only
    warns and stores ``inf``) is refused too.
    """


class ValueTypeError(ValueCastError, TypeError):
    """A value of a kind the dtype does not take: a complex number into a real dtype.

    A ``TypeError``, as numpy raises for ``np.asarray(1+2j, dtype="i4")``
    (numpy casts complex *arrays* by dropping the imaginary part, with a
    ``ComplexWarning``; a versioned dataset refuses them).
    """


class StringTooLongError(ValueCastError):
    """A string longer than a fixed-width string dataset (``S6``, ``<U6``) holds.

    numpy and h5py truncate it silently (``"CHANGED"`` becomes ``"CHANGE"``);
    here nothing is written. A dataset's dtype is fixed by its first version
    (``docs/format.md``), so it cannot widen: store the variable as variable-length
    strings (``h5py.string_dtype()``, or xarray's ``str``/object dtype) from its
    first version, or write a shorter value. ``width`` is the dtype's width in
    characters (bytes for ``S``).
    """

    def __init__(self, message: str, *, name: str | None = None, dtype=None, value=None, width: int = 0):
        super().__init__(message, name=name, dtype=dtype, value=value)
        self.width = width


class RepairedFileWarning(UserWarning):
    """A file was repaired when it was opened, before anything was read from it.

    A writer holding a plain ``h5py.File`` killed while libhdf5 flushed it can
    leave the versions group torn, or ``current_version`` naming a version
    whose group never reached the disk (``docs/howto/repair.md``). The first
    opener of this package that may write the file repairs it as
    ``vhdf5 check --repair`` would, as SQLite's first opener rolls back a hot
    journal, and issues this warning saying what it found and what it did:
    every version committed before stays unchanged, the interrupted one is
    absent. ``path`` names the file.
    """

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path
