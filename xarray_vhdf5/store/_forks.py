"""Writes from dask workers: ``store.fork()`` handles that pickle, ``store.merge(*forks)`` on the client.

A writable :class:`~xarray_vhdf5.store.VersionStore` keeps its writes in this
process, so it refuses to pickle. ``store.fork()`` gives a
:class:`StoreFork`: a writable zarr store over the same base version that
pickles (path, version, group and a spool directory), so dask tasks on other
processes can write through it::

    fork = store.fork()
    ds.to_zarr(fork, mode="w")          # dask tasks write chunks on the workers
    store.merge(fork)
    store.commit(message="...")

How writes reach the client: **spool files**. Each fork owns a directory
beside the HDF5 file (``<file>.forks/<id>/``); every ``set`` on any copy of
the fork writes the key's encoded bytes (zarr's codecs ran on the worker, so
chunks arrive compressed) to a file there, atomically (written aside, then
renamed); deletes leave tombstones. ``merge`` lists the directory and records
each key as a reference to its file (:class:`~._overlay.Spooled`), reading
nothing but the ``zarr.json`` documents; ``commit`` reads and decodes the
chunks one at a time. The trade-off, against icechunk's ``to_icechunk``
(which returns each fork's change set through a dask reduction to the
client): spool files need a filesystem the workers and the client share (one
machine, or a network filesystem beside the HDF5 file, which a versioned
HDF5 file already assumes of its writers), and leave a directory behind if
the client dies before committing; in exchange the client never holds the
written bytes in memory (the reduction would move every chunk through the
scheduler and the client), workers need no return path, and a fork works
with any scheduler and with plain ``to_zarr`` (no special function).
Workers compute, encode and compress; the client decodes, hashes and writes
raw_data (one writer of the file).

Conflicts: two forks (two ``fork()`` calls) that wrote the same key with
different bytes, or a fork that rewrote a key the store changed after the
fork was made, raise :class:`~xarray_vhdf5.errors.ConflictError` and nothing
is merged. Copies of one fork share its directory: tasks of one ``to_zarr``
write disjoint chunks (xarray's ``safe_chunks``).
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, unquote

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from ..errors import ConflictError
from ._listing import ListingFromList
from ._overlay import Spooled

if TYPE_CHECKING:
    from ._store import VersionStore

__all__ = ["StoreFork", "fork_store", "merge_forks"]

# spool subdirectories: the fork's writes, tombstones, deleted prefixes; the same of the store's
# pending writes at fork() time (the seed)
_DATA, _GONE, _CLEARED = "k", "d", "x"
_SEED, _SEED_GONE, _SEED_CLEARED = "s", "sd", "sx"
_KINDS = (_DATA, _GONE, _CLEARED, _SEED, _SEED_GONE, _SEED_CLEARED)


def _name(key: str) -> str:
    return quote(key, safe="") or "%"  # "" (the root prefix) as "%"


def _key(name: str) -> str:
    return "" if name == "%" else unquote(name)


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class StoreFork(ListingFromList, Store):
    """A picklable writable handle on a :class:`~xarray_vhdf5.store.VersionStore` (see the module docstring).

    Made by :meth:`VersionStore.fork`, not directly. Reads see the fork's own
    writes, then the store's pending writes at the time of ``fork()``, then
    the base version.

    Attributes
    ----------
    spool : str
        The fork's directory (shared by its pickled copies).
    """

    supports_listing = True

    @property
    def supports_writes(self) -> bool:
        """True unless a read-only view (``with_read_only(True)``)."""
        return not self.read_only

    @property
    def supports_deletes(self) -> bool:
        """True unless a read-only view."""
        return not self.read_only

    #: Pending writes are not consolidated (the commit consolidates the version's
    #: metadata): ``to_zarr`` neither consolidates nor looks for consolidated metadata.
    supports_consolidated_metadata = False

    def __init__(
        self,
        path: str,
        version: str | None,
        group: str | None,
        spool: str,
        *,
        numcodecs: bool = False,
        read_only: bool = False,
    ) -> None:
        super().__init__(read_only=read_only)
        self.path, self.version, self.group, self.spool = path, version, group, spool
        self.numcodecs = numcodecs
        self._base: Any = None

    # -- pickling, equality -------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "version": self.version,
            "group": self.group,
            "spool": self.spool,
            "numcodecs": self.numcodecs,
            "read_only": self.read_only,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        StoreFork.__init__(  # the state __getstate__ above made: this class's arguments
            self,
            state["path"],
            state["version"],
            state["group"],
            state["spool"],
            numcodecs=state["numcodecs"],
            read_only=state["read_only"],
        )

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and (other.spool, other.read_only) == (self.spool, self.read_only)

    def __hash__(self) -> int:
        return hash((self.spool, self.read_only))

    def __repr__(self) -> str:
        return f"StoreFork({self.path!r}, version={self.version!r}, spool={self.spool!r})"

    def with_read_only(self, read_only: bool = False) -> StoreFork:
        """Another handle on this fork's spool (``read_only=True``: a view refusing writes, for zarr's ``mode="r"``)."""
        return type(self)(
            self.path, self.version, self.group, self.spool, numcodecs=self.numcodecs, read_only=read_only
        )

    # -- the layers ---------------------------------------------------------------------------
    def _file(self, kind: str, key: str) -> str:
        return os.path.join(self.spool, kind, _name(key))

    def _base_store(self):
        if self._base is None:
            from ._store import VersionStore

            if self.version is None:
                self._base = _Nothing()
            else:
                self._base = VersionStore(
                    self.path, self.version, self.group, numcodecs=self.numcodecs, coalesce_bytes=None
                )  # the chunks zarr writes
        return self._base

    def _names(self, kind: str) -> list[str]:
        return [_key(n) for n in os.listdir(os.path.join(self.spool, kind)) if not n.endswith(".tmp")]

    def _cleared(self) -> list[str]:
        return self._names(_CLEARED)

    def _hidden(self, key: str, seed: bool) -> bool:
        """Whether the layer below the fork's own writes hides ``key`` (deleted by the fork, or the seed's)."""
        if os.path.exists(self._file(_GONE, key)) or any(key.startswith(p) for p in self._cleared()):
            return True
        return seed and (
            os.path.exists(self._file(_SEED_GONE, key)) or any(key.startswith(p) for p in self._names(_SEED_CLEARED))
        )

    def _read(self, key: str) -> bytes | Literal[_Ask.BASE] | None:
        """The fork's bytes of ``key``, None if it has none, or ``_BASE``: ask the base version."""
        try:
            with open(self._file(_DATA, key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            pass
        if self._hidden(key, seed=False):
            return None
        try:
            with open(self._file(_SEED, key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            pass
        if self._hidden(key, seed=True):
            return None
        return None if isinstance(self._base_store(), _Nothing) else _BASE

    # -- zarr.abc.store.Store -----------------------------------------------------------------
    async def _open(self) -> None:
        if self._is_open:
            raise ValueError("store is already open")
        self._is_open = True

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        """The fork's value of ``key``: its own write, the store's at fork time, or the base version's."""
        from ._store import _slice

        data = await asyncio.to_thread(self._read, key)
        if data is _BASE:
            return await self._base_store().get(key, prototype, byte_range)
        if data is None:
            return None
        return prototype.buffer.from_bytes(_slice(data, byte_range))

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """Several (key, byte range) gets, concurrently."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        """Whether the fork has ``key``."""
        data = await asyncio.to_thread(self._read, key)
        if data is _BASE:
            return await self._base_store().exists(key)
        return data is not None

    async def set(self, key: str, value: Buffer) -> None:
        """Write ``key`` to the spool (a file, renamed into place: atomic for concurrent readers)."""
        self._check_writable()
        data = value.to_bytes()

        def write() -> None:
            _write_atomic(self._file(_DATA, key), data)
            _remove(self._file(_GONE, key))

        await asyncio.to_thread(write)

    async def delete(self, key: str) -> None:
        """Delete ``key`` (a tombstone in the spool); no error if absent."""
        self._check_writable()

        def delete() -> None:
            _write_atomic(self._file(_GONE, key), b"")
            _remove(self._file(_DATA, key))

        await asyncio.to_thread(delete)

    async def delete_dir(self, prefix: str) -> None:
        """Delete every key under ``prefix`` (``""``: all, as ``to_zarr(mode="w")`` does)."""
        self._check_writable()
        if prefix and not prefix.endswith("/"):
            prefix += "/"

        def delete() -> None:
            for kind in (_DATA, _GONE):
                for name in os.listdir(os.path.join(self.spool, kind)):
                    if _key(name).startswith(prefix):
                        _remove(os.path.join(self.spool, kind, name))
            _write_atomic(self._file(_CLEARED, prefix), b"")

        await asyncio.to_thread(delete)

    def _list(self) -> list[str]:
        keys = set(self._names(_DATA))
        keys.update(k for k in self._names(_SEED) if not self._hidden(k, seed=False))
        return sorted(keys)

    async def list(self) -> AsyncIterator[str]:
        """Every key of the fork: its writes, the store's pending ones, the base version's."""
        keys = await asyncio.to_thread(self._list)
        seen = set(keys)
        for key in keys:
            yield key
        base = self._base_store()
        if isinstance(base, _Nothing):
            return
        async for key in base.list():
            if key not in seen and not await asyncio.to_thread(self._hidden, key, True):
                yield key


class _Nothing:
    """The base of a fork of a store over no version."""


class _Ask(enum.Enum):
    """A sentinel of one member (an enum: the checker narrows ``is _BASE`` tests)."""

    BASE = "base"


_BASE = _Ask.BASE  # _read's answer: ask the base version


def fork_store(store: VersionStore) -> StoreFork:
    """A :class:`StoreFork` of writable ``store`` (see :meth:`VersionStore.fork`)."""
    store._ensure_state()
    session = store._writes
    spool = os.path.join(f"{store.path}.forks", uuid.uuid4().hex)
    for kind in _KINDS:
        os.makedirs(os.path.join(spool, kind))
    overlay = session.overlay
    with overlay.lock:
        written = dict(overlay.written)
        deleted, cleared = set(overlay.deleted), set(overlay.cleared)
    seeds = {}
    for key in written:  # the store's pending writes, as the fork sees them
        data = overlay.value(key)
        assert data is not None, "a written key has a value"
        _write_atomic(os.path.join(spool, _SEED, _name(key)), data)
        seeds[key] = _digest(data)
    for key in deleted:
        _write_atomic(os.path.join(spool, _SEED_GONE, _name(key)), b"")
    for prefix in cleared:
        _write_atomic(os.path.join(spool, _SEED_CLEARED, _name(prefix)), b"")
    session.forks[spool] = seeds
    return StoreFork(store.path, session.parent, store.group, spool, numcodecs=store.numcodecs)


def _conflict(message: str, key: str) -> ConflictError:
    return ConflictError(message + "; nothing merged", keys=[key])


def merge_forks(store: VersionStore, forks: tuple[StoreFork, ...]) -> None:
    """Bring the writes of ``forks`` into ``store``'s pending writes (see :meth:`VersionStore.merge`)."""
    session = store._writes
    overlay = session.overlay
    # key -> (spool, its file or None: deleted, digest of what the fork wrote or None)
    changes: dict[str, tuple[str, str | None, str | None]] = {}
    clears: list[str] = []
    for fork in forks:
        if not isinstance(fork, StoreFork) or fork.spool not in session.forks:
            raise ValueError(
                f"merge() takes forks of this store (store.fork()) that are not merged already, got {fork!r}"
            )
    for fork in forks:
        seeds = session.forks[fork.spool]
        seed_gone = set(fork._names(_SEED_GONE))
        clears.extend(fork._cleared())
        for kind in (_DATA, _GONE):
            for name in sorted(os.listdir(os.path.join(fork.spool, kind))):
                if name.endswith(".tmp"):
                    continue
                key, file = _key(name), os.path.join(fork.spool, kind, name)
                value = _read_file(file) if kind == _DATA else None
                digest = None if value is None else _digest(value)
                if digest is not None and seeds.get(key) == digest:
                    continue  # the store's own pending value, seen by the fork: not a change
                if key in changes and changes[key][2] != digest:
                    raise _conflict(
                        f"merge(): two forks wrote {key!r} with different bytes ({changes[key][0]} and {fork.spool})",
                        key,
                    )
                now = overlay.value(key)
                now_digest = None if now is None else _digest(now)
                if (
                    now_digest != seeds.get(key) or (key in overlay.deleted) != (key in seed_gone)
                ) and now_digest != digest:
                    raise _conflict(
                        f"merge(): {key!r} was changed by the store after fork() and by the fork "
                        f"{fork.spool}, differently",
                        key,
                    )
                changes[key] = (fork.spool, file if kind == _DATA else None, digest)
    for prefix in clears:
        overlay.delete_dir(prefix)
    for key, (_, spooled, _) in changes.items():
        if spooled is None:
            overlay.delete(key)
        else:
            overlay.set(key, Spooled(spooled))
    for fork in forks:
        session.spools.append(fork.spool)
        del session.forks[fork.spool]


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def remove_spools(paths: list[str]) -> None:
    """Remove merged forks' directories once committed (and ``<file>.forks`` once empty)."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(path))
        except OSError:
            pass
    paths.clear()
