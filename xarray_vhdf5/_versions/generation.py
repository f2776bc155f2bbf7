"""The file's write counters: how a process sees that another one changed the file.

Two int64 counters, little-endian, in a contiguous dataset whose bytes never
move once allocated, so that any process can read them with one ``pread`` of
16 bytes, without libhdf5 and without trusting a metadata cache
(``/__vhdf5__/generation``, in this package's bookkeeping group, which
versioned-hdf5 2.6 never reads: :mod:`~xarray_vhdf5._versions.bookkeeping`;
files written before keep it at ``/_version_data/__vhdf5_version_index__/generation``
until their next write moves the group, which leaves the bytes where they are):

- ``writes``: incremented by every mutation of the file this package makes
  (a commit, a deletion, ``modify_metadata``, a hash-table rebuild), written
  under the ``WRITE`` lock (:mod:`~xarray_vhdf5._versions.locking`) and flushed
  with the mutation. A handle that remembers the value it last wrote sees,
  before its next commit, whether another process wrote the file since: its
  libhdf5 caches are then stale and committing through it would damage the
  file.
- ``moves``: incremented before chunks of raw_data move or are freed (a
  deletion, ``modify_metadata``), under the ``MOVE`` lock. A reader holding
  chunk addresses resolved earlier checks it before reading bytes and
  resolves again when it changed.

A file no process of this package wrote has no counters: both read as 0, and
the first writer creates them.
"""

from __future__ import annotations

import os
import struct

import h5py
import numpy as np
from h5py import h5d, h5p

from . import bookkeeping

__all__ = [
    "COUNTERS_PATH",
    "LEGACY_COUNTERS_PATH",
    "Counters",
    "create",
    "encode",
    "locate",
    "open_counters",
    "read_at",
    "read_at_bytes",
]

#: Path of the counters dataset.
COUNTERS_PATH = f"{bookkeeping.PATH}/generation"
#: Its path in a file written before the bookkeeping moved (read until the next write moves it).
LEGACY_COUNTERS_PATH = f"{bookkeeping.LEGACY_PATH}/generation"
_COUNTERS = COUNTERS_PATH.encode()
_DTYPE = np.dtype("<i8")
_STRUCT = struct.Struct("<qq")  # the same two int64, packed without numpy (a commit's hot path)


class Counters(tuple):
    """``(writes, moves)`` as read from the file."""

    __slots__ = ()

    def __new__(cls, writes: int, moves: int):
        return super().__new__(cls, (int(writes), int(moves)))

    @property
    def writes(self) -> int:
        return self[0]

    @property
    def moves(self) -> int:
        return self[1]


def open_counters(f: h5py.File) -> h5py.Dataset | None:
    """The counters dataset of ``f`` (at :data:`COUNTERS_PATH`, else :data:`LEGACY_COUNTERS_PATH`), or None.

    Both paths name the same dataset, at the same byte offset, before and after
    the move of the bookkeeping group (:func:`~xarray_vhdf5._versions.bookkeeping.migrate`).
    """
    where = bookkeeping.find(f)
    if where is None:
        return None
    try:  # opened low-level (no link walk, no class check): every reader's open asks
        return h5py.Dataset(h5d.open(f.id, f"{where}/generation".encode()))
    except KeyError:
        return None


def locate(f: h5py.File) -> int | None:
    """Byte offset of the counters in the file, or None when the file has none yet.

    Every open of a reader and of a writer asks: one ``H5Dopen`` of
    :data:`COUNTERS_PATH`, no ``h5py.Dataset`` made; else where
    :func:`open_counters` finds them.
    """
    try:
        dsid = h5d.open(f.id, _COUNTERS)
    except KeyError:
        ds = open_counters(f)
        dsid = None if ds is None else ds.id
    offset = None if dsid is None else dsid.get_offset()
    return None if offset is None else int(offset)


def read_at(fd: int, offset: int | None) -> Counters:
    """The counters read from the file's bytes at ``offset`` (``(0, 0)`` for None).

    Raises
    ------
    OSError
        The read failed; or fewer than 16 bytes are there (a truncated file).
    """
    if offset is None:
        return Counters(0, 0)
    raw = os.pread(fd, 16, offset)
    if len(raw) != 16:
        raise OSError(f"the file ends inside its write counters (at byte {offset})")
    return read_at_bytes(raw)


def read_at_bytes(raw: bytes) -> Counters:
    """The counters held by the 16 bytes ``raw`` read at their offset."""
    return Counters(*_STRUCT.unpack(raw))


def _create(f: h5py.File) -> h5py.Dataset:
    grp = bookkeeping.require_group(f)
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_layout(h5d.CONTIGUOUS)
    dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)  # an address from the start, which never changes
    dcpl.set_fill_time(h5d.FILL_TIME_ALLOC)
    space = h5py.h5s.create_simple((2,))
    dsid = h5d.create(grp.id, b"generation", h5py.h5t.STD_I64LE, space, dcpl=dcpl)
    return h5py.Dataset(dsid)


def create(f: h5py.File) -> int:
    """Create the counters (both 0) through libhdf5, flush, and return their byte offset.

    The caller holds the ``WRITE`` lock. From then on the counters are read and
    written only as bytes (:func:`read_at`, :func:`encode`), never through
    libhdf5, whose caches (the dataset's sieve buffer) would hold old values.
    """
    ds = _create(f)
    ds[...] = np.zeros(2, dtype=_DTYPE)
    f.file.flush()
    return int(ds.id.get_offset())


def encode(counters: Counters) -> bytes:
    """The 16 bytes that hold ``counters`` in the file."""
    return _STRUCT.pack(*counters)
