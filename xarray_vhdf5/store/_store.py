"""A committed version of a versioned HDF5 file as a zarr-python 3 store.

``VersionStore(path, version=...)`` presents one version's group tree as Zarr
v3 keys: ``zarr.json`` documents synthesized from the HDF5 datasets
(:mod:`._metadata`) and chunk keys ``<array>/c/<i>/<j>`` served from the
version's chunks in raw_data (:mod:`xarray_vhdf5.backend.manifest`), as the
file holds them when their filters are Zarr codecs (:mod:`._codecs`), else
decoded. Nothing is copied: a chunk key is a byte range of the file, read with
``os.pread`` while other processes commit (the version's chunks never change;
chunks moved by a delete are resolved again, as every reader of this package
does, :class:`~xarray_vhdf5.versions.SharedVersionedFile`).

Keys (Zarr v3 storage, "Chunk key encoding", default with ``/``)::

    zarr.json                 the store's group, every node's metadata inline
    sst/zarr.json             an array (a dataset of the version)
    sst/c/0/3/1               its chunk (0, 3, 1), when the version maps it
    grp/zarr.json, grp/...    a subgroup and its members
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable
from typing import Any

import numpy as np
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from ..versions import VersionedHDF5File
from ._codecs import numcodecs_pipeline
from ._metadata import ArrayNode, GroupNode, version_nodes, zarr_json_documents

__all__ = ["VersionStore"]


def _slice(data: bytes, byte_range: ByteRequest | None) -> bytes:
    if byte_range is None:
        return data
    if isinstance(byte_range, RangeByteRequest):
        return data[byte_range.start:byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return data[byte_range.offset:]
    if isinstance(byte_range, SuffixByteRequest):
        return data[len(data) - byte_range.suffix:] if byte_range.suffix else b""
    raise TypeError(f"unexpected byte_range, got {byte_range!r}")


class _Version:
    """What an open store reads: the reader, the resolved version, its nodes and their documents."""

    def __init__(self, path: str, version, group: str | None, numcodecs: bool, verify: bool):
        self.reader = VersionedHDF5File.open(path, verify=verify)
        try:
            self.version = self.reader.lookup(version)
            root = self.reader[self.version]
            self.group = root if group in (None, "", "/") else root[group.strip("/")]
            if hasattr(self.group, "shape"):
                raise KeyError(f"{group!r} in version {self.version!r} is a dataset, not a group")
            self.timestamp = self.reader.version_info(self.version).timestamp
            self.nodes = version_nodes(self.group, numcodecs=numcodecs, verify=verify)
            self.documents = zarr_json_documents(self.nodes)
        except BaseException:
            self.reader.close()
            raise
        self.datasets: dict[str, Any] = {}

    def dataset(self, node: ArrayNode):
        ds = self.datasets.get(node.key)
        if ds is None:
            ds = self.datasets[node.key] = self.group[node.key]
        return ds

    def close(self) -> None:
        self.reader.close()


class VersionStore(Store):
    """One version of a versioned HDF5 file as a read-only zarr-python 3 store.

    Parameters
    ----------
    path : str or os.PathLike
        The versioned HDF5 file (versioned-hdf5's format).
    version : str, int, datetime, numpy.datetime64 or None
        Which version, as ``xr.open_dataset(path, engine="vhdf5", version=...)``
        takes it (:func:`~xarray_vhdf5.versions.history.lookup_version`); None:
        the current one. Resolved to a name when the store opens; a pickled
        store (for dask workers) carries the name, so every worker reads the
        same version whatever is committed meanwhile.
    group : str, optional
        A group inside the version: the store's root (default the version's group).
    read_only : bool
        True (the default and the only mode of this class).
    numcodecs : bool
        Serve deflate, shuffle and Fletcher-32 chunks as the file holds them,
        through zarr-python's ``numcodecs.*`` codecs (which Zarr v3 does not
        specify; zarr-python warns). Default False: the store decodes them and
        serves them uncompressed. See :mod:`xarray_vhdf5.store._codecs`.
    verify : bool
        Check every chunk read against the hash table's SHA-256 digest
        (chunks are then served decoded);
        :class:`~xarray_vhdf5.errors.CorruptFileError` on a mismatch.

    Raises
    ------
    FileNotFoundError, NotHDF5Error, NotVersionedError
        From opening (``zarr.open_group(store)``, ``await VersionStore.open(...)``):
        no such file, not HDF5, no version history.
    VersionNotFoundError
        No such version.
    KeyError
        No such group in the version.

    Notes
    -----
    ``xr.open_zarr(store)`` gives the Dataset ``xr.open_dataset(path,
    engine="vhdf5", version=...)`` gives (:mod:`._metadata` says how). The
    store keeps one :class:`~xarray_vhdf5.versions.SharedVersionedFile` open;
    it never blocks a writer of the file.
    """

    supports_writes = False
    supports_deletes = False
    supports_listing = True

    def __init__(self, path: str | os.PathLike, version=None, group: str | None = None, *,
                 read_only: bool = True, numcodecs: bool = False, verify: bool = False) -> None:
        if not read_only:
            raise ValueError("VersionStore is read-only; stage a version to write it (see the README, "
                             "'From the zarr world')")
        super().__init__(read_only=True)
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"VersionStore takes a path, got {type(path).__name__}")
        self.path = os.path.abspath(os.fspath(path))
        self.version = version
        self.group = None if group in (None, "", "/") else str(group).strip("/")
        self.numcodecs, self.verify = bool(numcodecs), bool(verify)
        self._state: _Version | None = None

    # -- opening, pickling, equality ----------------------------------------------------------
    def _ensure_state(self) -> _Version:
        if self._state is None:
            self._state = _Version(self.path, self.version, self.group, self.numcodecs, self.verify)
            self.version = self._state.version  # pinned: a copy reads the same version
        return self._state

    async def _open(self) -> None:
        if self._is_open:
            raise ValueError("store is already open")
        await asyncio.to_thread(self._ensure_state)
        self._is_open = True

    async def _get_state(self) -> _Version:
        if not self._is_open:
            await self._open()
        return self._state

    def close(self) -> None:
        """Close the file (the store opens it again on its next read)."""
        if self._state is not None:
            self._state.close()
            self._state = None
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        if self._state is not None or self.version is None:
            self._ensure_state()
        return {"path": self.path, "version": self.version, "group": self.group,
                "numcodecs": self.numcodecs, "verify": self.verify}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["version"], state["group"],
                      numcodecs=state["numcodecs"], verify=state["verify"])

    def _identity(self) -> tuple:
        version = self.version if self.version is not None or self._state is None else self._state.version
        return (self.path, version, self.group, self.numcodecs, self.verify, self.read_only)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        group = f", group={self.group!r}" if self.group else ""
        return f"VersionStore({self.path!r}, version={self.version!r}{group})"

    def with_read_only(self, read_only: bool = False) -> VersionStore:
        """A new store over the same version; ``read_only=False`` raises (this class reads only)."""
        return type(self)(self.path, self.version, self.group, read_only=read_only,
                          numcodecs=self.numcodecs, verify=self.verify)

    # -- what the version holds ---------------------------------------------------------------
    @property
    def nodes(self) -> dict[str, ArrayNode | GroupNode]:
        """The store's arrays and groups by key (``""``: its root group); opens the file if needed."""
        return self._ensure_state().nodes

    def _locate(self, state: _Version, key: str) -> tuple[ArrayNode, tuple[int, ...]] | None:
        """The array and chunk index a chunk key names, or None."""
        parts = key.split("/")
        for at, part in enumerate(parts):
            if part != "c":
                continue
            node = state.nodes.get("/".join(parts[:at]))
            rest = parts[at + 1:]
            if isinstance(node, ArrayNode) and len(rest) == len(node.shape) and all(p.isdigit() for p in rest):
                break
        else:
            return None
        parts = rest
        index = tuple(int(p) for p in parts)
        if not all(i < g for i, g in zip(index, node.grid)):
            return None
        return node, index

    def _chunk(self, state: _Version, node: ArrayNode, index: tuple[int, ...]) -> bytes | None:
        ds = state.dataset(node)
        stored_index = index if not node.scalar else (0,)
        if node.codecs is not None:
            got = ds.stored_chunk(stored_index)
            if got is None:
                return None
            data, mask = got
            if data and not mask:
                return data
            # never allocated, or an optional filter skipped: encoded again with the array's codecs
            out: Any = np.ascontiguousarray(ds.decoded_chunk(stored_index)).tobytes()
            import numcodecs

            for config in numcodecs_pipeline(ds.manifest.filters, ds.dtype)[0]:
                out = numcodecs.get_codec(config).encode(out)
            return bytes(out)
        manifest = ds.manifest
        if manifest is not None and manifest.slots[stored_index] < 0:
            return None
        arr = ds.decoded_chunk(stored_index)
        if node.scalar:
            arr = arr.reshape(-1)[:1].reshape(())
        if node.dtype.kind == "O":
            import numcodecs

            values = np.array([v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)
                               for v in arr.reshape(-1)], dtype=object)
            return bytes(numcodecs.VLenUTF8().encode(values))
        return np.ascontiguousarray(arr, node.dtype).tobytes()

    def _keys(self, state: _Version) -> Iterable[str]:
        yield from state.documents
        for key, node in state.nodes.items():
            if not isinstance(node, ArrayNode):
                continue
            prefix = f"{key}/c" if key else "c"
            if node.scalar or not node.shape:
                yield prefix
                continue
            ds = state.dataset(node)
            manifest = ds.manifest
            if manifest is None:
                mapped = np.argwhere(np.ones(node.grid, bool))
            else:
                mapped = np.argwhere(manifest.slots >= 0)
            for index in mapped:
                yield prefix + "/" + "/".join(str(int(i)) for i in index)

    # -- zarr.abc.store.Store -----------------------------------------------------------------
    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
                  ) -> Buffer | None:
        """The value of ``key`` (a ``zarr.json`` or a chunk), or None when the version has none."""
        state = await self._get_state()
        data = state.documents.get(key)
        if data is None:
            found = self._locate(state, key)
            if found is None:
                return None
            data = await asyncio.to_thread(self._chunk, state, *found)
            if data is None:
                return None
        return prototype.buffer.from_bytes(_slice(data, byte_range))

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges: Iterable[tuple[str, ByteRequest | None]]) -> list[Buffer | None]:
        """Several (key, byte range) gets, concurrently."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        """Whether the version has ``key``."""
        state = await self._get_state()
        if key in state.documents:
            return True
        found = self._locate(state, key)
        if found is None:
            return False
        node, index = found
        if node.scalar:
            return True
        manifest = state.dataset(node).manifest
        return manifest is None or bool(manifest.slots[index] >= 0)

    async def set(self, key: str, value: Buffer) -> None:
        """Refused: a committed version never changes (``ValueError``, as zarr's read-only stores)."""
        self._check_writable()

    async def delete(self, key: str) -> None:
        """Refused, as :meth:`set`."""
        self._check_writable()

    async def list(self) -> AsyncIterator[str]:
        """Every key of the version: documents, then mapped chunks."""
        state = await self._get_state()
        for key in await asyncio.to_thread(lambda: list(self._keys(state))):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """The keys starting with ``prefix``."""
        async for key in self.list():
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The names directly below ``prefix`` (keys and "directories"), each once."""
        prefix = prefix.rstrip("/")
        start = f"{prefix}/" if prefix else ""
        seen: set[str] = set()
        async for key in self.list():
            if key.startswith(start):
                name = key[len(start):].split("/", 1)[0]
                if name not in seen:
                    seen.add(name)
                    yield name
