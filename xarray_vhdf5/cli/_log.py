"""``vhdf5 log FILE``: print the version history as a table.

The table shows the log's entries (:func:`~xarray_vhdf5._versions.history.version_log`),
the rows of what ``ds.vhdf5.versions`` shows as a DataFrame
(:func:`~xarray_vhdf5._versions.history.log_frame`). It is formatted from the
entries directly: the command imports neither pandas nor xarray, whose imports
would take most of its time.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._versions.history import LogEntry

__all__ = ["LOG_HELP", "format_graph", "format_log", "format_table", "format_totals", "human_bytes"]

#: What the log's columns mean (the ``vhdf5 log`` help text).
LOG_HELP = """Print the version history of FILE, oldest first: name, timestamp, parent,
the chunks each version stored and their bytes, the datasets it changed.

\b
new chunks      raw_data chunks the version maps that no earlier version
                maps: the chunks its commit stored (chunks it shares with
                earlier versions, deduplicated, are not counted again)
on disk         their bytes in the file, after compression (HDF5's chunk index)
uncompressed    their bytes in memory (whole chunks: edge chunks are padded)
changed         datasets that differ from the parent: added, removed, or
                another shape, dtype, chunk mapping or attributes

Reads no chunk data: only the versions' mappings and attributes and the
chunk indexes.
"""


def human_bytes(n: float) -> str:
    """A number of bytes for people: ``1536`` -> ``"1.5 KiB"`` (binary units)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def format_log(entries: Sequence[LogEntry]) -> str:
    """The log as an aligned text table, one row per version, then a totals line.

    Columns: version, timestamp (UTC), parent, new chunks (chunks the version
    stored), on disk (their bytes in the file, compressed), uncompressed (their
    bytes in memory), changed (datasets that differ from the parent; their
    number when more than three), message. See :mod:`xarray_vhdf5._versions.history`.

    Parameters
    ----------
    entries : sequence of LogEntry
        :func:`xarray_vhdf5._versions.history.version_log`.

    Returns
    -------
    str
        The table (header, rule, rows) and :func:`format_totals`, without a final newline.
    """
    header = ("version", "timestamp (UTC)", "parent", "new chunks", "on disk", "uncompressed", "changed", "message")
    rows = [header]
    for e in entries:
        changed = ",".join(e.changed) if len(e.changed) <= 3 else f"{len(e.changed)} datasets"
        rows.append(
            (
                e.name,
                _utc(e.timestamp).strftime("%Y-%m-%d %H:%M:%S"),
                e.parent,
                str(e.new_chunks),
                human_bytes(e.new_bytes_on_disk),
                human_bytes(e.new_bytes),
                changed,
                e.message or "",
            )
        )
    lines = format_table(rows)
    lines.append(format_totals(entries))
    return "\n".join(lines)


def format_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells as left-aligned columns two spaces apart, a rule of dashes under the first (the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def format_totals(entries: Sequence[LogEntry]) -> str:
    """One line: the chunks all versions stored, their bytes on disk (compressed) and uncompressed.

    ``entries`` as :func:`format_log` takes them.
    """
    chunks = sum(e.new_chunks for e in entries)
    disk = sum(e.new_bytes_on_disk for e in entries)
    raw = sum(e.new_bytes for e in entries)
    return (
        f"{_count(len(entries), 'version')} stored {_count(chunks, 'chunk')}: {human_bytes(disk)} on disk, "
        f"{human_bytes(raw)} uncompressed"
    )


def _utc(t: _dt.datetime) -> _dt.datetime:
    """``t`` in UTC; naive means UTC already (as ``pandas.to_datetime(utc=True)`` takes it for ``log_frame``)."""
    return t.replace(tzinfo=_dt.UTC) if t.tzinfo is None else t.astimezone(_dt.UTC)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def format_graph(entries: Sequence[LogEntry], branches: dict[str, str], tags: dict[str, str]) -> str:
    """The version DAG newest first, one line per version, as ``git log --graph --oneline`` draws it.

    Each version is a ``*`` in the lane of the branch line it is on; ``|`` carries
    a lane down to the next version on it; ``|/`` shows a lane joining its
    parent's (where a branch forked). Refs follow the name in parentheses
    (``(main, tag: v1)``), then the timestamp and message.

    Parameters
    ----------
    entries : sequence of LogEntry
        :func:`xarray_vhdf5._versions.history.version_log` (oldest first).
    branches, tags : dict of str to str
        Ref name to version (:func:`xarray_vhdf5._versions.refs.list_branches`, ``list_tags``).
    """
    labels: dict[str, list[str]] = {}
    for name, version in branches.items():
        labels.setdefault(version, []).append(name)
    for name, version in tags.items():
        labels.setdefault(version, []).append(f"tag: {name}")
    lanes: list[str | None] = []  # per column: the version the lane waits for
    lines = []
    for e in reversed(list(entries)):
        mine = [i for i, want in enumerate(lanes) if want == e.name]
        if not mine:
            lanes.append(e.name)
            mine = [len(lanes) - 1]
        col = mine[0]
        for i in reversed(mine[1:]):  # other lanes that waited for this version join it here: they forked from it
            lanes[i] = None
            joined = [" "] * (2 * len(lanes))
            for j, want in enumerate(lanes):
                if want is not None:
                    joined[2 * j] = "|"
            joined[2 * i - 1] = "/"
            lines.append("".join(joined).rstrip())
        cells = ["*" if i == col else ("|" if want is not None else " ") for i, want in enumerate(lanes)]
        ref = f" ({', '.join(labels[e.name])})" if e.name in labels else ""
        text = f"{e.name}{ref}  {e.timestamp.strftime('%Y-%m-%d %H:%M:%S')}"
        lines.append((" ".join(cells).rstrip() + "  " + text + (f"  {e.message}" if e.message else "")).rstrip())
        parent = e.parent if e.parent and e.parent != "__first_version__" else None
        lanes[col] = parent
        while lanes and lanes[-1] is None:
            lanes.pop()
    return "\n".join(lines)
