"""The version log: for each version, its parent, time, message and what it added.

"New chunks" of a version are the raw_data chunks its virtual datasets map
that its parent's do not; "new bytes" are their uncompressed size (chunk rows
times the chunk's other axes times the itemsize). Both come from the virtual
datasets' mappings alone: no chunk data is read.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

import h5py
import numpy as np

from ..backend.layout import FIRST_VERSION
from .registry import VersionRegistry

__all__ = ["LogEntry", "version_log", "chunk_set"]


@dataclass(frozen=True)
class LogEntry:
    """One row of the version log."""

    name: str
    timestamp: _dt.datetime
    parent: str
    message: str | None
    changed: tuple[str, ...]
    new_chunks: int
    new_bytes: int
    datasets: tuple[str, ...] = field(default=())


def chunk_set(group: h5py.Group) -> dict[str, set[tuple[str, int]]]:
    """For each dataset below ``group``: the set of (raw_data path, first row) it maps."""
    found: dict[str, set[tuple[str, int]]] = {}

    def visit(path, obj):
        if isinstance(obj, h5py.Dataset) and obj.is_virtual:
            dcpl = obj.id.get_create_plist()
            rows = set()
            for i in range(dcpl.get_virtual_count()):
                start, _ = dcpl.get_virtual_srcspace(i).get_select_bounds()
                rows.add((dcpl.get_virtual_dsetname(i), int(start[0])))
            found[path] = rows

    group.visititems(visit)
    return found


def _chunk_nbytes(f: h5py.File, raw_path: str) -> int:
    raw = f[raw_path]
    return int(np.prod(raw.attrs["chunks"])) * raw.dtype.itemsize


def version_log(f: h5py.File, message_attr: str = "_vhdf5_message") -> list[LogEntry]:
    """The log of every committed version of ``f``, oldest first.

    Raises
    ------
    NotVersionedError
        ``f`` has no version history.
    """
    registry = VersionRegistry(f)
    cache: dict[str, dict[str, set[tuple[str, int]]]] = {}

    def chunks_of(name: str):
        if name == FIRST_VERSION or name not in registry:
            return {}
        if name not in cache:
            cache[name] = chunk_set(registry.group[name])
        return cache[name]

    sizes: dict[str, int] = {}
    entries = []
    for name in registry.names():
        info = registry.info(name)
        mine, theirs = chunks_of(name), chunks_of(info.prev_version)
        changed, new_chunks, new_bytes = [], 0, 0
        for path, rows in mine.items():
            new = rows - theirs.get(path, set())
            if new or path not in theirs or len(rows) != len(theirs[path]):
                changed.append(path)
            for raw_path, _ in new:
                if raw_path not in sizes:
                    sizes[raw_path] = _chunk_nbytes(f, raw_path)
                new_chunks += 1
                new_bytes += sizes[raw_path]
        changed += [p for p in theirs if p not in mine]
        message = registry.group[name].attrs.get(message_attr)
        entries.append(
            LogEntry(
                name=name, timestamp=info.timestamp, parent=info.prev_version,
                message=None if message is None else str(message),
                changed=tuple(sorted(changed)), new_chunks=new_chunks, new_bytes=new_bytes,
                datasets=tuple(sorted(mine)),
            )
        )
    return entries
