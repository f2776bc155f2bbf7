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
  them into their variable's :class:`~xarray_vhdf5.staging.StagedChangesArray`
  (:mod:`._staged`).

Deletes of base keys are remembered as tombstones (``deleted``) and deleted
directories as hidden prefixes (``cleared``; ``""``: the whole base, as
``to_zarr(mode="w")`` clears the store before writing).
"""

from __future__ import annotations

import threading

__all__ = ["Overlay", "Session", "Spooled"]


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

    def __init__(self) -> None:
        self.written: dict[str, bytes | Spooled] = {}
        self.deleted: set[str] = set()
        self.cleared: set[str] = set()
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.written) + len(self.deleted) + len(self.cleared)

    def value(self, key: str) -> bytes | None:
        """The bytes written at ``key``, or None if it was not written."""
        data = self.written.get(key)
        return data.read() if isinstance(data, Spooled) else data

    def set(self, key: str, data: bytes | Spooled) -> None:
        """Write ``key``."""
        with self.lock:
            self.written[key] = data
            self.deleted.discard(key)

    def delete(self, key: str) -> None:
        """Delete ``key`` (written or in the base); no error if absent."""
        with self.lock:
            self.written.pop(key, None)
            self.deleted.add(key)

    def delete_dir(self, prefix: str) -> None:
        """Delete every key under ``prefix`` (``""``: all keys; else ``"a"`` or ``"a/"`` means ``"a/..."``)."""
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        with self.lock:
            for key in [k for k in self.written if k.startswith(prefix)]:
                del self.written[key]
            self.deleted = {k for k in self.deleted if not k.startswith(prefix)}
            self.cleared = {p for p in self.cleared if not p.startswith(prefix)}
            self.cleared.add(prefix)

    def hides(self, key: str) -> bool:
        """True if the base's ``key`` is deleted (one by one or under a deleted directory)."""
        return key in self.deleted or any(key.startswith(p) for p in self.cleared)

    def clear(self) -> None:
        """Forget everything (after a commit)."""
        with self.lock:
            self.written.clear()
            self.deleted.clear()
            self.cleared.clear()


class Session:
    """One writable store's pending changes, shared with its read-only views (``with_read_only(True)``).

    Parameters
    ----------
    parent : str or None
        The version the store opened as its base (None: the file had none):
        the commit's parent, checked against the file's current version.
    """

    def __init__(self, parent: str | None) -> None:
        self.parent = parent
        self.overlay = Overlay()
        #: spool directories of merged forks, removed once their values are committed
        self.spools: list[str] = []
        #: forks made and not merged yet: spool directory -> {key: SHA-256 of the value it saw}
        self.forks: dict[str, dict[str, str]] = {}
