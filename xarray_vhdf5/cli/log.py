"""``vhdf5 log FILE``: print the version history as a table."""

from __future__ import annotations

from collections.abc import Sequence

from ..versions.history import LogEntry

__all__ = ["format_log", "human_bytes"]


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def format_log(entries: Sequence[LogEntry]) -> str:
    """The log as an aligned text table (name, timestamp, parent, new chunks, new bytes, message)."""
    header = ("version", "timestamp (UTC)", "parent", "new chunks", "new bytes", "changed", "message")
    rows = [header]
    for e in entries:
        rows.append((
            e.name,
            e.timestamp.strftime("%Y-%m-%d %H:%M:%S"),
            e.parent,
            str(e.new_chunks),
            human_bytes(e.new_bytes),
            ",".join(e.changed) if len(e.changed) <= 3 else f"{len(e.changed)} datasets",
            e.message or "",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
