"""``vhdf5 log FILE``: print the version history as a table.

The table is formatted from the log's DataFrame
(:func:`~xarray_vhdf5._versions.history.log_frame`, what ``ds.vhdf5.versions`` shows).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from .._versions.history import LogEntry, log_frame

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


def format_log(entries: Sequence[LogEntry] | pd.DataFrame) -> str:
    """The log as an aligned text table, one row per version, then a totals line.

    Columns: version, timestamp (UTC), parent, new chunks (chunks the version
    stored), on disk (their bytes in the file, compressed), uncompressed (their
    bytes in memory), changed (datasets that differ from the parent; their
    number when more than three), message. See :mod:`xarray_vhdf5._versions.history`.

    Parameters
    ----------
    entries : sequence of LogEntry, or pandas.DataFrame
        :func:`xarray_vhdf5._versions.history.version_log`, or its
        :func:`~xarray_vhdf5._versions.history.log_frame` (the table is made from that).

    Returns
    -------
    str
        The table (header, rule, rows) and :func:`format_totals`, without a final newline.
    """
    frame = entries if isinstance(entries, pd.DataFrame) else log_frame(entries)
    header = ("version", "timestamp (UTC)", "parent", "new chunks", "on disk", "uncompressed", "changed", "message")
    shown = pd.DataFrame(
        {
            "timestamp": frame["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S"),
            "parent": frame["parent"],
            "new_chunks": frame["new_chunks"].astype(str),
            "on_disk": frame["new_bytes_on_disk"].map(human_bytes),
            "uncompressed": frame["new_bytes"].map(human_bytes),
            "changed": frame["changed"].map(lambda c: ",".join(c) if len(c) <= 3 else f"{len(c)} datasets"),
            "message": frame["message"].map(lambda m: m if isinstance(m, str) else ""),  # missing: NaN or None
        },
        index=frame.index,
    )
    rows = [header, *((name, *cells) for name, *cells in shown.itertuples())]
    lines = format_table(rows)
    lines.append(format_totals(frame))
    return "\n".join(lines)


def format_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells as left-aligned columns two spaces apart, a rule of dashes under the first (the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def format_totals(entries: Sequence[LogEntry] | pd.DataFrame) -> str:
    """One line: the chunks all versions stored, their bytes on disk (compressed) and uncompressed.

    ``entries`` as :func:`format_log` takes them.
    """
    frame = entries if isinstance(entries, pd.DataFrame) else log_frame(entries)
    chunks, disk, raw = (int(frame[c].sum()) for c in ("new_chunks", "new_bytes_on_disk", "new_bytes"))
    return (
        f"{_count(len(frame), 'version')} stored {_count(chunks, 'chunk')}: {human_bytes(disk)} on disk, "
        f"{human_bytes(raw)} uncompressed"
    )


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
