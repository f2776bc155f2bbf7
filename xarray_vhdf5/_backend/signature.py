"""Tell an HDF5 file from another file, for error messages.

libhdf5 refuses a file that is not HDF5 with ``OSError: Unable to synchronously
open file (file signature not found)``, which names neither the file nor what
it is. :func:`not_hdf5_error` looks for the HDF5 signature where the format
puts it and, when it is absent, builds a :class:`~xarray_vhdf5.errors.NotHDF5Error`
that names the file and, for the formats recognised here (netCDF-3), what it is.
Only called once libhdf5 has refused a file: the open path of a valid file
reads nothing more.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

import h5py
from h5py import h5f

from ..errors import NotHDF5Error

__all__ = ["has_hdf5_signature", "not_hdf5_error", "open_for_reading", "open_h5file", "recorded_end"]

#: The 8 bytes that start an HDF5 superblock (HDF5 File Format Specification, "Superblock").
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

#: The first bytes of other formats users hand to an HDF5 reader, and what they are.
_OTHER_FORMATS = {
    b"CDF\x01": "a netCDF-3 classic file",
    b"CDF\x02": "a netCDF-3 64-bit offset file",
    b"CDF\x05": "a netCDF-3 64-bit data (CDF-5) file",
}


def _superblock_offsets(size: int):
    """0, 512, 1024, 2048, ... below ``size``: where libhdf5 searches for the signature."""
    yield 0
    offset = 512
    while offset + len(HDF5_SIGNATURE) <= size:
        yield offset
        offset *= 2


def recorded_end(path: str | os.PathLike) -> int | None:
    """Where the file ends by its superblock: its end-of-file address (bytes from the start of the file).

    libhdf5 allocates new objects from there, and makes the file that long
    when it closes it. A file longer than this was written past it by a
    writer that did not close it: one killed, or one still writing. Reads
    the superblock's first bytes (versions 0 to 3, ``H5Fsuper.c``'s layout);
    None when the file has no superblock this reads (no signature, an unknown
    version, offsets other than 4 or 8 bytes).
    """
    import struct

    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            for offset in _superblock_offsets(size):
                fh.seek(offset)
                head = fh.read(64)
                if head[:8] == HDF5_SIGNATURE:
                    break
            else:
                return None
    except OSError:
        return None
    version = head[8]
    if version in (0, 1):
        width, fields = head[13], 24 if version == 0 else 28
    elif version in (2, 3):
        width, fields = head[9], 12
    else:
        return None
    if width not in (4, 8) or len(head) < fields + 3 * width:
        return None
    # After the base address and the free-space (v0/v1) or extension (v2/v3) address. With a
    # user block, libhdf5 stores it counted from the start of the file (measured: h5py,
    # userblock_size=512, HDF5 2.0), as the file's length after a close.
    end = struct.unpack_from("<I" if width == 4 else "<Q", head, fields + 2 * width)[0]
    return int(end)


def has_hdf5_signature(fh) -> tuple[bool, bytes]:
    """Whether the binary file object ``fh`` holds the HDF5 signature; also its first 8 bytes.

    The signature is at offset 0, or after a user block at 512, 1024, 2048, ...
    bytes. ``fh``'s position is restored.
    """
    start = fh.tell()
    try:
        size = fh.seek(0, os.SEEK_END)
        head = b""
        for offset in _superblock_offsets(size):
            fh.seek(offset)
            found = fh.read(len(HDF5_SIGNATURE))
            if offset == 0:
                head = found
            if found == HDF5_SIGNATURE:
                return True, head
        return False, head
    finally:
        fh.seek(start)


def not_hdf5_error(filename_or_obj, *, hint: str = "") -> NotHDF5Error | None:
    """A :class:`NotHDF5Error` if ``filename_or_obj`` is a readable file without the HDF5 signature.

    Parameters
    ----------
    filename_or_obj : str, os.PathLike or binary file object
        What libhdf5 refused to open.
    hint : str
        What to do instead, appended to the message.

    Returns
    -------
    NotHDF5Error or None
        None when the file holds the signature (libhdf5's error is then about
        something else: a truncated or damaged file), cannot be read, or is not
        a regular file: the caller re-raises libhdf5's error.
    """
    try:
        if isinstance(filename_or_obj, (str, os.PathLike)):
            path = os.fspath(filename_or_obj)
            if not os.path.isfile(path):
                return None
            with open(path, "rb") as fh:
                found, head = has_hdf5_signature(fh)
            shown = repr(path)
        else:
            found, head = has_hdf5_signature(filename_or_obj)
            name = getattr(filename_or_obj, "name", None)
            shown = repr(name) if isinstance(name, str) else f"the {type(filename_or_obj).__name__} object"
    except (OSError, ValueError, AttributeError, TypeError):  # unreadable, closed, not seekable
        return None
    if found:
        return None
    if not head:
        what = "an empty file"
    else:
        what = _OTHER_FORMATS.get(head[:4], f"it starts with {head[:8]!r}, not the HDF5 signature")
    message = f"{shown} is not an HDF5 file ({what})"
    return NotHDF5Error(f"{message}: {hint}" if hint else message)


def _open_matching_locking(path: str, mode: str, locking) -> h5py.File:
    # libhdf5 opens a file once per process and refuses a second open whose locking
    # settings differ from the first's: then take the settings of the handle this
    # process already holds (its lock, if any, is already taken).
    *others, last = [locking] + [c for c in (False, None, True, "best-effort") if c != locking]
    for choice in others:
        try:
            return h5py.File(path, mode, locking=choice)
        except OSError as exc:
            if "flag values don't match" not in str(exc):
                raise
    return h5py.File(path, mode, locking=last)


def open_h5file(path: str | os.PathLike, mode: str, *, hint: str = "", locking: bool | None = None) -> h5py.File:
    """``h5py.File(path, mode)``, with a :class:`NotHDF5Error` for a file that is not HDF5.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mode : str
        h5py's mode (``"r"``, ``"a"``, ...).
    hint : str
        What to do instead, appended to the message (see :func:`not_hdf5_error`).
    locking : bool or None
        h5py's ``locking``: libhdf5's whole-file lock (None: h5py's default, on).
        When this process already has the file open with the other setting,
        libhdf5 refuses a second value: the file is then opened with that one.

    Raises
    ------
    NotHDF5Error
        ``path`` exists and is not an HDF5 file (e.g. netCDF-3); nothing was written.
    OSError
        h5py's, for any other failure (missing with mode ``"r"``, unreadable, damaged).
    """
    try:
        return _open_matching_locking(os.fspath(path), mode, locking)
    except BlockingIOError:  # libhdf5's lock: the file is HDF5, and busy
        raise
    except OSError as exc:
        error = not_hdf5_error(path, hint=hint)
        if error is None:
            raise
        raise error from exc


def open_for_reading(path: str | os.PathLike, *, hint: str = "", held: bool = False) -> h5py.File:
    """Open ``path`` read-only without keeping libhdf5's file lock, so that no writer waits for it.

    A handle closed again at once (``held=False``) is opened with libhdf5's
    locking off (or, when this process already has the file open, with that
    handle's settings). A handle kept open (``held=True``) is opened as
    ``h5py.File(path, "r")`` opens it (libhdf5's default
    locking), so that a plain ``h5py.File(path)`` opened later in the same
    process shares it (libhdf5 refuses a second open whose locking settings
    differ); then, when this is the process's only handle of the file, the
    ``flock`` libhdf5 took is released: a writer of another process is not
    refused while this handle is open. When another program holds libhdf5's
    lock exclusively (a writer that has the file open), the file is opened with
    libhdf5's locking off instead.

    Raises
    ------
    NotHDF5Error, OSError
        As :func:`open_h5file`.
    """
    if not held:
        # A handle closed again at once: libhdf5's locking off, so that not even for an
        # instant does a writer relying on libhdf5's lock (plain h5py) find it taken.
        return open_h5file(path, "r", hint=hint, locking=False)
    try:
        f = open_h5file(path, "r", hint=hint)
    except BlockingIOError:
        return open_h5file(path, "r", hint=hint, locking=False)
    if f.driver == "sec2" and h5f.get_obj_count(f.id, h5f.OBJ_FILE) == 1:
        with contextlib.suppress(OSError):
            fcntl.flock(f.id.get_vfd_handle(), fcntl.LOCK_UN)
    return f
