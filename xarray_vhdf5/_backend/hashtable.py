"""The ``hash_table`` of one versioned dataset: SHA-256 digest -> rows of raw_data.

On disk (``docs/format.md``, "Layout"): a chunked, compressed 1-d dataset of
:data:`~xarray_vhdf5._backend.layout.HASH_TABLE_DTYPE` rows; the attribute
``largest_index`` counts the valid rows and is written last in a commit, so
rows past it (left by an interrupted commit) are ignored and overwritten.

Hash tables this package creates are not filtered (:data:`BOOKKEEPING_FILTER`),
nor are the version index's datasets. versioned-hdf5 creates them with h5py's
LZF filter, which only h5py registers, so ``ncdump`` and ``h5dump`` stopped at
the first one (``undefined filter``). Deflate, tried next, made every commit
free the last chunk of each table it appended to and allocate a larger one (a
filtered chunk that changes size cannot be rewritten in place), and libhdf5
does not reuse space freed in an earlier session: 1.6 KB per dataset per
commit lost for good, 29% of a 300-version file (``h5stat -S``). Unfiltered
chunks are rewritten in place. Any filter reads the same in both packages
(libhdf5 applies it); versioned-hdf5's lzf tables are read and appended to as
they are.
"""

from __future__ import annotations

import h5py
import numpy as np
from h5py import h5d

from ..errors import CorruptFileError
from .h5attrs import read_attr, write_attr
from .h5objects import object_address
from .layout import HASH_TABLE_CHUNKS, HASH_TABLE_DTYPE
from .rows import dataset_shape, read_rows, write_rows

#: h5py filter arguments of this package's own bookkeeping datasets (hash tables,
#: version index): none, so that a commit rewrites their last chunk in place
#: (see the module docstring) and every HDF5 tool reads them.
BOOKKEEPING_FILTER: dict = {}

__all__ = [
    "BOOKKEEPING_FILTER",
    "HashTable",
    "HashTableCache",
    "committed_chunks",
    "hash_table_id",
    "hash_table_path",
    "placeholder_digest",
    "table_extends",
    "table_state",
    "unreadable_hash_table",
]


class HashTable:
    """In-memory view of a ``hash_table`` dataset, appended to and flushed once per commit.

    Parameters
    ----------
    dataset : h5py.Dataset
        The ``hash_table`` dataset (see :meth:`create` for a new one).

    Notes
    -----
    The digests are loaded once (one read of ``largest_index`` rows) into a
    ``dict`` from the 32-byte digest to its row number, so a lookup is O(1).
    """

    def __init__(self, dataset: h5py.Dataset):
        self.dataset = dataset
        n = int(dataset.attrs.get("largest_index", 0))
        rows = dataset[:n] if n else np.empty(0, HASH_TABLE_DTYPE)
        digests = np.ascontiguousarray(rows["hash"]).tobytes()
        self._index: dict[bytes, int] = {digests[32 * i : 32 * (i + 1)]: i for i in range(n)}
        self._last_digest = digests[32 * (n - 1) : 32 * n] if n else b""
        self._stored = n
        self._ranges = rows["shape"]
        self._end = int(self._ranges[:, 1].max()) if n else 0
        self._new: list[tuple[bytes, int, int]] = []

    @classmethod
    def create(cls, group: h5py.Group) -> HashTable:
        """Create an empty ``hash_table`` in ``group`` (the dataset's ``_version_data`` group)."""
        ds = group.create_dataset(
            "hash_table",
            shape=(1,),
            dtype=HASH_TABLE_DTYPE,
            chunks=HASH_TABLE_CHUNKS,
            maxshape=(None,),
            **BOOKKEEPING_FILTER,
        )
        ds.attrs["largest_index"] = np.int64(0)
        return cls(ds)

    def __len__(self) -> int:
        return self._stored + len(self._new)

    @property
    def state(self) -> tuple[int, bytes]:
        """:func:`table_state` of the rows on disk (after :meth:`flush`)."""
        return self._stored, self._last_digest

    def __contains__(self, digest: bytes) -> bool:
        return digest in self._index

    def lookup(self, digest: bytes) -> tuple[int, int] | None:
        """Return ``(start, stop)``, the rows of raw_data (axis 0) holding the chunk, or None."""
        i = self._index.get(digest)
        if i is None:
            return None
        if i < self._stored:
            start, stop = self._ranges[i]
            return int(start), int(stop)
        _, start, stop = self._new[i - self._stored]
        return start, stop

    def end_row(self) -> int:
        """First row of raw_data (axis 0) after every chunk the table knows about."""
        return max(self._end, max(stop for _, _, stop in self._new)) if self._new else self._end

    def relocate(self, moves: dict[int, int]) -> None:
        """Move chunks added since the last :meth:`flush` to other rows of raw_data.

        Parameters
        ----------
        moves : dict of int to int
            First row (axis 0) of a chunk added since the last flush -> its new
            first row; the chunk keeps its number of rows. Rows on disk
            cannot move.

        Raises
        ------
        ValueError
            A first row in ``moves`` is not that of a chunk added since the last flush.
        """
        starts = {start for _, start, _ in self._new}
        if not starts.issuperset(moves):
            raise ValueError(f"rows {sorted(set(moves) - starts)} are not new chunks of this hash table")
        self._new = [(d, moves.get(a, a), moves.get(a, a) + b - a) for d, a, b in self._new]

    def add(self, digest: bytes, start: int, stop: int) -> None:
        """Record a new chunk stored at rows ``start:stop`` of raw_data (not yet on disk)."""
        if digest in self._index:
            raise ValueError("digest already in the hash table")
        self._index[digest] = len(self)
        self._new.append((digest, start, stop))

    def flush(self) -> int:
        """Write the new rows, then ``largest_index``; return how many rows were written."""
        if not self._new:
            return 0
        new = np.zeros(len(self._new), HASH_TABLE_DTYPE)
        new["hash"] = np.frombuffer(b"".join(d for d, _, _ in self._new), np.uint8).reshape(-1, 32)
        new["shape"] = [(a, b) for _, a, b in self._new]
        total = self._stored + len(new)
        dsid = self.dataset.id
        if dataset_shape(dsid)[0] < total:
            dsid.set_extent((total,))
        if dsid.dtype == HASH_TABLE_DTYPE:
            write_rows(dsid, self._stored, new)
        else:  # another layout of the same fields: let h5py convert
            self.dataset[self._stored : total] = new
        write_attr(self.dataset.id, "largest_index", np.int64(total))
        self._ranges = np.concatenate([self._ranges, new["shape"]])
        self._end = max(self._end, int(new["shape"][:, 1].max()))
        self._last_digest = self._new[-1][0]
        self._stored = total
        written, self._new = len(self._new), []
        return written


class HashTableCache:
    """The :class:`HashTable` of each dataset, kept between commits to one file.

    Loading a hash table reads all its rows; a pipeline committing version
    after version would pay that for every commit, growing with history.
    A cached table is reused while its dataset is the same HDF5 object, its
    ``largest_index`` still counts exactly the rows it holds and its last
    row's digest is the one it holds (so a table rebuilt by another writer,
    e.g. versioned-hdf5's ``delete_versions``, with as many rows is not
    mistaken for it); otherwise it is loaded again.
    """

    def __init__(self) -> None:
        self._tables: dict[int, HashTable] = {}

    def open(self, dataset: h5py.Dataset, address: int | None = None) -> HashTable:
        """The hash table of ``dataset`` (a ``hash_table`` h5py dataset; ``address``: its object address, if known)."""
        addr = address if address is not None else object_address(dataset.id)
        table = self._tables.get(addr)
        if table is None or not _still_valid(table, dataset):
            table = HashTable(dataset)
            self._tables[addr] = table
        else:
            table.dataset = dataset  # possibly another handle to the same file
        return table

    def release(self) -> None:
        """Drop the tables' h5py handles (kept between commits, they would hold the file open)."""
        for table in self._tables.values():
            table.dataset = None

    def put(self, table: HashTable) -> HashTable:
        """Keep ``table`` (one just created) and return it."""
        self._tables[object_address(table.dataset.id)] = table
        return table

    def clear(self) -> None:
        """Forget every table (after a failed commit or a rewrite of the file)."""
        self._tables = {}


def hash_table_path(raw_data: h5py.Dataset) -> bytes:
    """Absolute path of the ``hash_table`` beside ``raw_data`` (same ``_version_data`` group)."""
    return f"{raw_data.name.rpartition('/')[0]}/hash_table".encode()


def placeholder_digest(slot: int) -> bytes:
    """The 32-byte digest a rebuilt or repaired table gives a raw_data slot no chunk digest names.

    24 zero bytes, then ``slot`` (the chunk's row in raw_data divided by
    ``chunks[0]``) as 8 big-endian bytes: distinct per slot, so a table's last
    row still tells it apart (:func:`table_state`), and no SHA-256 of data
    equals it, so no commit deduplicates onto the slot.
    """
    return bytes(24) + int(slot).to_bytes(8, "big")


def hash_table_id(raw_data: h5py.Dataset) -> h5d.DatasetID:
    """The ``hash_table`` beside ``raw_data``, opened by path (no parent group opened).

    Raises
    ------
    KeyError
        No ``hash_table`` there.
    CorruptFileError
        One is linked there but libhdf5 cannot open it (:func:`unreadable_hash_table`).
    """
    try:
        return h5d.open(raw_data.id, hash_table_path(raw_data))
    except KeyError as exc:
        raise unreadable_hash_table(raw_data, exc) from exc


def unreadable_hash_table(raw_data: h5py.Dataset, exc: KeyError) -> KeyError | CorruptFileError:
    """What to raise when the ``hash_table`` beside ``raw_data`` did not open with ``exc``.

    ``exc`` itself when there is no ``hash_table`` link (a raw_data without
    one); a :class:`~xarray_vhdf5.errors.CorruptFileError` naming the table
    (``hdf5_object``) and ``vhdf5 check --repair`` when one is linked but
    libhdf5 cannot open it: its header torn, as a writer killed inside
    libhdf5's flush can leave it (``docs/howto/repair.md``).
    """
    if "hash_table" not in raw_data.parent:
        return exc
    name = raw_data.file.filename
    path = hash_table_path(raw_data).decode()
    return CorruptFileError(
        f"{name!r}: the hash table {path!r} cannot be read ({exc.args[0] if exc.args else exc}); nothing can be "
        f"committed to its dataset until it is written again from the versions (`vhdf5 check --repair {name}`, "
        "or a writable VersionedHDF5File when a commit meets it)",
        path=name,
        hdf5_object=path,
    )


def committed_chunks(raw_data: h5py.Dataset) -> int:
    """How many of raw_data's chunks commits finished writing: its hash table's ``largest_index``.

    Rows of raw_data past them (chunks, counted along axis 0) may be a crashed
    commit's, and are overwritten by the next commit.

    Raises
    ------
    KeyError
        No ``hash_table`` beside raw_data, or no ``largest_index`` attribute.
    """
    return int(np.asarray(read_attr(hash_table_id(raw_data), "largest_index", expect="int")).reshape(-1)[0])


def table_state(dataset: h5py.Dataset | h5d.DatasetID) -> tuple[int, bytes]:
    """``(largest_index, digest of the last valid row)`` of a ``hash_table`` dataset (or its id).

    One attribute and one row read, through h5py's low-level API (the high-level
    ``dataset[n - 1]`` builds several Python objects more). Any rewrite of a
    dataset's chunks by any library (deleting versions compacts raw_data and
    rebuilds the table; ``modify_metadata`` re-hashes every chunk) changes it,
    since rows are only ever appended otherwise.
    """
    dsid = dataset.id if isinstance(dataset, h5py.Dataset) else dataset
    try:
        count = np.asarray(read_attr(dsid, "largest_index", expect="int"))
    except KeyError:
        return 0, b""
    n = int(count.reshape(-1)[0]) if count.size else 0
    if n == 0:
        return 0, b""
    return n, _digest_at(dsid, n - 1)


def _digest_at(dsid: h5d.DatasetID, i: int) -> bytes:
    if dsid.dtype != HASH_TABLE_DTYPE:
        return bytes(np.asarray(h5py.Dataset(dsid)[i]["hash"], dtype=np.uint8))
    row = read_rows(dsid, i, np.empty(1, dtype=HASH_TABLE_DTYPE))
    return bytes(row["hash"][0])


def table_extends(dataset: h5py.Dataset | h5d.DatasetID, before: tuple[int, bytes], now: tuple[int, bytes]) -> bool:
    """Whether the table only grew from state ``before`` to state ``now`` (both from :func:`table_state`).

    Rows are appended by commits (of any library) and moved only by a rebuild
    (deleting versions compacts raw_data; ``modify_metadata`` re-hashes every
    chunk). A digest appears in one row only, so ``before``'s last digest
    still at its row means no row before it moved: chunk rows read under
    ``before`` still hold the same chunks.

    Parameters
    ----------
    dataset : h5py.Dataset or h5py.h5d.DatasetID
        The ``hash_table`` dataset.
    before, now : tuple of (int, bytes)
        ``(largest_index, last row's 32-byte SHA-256 digest)``, earlier and now.

    Returns
    -------
    bool
        True when equal, when ``before`` was empty, or when row
        ``before[0] - 1`` still holds ``before``'s digest (one row read);
        False when the table shrank or that row changed.
    """
    n, last = before
    if now == before or n == 0:
        return True
    if now[0] < n:
        return False
    dsid = dataset.id if isinstance(dataset, h5py.Dataset) else dataset
    return _digest_at(dsid, n - 1) == last


def _still_valid(table: HashTable, dataset: h5py.Dataset) -> bool:
    """Whether ``table`` still describes ``dataset`` on disk."""
    return not table._new and table_state(dataset) == table.state
