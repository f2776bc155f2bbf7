"""What a writable :class:`~xarray_vhdf5.store.VersionStore` holds until it commits.

A writable store is an overlay over one committed version (its *base*, or
nothing for a file without versions): every ``set`` and ``delete`` zarr makes
lands here, and reads see the overlay first, then the base. Keys are kept as
zarr encoded them (``zarr.json`` documents, chunks after the array's codecs):

- ``get`` of a key just written returns exactly what was written, which zarr's
  read-modify-write of partial chunks needs, with no decode or encode;
- memory is the encoded (often compressed) size of what was written, not the
  decoded size; nothing is decoded until :meth:`VersionStore.commit`, which
  decodes only the written chunks, with zarr's own codec pipeline, and stages
  them into their variable's :class:`~xarray_vhdf5._staging.StagedChangesArray`
  (:mod:`._staged`).

Past a memory budget (:data:`MEMORY_BUDGET`: 64 MiB of written values, the
writer's batch size), further values spill to files in a directory beside the HDF5 file
(``<file>.forks/<id>-overlay/``, as forks spool, :mod:`._forks`), read back
when zarr or the commit needs them and removed by the commit: a large
``to_zarr`` into one store holds at most the budget in memory.

Deletes of base keys are remembered as tombstones (``deleted``) and deleted
directories as hidden prefixes (``cleared``; ``""``: the whole base, as
``to_zarr(mode="w")`` clears the store before writing).
"""

from __future__ import annotations

import os
import threading
import uuid
from urllib.parse import quote

__all__ = ["MEMORY_BUDGET", "Overlay", "Session", "Spooled"]

#: Bytes of written values an overlay keeps in memory before spilling further ones to files.
MEMORY_BUDGET = 64 * 2**20


class Spooled:
    """A value merged from a fork (:mod:`._forks`): a file of the fork's spool, read when needed."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> bytes:
        with open(self.path, "rb") as f:
            return f.read()

    def __repr__(self) -> str:
        return f"Spooled({self.path!r})"


class Overlay:
    """Keys written over a base, and base keys hidden by deletes.

    Attributes
    ----------
    written : dict of str to bytes or Spooled
        Keys set since the base, as zarr encoded them (merged from a fork:
        the file holding them).
    deleted : set of str
        Keys deleted one by one (hiding the base's key of that name).
    cleared : set of str
        Prefixes deleted as directories (``"a/"``, or ``""`` for all):
        every base key under one is hidden.
    """

    def __init__(self, spill_root: str | None = None, budget: int | None = None) -> None:
        self.written: dict[str, bytes | Spooled] = {}
        self.deleted: set[str] = set()
        self.cleared: set[str] = set()
        self.lock = threading.Lock()
        self.spill_root = spill_root  # where a spill directory is made (None: never spill)
        self.budget = MEMORY_BUDGET if budget is None else int(budget)
        self.spill_dir: str | None = None
        self.nbytes = 0  # bytes of the values held in memory

    def _forget(self, key: str) -> None:
        old = self.written.pop(key, None)
        if isinstance(old, bytes):
            self.nbytes -= len(old)
        elif isinstance(old, Spooled) and self.spill_dir and old.path.startswith(self.spill_dir):
            try:
                os.remove(old.path)
            except FileNotFoundError:
                pass

    def _spill(self, root: str, key: str, data: bytes) -> Spooled:
        spill_dir = self.spill_dir
        if spill_dir is None:
            spill_dir = self.spill_dir = os.path.join(root, f"{uuid.uuid4().hex}-overlay")
            os.makedirs(spill_dir)
        path = os.path.join(spill_dir, quote(key, safe="") or "%")
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return Spooled(path)

    def __len__(self) -> int:
        return len(self.written) + len(self.deleted) + len(self.cleared)

    def value(self, key: str) -> bytes | None:
        """The bytes written at ``key``, or None if it was not written."""
        data = self.written.get(key)
        return data.read() if isinstance(data, Spooled) else data

    def set(self, key: str, data: bytes | Spooled) -> None:
        """Write ``key`` (in memory, or to a spill file past the budget)."""
        with self.lock:
            self._forget(key)
            if isinstance(data, bytes):
                if self.spill_root is not None and self.nbytes + len(data) > self.budget:
                    data = self._spill(self.spill_root, key, data)
                else:
                    self.nbytes += len(data)
            self.written[key] = data
            self.deleted.discard(key)

    def delete(self, key: str) -> None:
        """Delete ``key`` (written or in the base); no error if absent."""
        with self.lock:
            self._forget(key)
            self.deleted.add(key)

    def delete_dir(self, prefix: str) -> None:
        """Delete every key under ``prefix`` (``""``: all keys; else ``"a"`` or ``"a/"`` means ``"a/..."``)."""
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        with self.lock:
            for key in [k for k in self.written if k.startswith(prefix)]:
                self._forget(key)
            self.deleted = {k for k in self.deleted if not k.startswith(prefix)}
            self.cleared = {p for p in self.cleared if not p.startswith(prefix)}
            self.cleared.add(prefix)

    def hides(self, key: str) -> bool:
        """True if the base's ``key`` is deleted (one by one or under a deleted directory)."""
        return key in self.deleted or any(key.startswith(p) for p in self.cleared)

    def clear(self) -> None:
        """Forget everything (after a commit); the spill directory is the caller's to remove."""
        with self.lock:
            self.written.clear()
            self.deleted.clear()
            self.cleared.clear()
            self.nbytes = 0
            self.spill_dir = None


class Session:
    """One writable store's pending changes, shared with its read-only views (``with_read_only(True)``).

    Parameters
    ----------
    parent : str or None
        The version the store opened as its base (None: the file had none):
        the commit's parent, checked against the file's current version.
    """

    def __init__(self, parent: str | None, spill_root: str | None = None) -> None:
        self.parent = parent
        self.overlay = Overlay(spill_root)
        #: spool directories of merged forks, removed once their values are committed
        self.spools: list[str] = []
        #: forks made and not merged yet: spool directory -> {key: SHA-256 of the value it saw}
        self.forks: dict[str, dict[str, str]] = {}
