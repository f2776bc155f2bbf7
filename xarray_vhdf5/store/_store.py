"""A committed version of a versioned HDF5 file as a zarr-python 3 store.

``VersionStore(path, version=...)`` presents one version's group tree as Zarr
v3 keys: ``zarr.json`` documents synthesized from the HDF5 datasets
(:mod:`._metadata`) and chunk keys ``<array>/c/<i>/<j>`` served from the
version's chunks in raw_data (:mod:`xarray_vhdf5._backend.manifest`), as the
file holds them when their filters are Zarr codecs (:mod:`._codecs`), else
decoded. Nothing is copied: a chunk key is a byte range of the file, read with
``os.pread`` while other processes commit (the version's chunks never change;
chunks moved by a delete are resolved again, as every reader of this package
does, :class:`~xarray_vhdf5._versions.reader.SharedVersionedFile`).

Keys (Zarr v3 storage, "Chunk key encoding", default with ``/``)::

    zarr.json                 the store's group, every node's metadata inline
    sst/zarr.json             an array (a dataset of the version)
    sst/c/0/3/1               its chunk (0, 3, 1), when the version maps it
    grp/zarr.json, grp/...    a subgroup and its members

Writable (``read_only=False``): the store is an overlay over that version, or
over nothing (a path that does not exist yet, an HDF5 file without versions,
a group the version lacks). zarr's writes are kept encoded, in memory up
to a budget, then in spill files (:mod:`._overlay` says why); reads see them over the version;
:meth:`VersionStore.commit` makes them one new version through the ``xr``
layer (:mod:`._staged`); :meth:`VersionStore.fork` and
:meth:`VersionStore.merge` carry writes from dask workers (:mod:`._forks`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable
from typing import Any

import numpy as np
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from .._versions import VersionedHDF5File
from ..errors import DatasetNotFoundError, NotVersionedError, ReadOnlyError, VersionNotFoundError
from ._codecs import numcodecs_pipeline
from ._forks import StoreFork, fork_store, merge_forks, remove_spools
from ._listing import ListingFromList
from ._metadata import ArrayNode, GroupNode, version_nodes, zarr_json_documents
from ._overlay import Session

__all__ = ["COALESCE_BYTES", "VersionStore"]


def _slice(data: bytes, byte_range: ByteRequest | None) -> bytes:
    if byte_range is None:
        return data
    if isinstance(byte_range, RangeByteRequest):
        return data[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return data[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return data[len(data) - byte_range.suffix :] if byte_range.suffix else b""
    raise TypeError(f"Unexpected byte_range, got {byte_range!r}")  # zarr's own stores' words


#: Default ``coalesce_bytes`` of read-only stores: Zarr chunks of decoded arrays up to 8 MiB.
COALESCE_BYTES = 8 * 2**20


class _Version:
    """What an open store reads: the reader, the resolved version, its nodes and their documents.

    ``missing_ok`` (writable stores): a path that does not exist, an HDF5 file
    holding nothing, a file without a current version or a group the version
    lacks give an empty base (``nodes`` and ``documents`` empty; ``version``
    the version when there is one, else None).
    """

    def __init__(
        self,
        path: str,
        version,
        group: str | None,
        numcodecs: bool,
        verify: bool,
        missing_ok: bool = False,
        coalesce_bytes: int | None = None,
    ):
        self.reader = None
        self.version = None
        self.nodes: dict[str, ArrayNode | GroupNode] = {}
        self.documents: dict[str, bytes] = {}
        self.datasets: dict[str, Any] = {}
        self.mapped: dict[str, np.ndarray] = {}  # per array key: its Zarr chunks mapped (VersionStore._mapped)
        try:
            self.reader = VersionedHDF5File.open(path, verify=verify)
        except (FileNotFoundError, NotVersionedError):
            # a writable store over nothing yet (the file opened once: every daily store opens it)
            if missing_ok and not _has_history(path):
                return
            raise
        try:
            try:
                self.version = self.reader.lookup(version)
            except VersionNotFoundError:
                if missing_ok and version is None:
                    return  # a versioned file with no current version
                raise
            root = self.reader[self.version]
            if missing_ok and group not in (None, "", "/") and group.strip("/") not in root:
                return  # a new group of the version
            if group in (None, "", "/"):
                self.group = root
            else:
                groups = root.group_paths()
                if group.strip("/") not in groups:
                    what = "is a dataset, not a group" if group.strip("/") in root else "is not there"
                    raise DatasetNotFoundError(
                        f"group {group!r} of version {self.version!r} of {path!r} {what}; its groups: "
                        f"{sorted(g for g in groups if g) or 'none but the root'}"
                    )
                self.group = root[group.strip("/")]
            self.timestamp = self.reader.version_info(self.version).timestamp
            self.nodes = version_nodes(
                self.group, numcodecs=numcodecs, verify=verify, coalesce_bytes=coalesce_bytes, datasets=self.datasets
            )
            self.documents = zarr_json_documents(self.nodes)
        except BaseException:
            self.reader.close()
            raise

    def dataset(self, node: ArrayNode):
        ds = self.datasets.get(node.key)
        if ds is None:
            ds = self.datasets[node.key] = self.group[node.key]
        return ds

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()


def _has_history(path: str) -> bool:
    """False for a path a writable store starts from nothing: missing, or an HDF5 file holding nothing.

    Raises ``NotVersionedError`` for an HDF5 file that holds other data (a
    commit would refuse it), ``NotHDF5Error`` for a file that is not HDF5.
    """
    if not os.path.exists(path):
        return False
    try:
        with VersionedHDF5File.open(path):
            return True
    except NotVersionedError as error:
        import h5py

        try:
            with h5py.File(path, "r") as f:
                if len(f) == 0:
                    return False
        except OSError:
            pass
        raise error


class VersionStore(ListingFromList, Store):
    """One version of a versioned HDF5 file as a zarr-python 3 store; writable over it with ``read_only=False``.

    Parameters
    ----------
    path : str or os.PathLike
        The versioned HDF5 file (versioned-hdf5's format). Writable: it may
        not exist yet, or be an HDF5 file holding nothing.
    version : str, int, datetime, numpy.datetime64 or None
        Which version, as ``xr.open_dataset(path, engine="vhdf5", version=...)``
        takes it (:func:`~xarray_vhdf5._versions.lookup.lookup_version`); None:
        the current one. Resolved to a name when the store opens; a pickled
        store (for dask workers) carries the name, so every worker reads the
        same version whatever is committed meanwhile. Writable: the base of
        the overlay and the parent of :meth:`commit`'s version.
    group : str, optional
        A group inside the version: the store's root (default the version's
        group). Writable: it may not exist yet.
    read_only : bool
        True (the default): the version as it is; ``set`` and ``delete`` raise
        ``ValueError``. False: an overlay over the version that ``to_zarr``
        writes into, committed by :meth:`commit`. A writable store does not
        pickle (use :meth:`fork` for dask workers).
    numcodecs : bool
        Serve deflate, shuffle and Fletcher-32 chunks as the file holds them,
        through zarr-python's ``numcodecs.*`` codecs (which Zarr v3 does not
        specify; zarr-python warns). Default False: the store decodes them and
        serves them uncompressed. See :mod:`xarray_vhdf5.store._codecs`.
    verify : bool
        Check every chunk read against the hash table's SHA-256 digest
        (chunks are then served decoded);
        :class:`~xarray_vhdf5.errors.CorruptFileError` on a mismatch.
    coalesce_bytes : int or None
        Read-only stores: an array whose chunks the store decodes (deflate,
        shuffle, lzf, ... without ``numcodecs``) is presented with Zarr chunks
        of several stored chunks along its first axis, up to this many bytes
        uncompressed (default :data:`COALESCE_BYTES`, 8 MiB), read and decoded
        by the store's threaded reader in one get; ``xr.open_zarr``'s dask
        tasks follow them. None: the stored chunk shape (as writable stores,
        whose chunks zarr writes, always present it).

    Raises
    ------
    FileNotFoundError, NotHDF5Error, NotVersionedError
        From opening (``zarr.open_group(store)``, ``await VersionStore.open(...)``):
        no such file (read-only), not HDF5, no version history (read-only; a
        writable store refuses only an HDF5 file holding other data).
    VersionNotFoundError
        No such version.
    KeyError
        No such group in the version (read-only).

    Notes
    -----
    ``xr.open_zarr(store)`` gives the Dataset ``xr.open_dataset(path,
    engine="vhdf5", version=...)`` gives (:mod:`._metadata` says how). The
    store keeps one :class:`~xarray_vhdf5._versions.reader.SharedVersionedFile` open;
    it never blocks a writer of the file.

    A writable store keeps zarr's writes encoded, in memory up to a budget
    and in files beside the HDF5 file past it, until :meth:`commit`
    (:mod:`._overlay`); ``close()`` closes the file but keeps them.
    ``with_read_only(True)`` gives a read-only view of the same writes
    (zarr's ``mode="r"`` opens take one).
    """

    supports_listing = True

    def __init__(
        self,
        path: str | os.PathLike,
        version=None,
        group: str | None = None,
        *,
        read_only: bool = True,
        numcodecs: bool = False,
        verify: bool = False,
        coalesce_bytes: int | None = COALESCE_BYTES,
    ) -> None:
        super().__init__(read_only=bool(read_only))
        self.coalesce_bytes = None if coalesce_bytes is None else int(coalesce_bytes)
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"VersionStore takes a path, got {type(path).__name__}")
        self.path = os.path.abspath(os.fspath(path))
        self.version = version
        self.group = None if group in (None, "", "/") else str(group).strip("/")
        self.numcodecs, self.verify = bool(numcodecs), bool(verify)
        self._state: _Version | None = None
        self._session: Session | None = None  # writable stores and their views: the pending writes

    @property
    def supports_writes(self) -> bool:
        """True for a writable store."""
        return not self.read_only

    @property
    def supports_deletes(self) -> bool:
        """True for a writable store."""
        return not self.read_only

    @property
    def supports_consolidated_metadata(self) -> bool:
        """True for a read-only store (its root ``zarr.json`` holds every node's metadata).

        False for a writable one and its read-only views of pending writes: the
        version's metadata is consolidated by the commit, so ``to_zarr`` does not
        consolidate it (nor warn that Zarr v3 has no consolidated metadata).
        """
        return self.read_only and self._session is None

    @property
    def _writes(self) -> Session:
        """The pending writes of a writable store, once :meth:`_ensure_state` has run."""
        assert self._session is not None, "a writable store's state is opened first"
        return self._session

    # -- opening, pickling, equality ----------------------------------------------------------
    def _ensure_state(self) -> _Version:
        session = self._session
        if self._state is not None and session is not None and self._state.version != session.parent:
            self._state.close()  # the session committed: read the new version
            self._state = None
        if self._state is None:
            if session is not None:
                self._state = _Version(
                    self.path, session.parent, self.group, self.numcodecs, self.verify, missing_ok=True
                )
            else:
                self._state = _Version(
                    self.path,
                    self.version,
                    self.group,
                    self.numcodecs,
                    self.verify,
                    missing_ok=not self.read_only,
                    coalesce_bytes=self.coalesce_bytes if self.read_only else None,
                )
                if not self.read_only:
                    self._session = Session(self._state.version, spill_root=f"{self.path}.forks")
            if self._state.version is not None:
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
        return self._ensure_state()

    def close(self) -> None:
        """Close the file (the store opens it again on its next read); pending writes are kept."""
        if self._state is not None:
            self._state.close()
            self._state = None
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        if self._session is not None or not self.read_only:
            raise TypeError(
                f"a writable VersionStore ({self.path!r}) cannot be pickled: its pending writes live in "
                "this process. For dask workers, give each task store.fork() (picklable: workers write "
                "into it), then store.merge(*forks) and store.commit() here; to read on workers, "
                "commit first and pass VersionStore(path, version=...) (read-only)"
            )
        self._ensure_state()  # pinned to the version's name: a branch, -1 or a time resolved now
        return {
            "path": self.path,
            "version": self.version,
            "group": self.group,
            "numcodecs": self.numcodecs,
            "verify": self.verify,
            "coalesce_bytes": self.coalesce_bytes,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        VersionStore.__init__(  # the state __getstate__ above made: this class's arguments
            self,
            state["path"],
            state["version"],
            state["group"],
            numcodecs=state["numcodecs"],
            verify=state["verify"],
            coalesce_bytes=state.get("coalesce_bytes", COALESCE_BYTES),
        )

    def _identity(self) -> tuple:
        version = self.version if self.version is not None or self._state is None else self._state.version
        return (self.path, version, self.group, self.numcodecs, self.verify, self.read_only, self.coalesce_bytes)

    def __eq__(self, other: object) -> bool:
        """Stores over the same file, group and options, and the same version once resolved.

        A read-only store given no version, ``-1``, a time or a branch resolves it
        (opening the file) to compare: ``VersionStore(p) == VersionStore(p)``
        while nothing is committed in between.
        """
        if type(other) is not type(self):
            return False
        if self._identity()[2:] != other._identity()[2:] or self.path != other.path:
            return False
        if self.read_only and other.read_only:
            return self._ensure_state().version == other._ensure_state().version
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash((self.path, self.group, self.numcodecs, self.verify, self.read_only, self.coalesce_bytes))

    def __repr__(self) -> str:
        group = f", group={self.group!r}" if self.group else ""
        writable = ", read_only=False" if not self.read_only else ""
        return f"VersionStore({self.path!r}, version={self.version!r}{group}{writable})"

    def with_read_only(self, read_only: bool = False) -> VersionStore:
        """A new store over the same version.

        From a writable store, ``read_only=True`` gives a view of its pending
        writes and ``read_only=False`` another handle on them (one session);
        from a read-only store, ``read_only=False`` starts a new writable
        overlay over its version.
        """
        if not self.read_only and self._session is None:
            self._ensure_state()  # the session (and its base version) both stores share
        out = type(self)(
            self.path,
            self.version,
            self.group,
            read_only=read_only,
            numcodecs=self.numcodecs,
            verify=self.verify,
            coalesce_bytes=self.coalesce_bytes,
        )
        if self._session is not None:
            out._session = self._session
        return out

    # -- what the version holds ---------------------------------------------------------------
    @property
    def nodes(self) -> dict[str, ArrayNode | GroupNode]:
        """The base version's arrays and groups by key (``""``: its root group); opens the file if needed."""
        return self._ensure_state().nodes

    @property
    def pending(self) -> bool:
        """True if a writable store has writes or deletes not yet committed."""
        return self._session is not None and len(self._session.overlay) > 0

    # -- committing -------------------------------------------------------------------------
    def commit(
        self,
        version: str | None = None,
        *,
        message: str | None = None,
        timestamp=None,
        make_current: bool = True,
        allow_empty: bool = False,
        force: bool = False,
    ) -> str:
        """Make the store's pending writes one new version of the file; the store then reads it.

        Only the chunks zarr wrote are decoded and staged; unchanged chunks are
        neither read nor rewritten (:mod:`._staged`). New arrays, deleted
        arrays, attribute changes and shape changes are applied. Dimension
        scales, netCDF bookkeeping and the stale-parent check are
        ``ds.vhdf5.commit``'s (:func:`~xarray_vhdf5.xr._stage.commit_staged`).

        Parameters
        ----------
        version : str, optional
            The new version's name (default ``r<N>``).
        message : str, optional
            Commit message.
        timestamp : datetime or numpy.datetime64, optional
            The version's timestamp (UTC), default now.
        make_current : bool
            Make the new version current (default True).
        allow_empty : bool
            Commit even if nothing changed (default False:
            :class:`~xarray_vhdf5.errors.NothingToCommitError`).
        force : bool
            Commit even if another version became current since the store
            opened its base (the base stays the parent: a branch).

        Returns
        -------
        str
            The new version's name. The store (and its views) now read it,
            with no pending writes; it stays writable.

        Raises
        ------
        ReadOnlyError
            The store is read-only.
        StaleVersionError
            Another version was committed since the store opened its base
            (``ds.vhdf5.commit``'s check); nothing is written, the pending
            writes are kept.
        NothingToCommitError
            No root group was written, or nothing changed and ``allow_empty``
            is False.
        UnsupportedError
            zarr wrote below the root group, Zarr v2 keys, or an array without
            ``dimension_names``.
        VersionExistsError, IncompatibleDataError
            As ``ds.vhdf5.commit``; nothing is committed.
        """
        from ._staged import commit_store

        if self.read_only:
            raise ReadOnlyError(f"{self!r} is read-only: open VersionStore(..., read_only=False) to write and commit")
        self._ensure_state()
        name = commit_store(
            self,
            version,
            message=message,
            timestamp=timestamp,
            make_current=make_current,
            allow_empty=allow_empty,
            force=force,
        )
        overlay = self._writes.overlay
        if overlay.spill_dir is not None:
            self._writes.spools.append(overlay.spill_dir)
        overlay.clear()
        remove_spools(self._writes.spools)
        self._writes.parent = name
        self.version = name
        if self._state is not None:
            self._state.close()
            self._state = None
        return name

    def fork(self) -> StoreFork:
        """A picklable writable handle for dask workers; bring its writes back with :meth:`merge`.

        The fork sees this store's version and its pending writes as of now;
        its own writes go to files in a spool directory beside the HDF5 file
        (``<file>.forks/<id>/``), shared by its pickled copies
        (:mod:`._forks` says why, and what icechunk does instead)::

            fork = store.fork()
            ds.to_zarr(fork, mode="w")   # a dask.distributed cluster writes the chunks
            store.merge(fork)
            store.commit()

        Returns
        -------
        StoreFork
            A zarr store (writable, picklable).

        Raises
        ------
        ReadOnlyError
            The store is read-only.
        """
        if self.read_only:
            raise ReadOnlyError(f"{self!r} is read-only: fork() a VersionStore(..., read_only=False)")
        return fork_store(self)

    def merge(self, *forks: StoreFork) -> None:
        """Bring the writes of ``forks`` (from :meth:`fork`) into this store's pending writes.

        Nothing is read but to compare values: merged chunks stay in the
        forks' spool files until :meth:`commit` decodes them one at a time
        (and then removes the files).

        Raises
        ------
        ReadOnlyError
            The store is read-only.
        ValueError
            An argument is not a fork of this store, or was merged already.
        ConflictError
            Two forks wrote the same key with different bytes, or a fork wrote
            a key this store changed after ``fork()`` with other bytes
            (``keys`` lists the key); nothing is merged.
        """
        if self.read_only:
            raise ReadOnlyError(f"{self!r} is read-only")
        self._ensure_state()
        merge_forks(self, forks)

    def _locate(self, state: _Version, key: str) -> tuple[ArrayNode, tuple[int, ...]] | None:
        """The array and chunk index a chunk key names, or None."""
        parts = key.split("/")
        for at, part in enumerate(parts):
            if part != "c":
                continue
            node = state.nodes.get("/".join(parts[:at]))
            rest = parts[at + 1 :]
            if (
                isinstance(node, ArrayNode)
                and len(rest) == len(node.shape)
                and all(p.isascii() and p.isdigit() and str(int(p)) == p for p in rest)
            ):
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
        if node.chunks != node.stored_chunks and not node.scalar:
            return self._coalesced(state, ds, node, index)
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

            configs = numcodecs_pipeline(ds.manifest.filters, ds.dtype)[0]
            assert configs is not None  # node.codecs were made from this pipeline
            for config in configs:
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

            values = np.array(
                [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v) for v in arr.reshape(-1)],
                dtype=object,
            )
            return bytes(numcodecs.VLenUTF8().encode(values))
        return np.ascontiguousarray(arr, node.dtype).tobytes()

    @staticmethod
    def _mapped(state: _Version, node: ArrayNode) -> np.ndarray:
        """Per Zarr chunk of ``node``, whether the version maps any of its stored chunks (kept per state).

        A version's mappings never change (chunks a deletion moves keep their
        mapped places), so the grid is computed once per array and open.
        """
        found = state.mapped.get(node.key)
        if found is not None:
            return found
        manifest = state.dataset(node).manifest
        if manifest is None:
            found = np.ones(node.grid, bool)
        else:
            found = manifest.slots >= 0
            k = node.chunks[0] // node.stored_chunks[0] if node.shape else 1
            if k > 1:
                rows = -(-found.shape[0] // k) * k
                padded = np.zeros((rows, *found.shape[1:]), bool)
                padded[: found.shape[0]] = found
                found = np.asarray(padded.reshape((rows // k, k, *found.shape[1:])).any(axis=1))  # typed: an array
        state.mapped[node.key] = found
        return found

    def _coalesced(self, state: _Version, ds, node: ArrayNode, index: tuple[int, ...]) -> bytes | None:
        """Zarr chunk ``index`` of an array served ``k`` stored chunks at a time: one threaded read."""
        if not self._mapped(state, node)[index]:
            return None
        region = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, node.chunks, node.shape))
        data = np.asarray(ds[region], dtype=node.dtype)
        if data.shape != node.chunks:
            out = np.full(node.chunks, node.fill_value, dtype=node.dtype)
            out[tuple(slice(0, k) for k in data.shape)] = data
            data = out
        return np.ascontiguousarray(data).tobytes()

    def _keys(self, state: _Version) -> Iterable[str]:
        yield from state.documents
        for key, node in state.nodes.items():
            if not isinstance(node, ArrayNode):
                continue
            prefix = f"{key}/c" if key else "c"
            if node.scalar or not node.shape:
                yield prefix
                continue
            mapped = np.argwhere(self._mapped(state, node))
            for index in mapped:
                yield prefix + "/" + "/".join(str(int(i)) for i in index)

    # -- zarr.abc.store.Store -----------------------------------------------------------------
    async def _base_get(self, state: _Version, key: str) -> bytes | None:
        data = state.documents.get(key)
        if data is None:
            found = self._locate(state, key)
            if found is None:
                return None
            data = await asyncio.to_thread(self._chunk, state, *found)
        return data

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        """The value of ``key`` (a ``zarr.json`` or a chunk), or None when the version has none.

        Writable: the value written last, else (unless deleted) the version's.
        """
        state = await self._get_state()
        session = self._session
        if session is not None:
            overlay = session.overlay
            data = await asyncio.to_thread(overlay.value, key) if key in overlay.written else None
            if data is None and not overlay.hides(key):
                data = await self._base_get(state, key)
        else:
            data = await self._base_get(state, key)
        if data is None:
            return None
        return prototype.buffer.from_bytes(_slice(data, byte_range))

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """Several (key, byte range) gets, concurrently."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    def _base_exists(self, state: _Version, key: str) -> bool:
        if key in state.documents:
            return True
        found = self._locate(state, key)
        if found is None:
            return False
        node, index = found
        if node.scalar:
            return True
        return bool(self._mapped(state, node)[index])

    async def exists(self, key: str) -> bool:
        """Whether the store has ``key``."""
        state = await self._get_state()
        session = self._session
        if session is not None:
            if key in session.overlay.written:
                return True
            if session.overlay.hides(key):
                return False
        return self._base_exists(state, key)

    async def set(self, key: str, value: Buffer) -> None:
        """Write ``key`` (writable stores; read-only ones raise ``ValueError``, as zarr's do).

        Kept as given, in memory, until :meth:`commit`; any key is accepted
        (the commit reads ``zarr.json`` documents and chunk keys only).

        Raises
        ------
        ValueError
            The store is read-only.
        TypeError
            ``value`` is not a zarr ``Buffer``.
        """
        self._check_writable()
        if not isinstance(value, Buffer):
            raise TypeError(f"VersionStore.set(): expected a zarr Buffer, got {type(value).__name__}")
        await self._get_state()
        data = value.to_bytes()
        overlay = self._writes.overlay
        if overlay.nbytes + len(data) > overlay.budget:  # spills to a file: not on zarr's event loop
            await asyncio.to_thread(overlay.set, key, data)
        else:
            overlay.set(key, data)

    async def delete(self, key: str) -> None:
        """Delete ``key`` (no error when absent); read-only stores raise ``ValueError``."""
        self._check_writable()
        await self._get_state()
        self._writes.overlay.delete(key)

    async def delete_dir(self, prefix: str) -> None:
        """Delete every key under ``prefix`` (``""``: the whole store, as ``to_zarr(mode="w")`` does)."""
        self._check_writable()
        await self._get_state()
        self._writes.overlay.delete_dir(prefix)

    def _all_keys(self, state: _Version) -> list[str]:
        session = self._session
        if session is None:
            return list(self._keys(state))
        overlay = session.overlay
        keys = list(overlay.written)
        keys.extend(k for k in self._keys(state) if k not in overlay.written and not overlay.hides(k))
        return keys

    async def list(self) -> AsyncIterator[str]:
        """Every key: documents, then mapped chunks (writable: written keys first, then the version's)."""
        state = await self._get_state()
        for key in await asyncio.to_thread(self._all_keys, state):
            yield key
