"""Chunk grids along one axis, as edges, and the interval arithmetic between two of them.

A grid along an axis of ``size`` points is the increasing array of its chunk
edges, ``edges[0] == 0`` and ``edges[-1] == size``: regular grids (an HDF5 or
Zarr chunk shape, edge chunk trimmed) and irregular ones (dask chunks, the
files of a tiled archive) alike. All quantities are in points.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

__all__ = ["AxisGrid", "parse_bytes"]


class AxisGrid:
    """The chunk edges along one axis.

    Parameters
    ----------
    edges : sequence of int
        Increasing, from 0 to the axis' size, in points; at least two.

    Raises
    ------
    ValueError
        Edges that do not start at 0, are not strictly increasing, or are fewer than two.
    """

    __slots__ = ("edges",)

    def __init__(self, edges: Sequence[int] | np.ndarray):
        e = np.asarray(edges, dtype=np.int64)
        if e.ndim != 1 or len(e) < 2 or e[0] != 0 or np.any(np.diff(e) <= 0):
            raise ValueError(f"chunk edges must increase strictly from 0 (at least two), got {list(map(int, e))}")
        self.edges = e

    @classmethod
    def regular(cls, size: int, chunk: int) -> AxisGrid:
        """Chunks of ``chunk`` points over ``size`` points, the last one trimmed (an HDF5 chunk grid)."""
        size, chunk = int(size), int(chunk)
        if chunk < 1 or size < 1:
            raise ValueError(f"a grid needs a positive size and chunk, got size {size} and chunk {chunk}")
        return cls(np.append(np.arange(0, size, chunk, dtype=np.int64), size))

    @classmethod
    def from_sizes(cls, sizes: Sequence[int]) -> AxisGrid:
        """Chunks of the given sizes, in order (a dask ``chunks`` entry)."""
        return cls(np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))]))

    @property
    def size(self) -> int:
        """Points along the axis."""
        return int(self.edges[-1])

    @property
    def n(self) -> int:
        """Number of chunks."""
        return len(self.edges) - 1

    @property
    def sizes(self) -> np.ndarray:
        """Points in each chunk, shape ``(n,)``."""
        return np.diff(self.edges)

    @property
    def regular_chunk(self) -> int | None:
        """The chunk size if every chunk but the last has it (and the last no more), else None."""
        s = self.sizes
        if len(s) == 1 or (np.all(s[:-1] == s[0]) and s[-1] <= s[0]):
            return int(s[0])
        return None

    def locate(self, points: np.ndarray) -> np.ndarray:
        """Index of the chunk holding each point (``0 <= point < size``)."""
        return np.searchsorted(self.edges, points, side="right") - 1

    def group(self, m: int) -> AxisGrid:
        """The grid of runs of ``m`` consecutive chunks (a buffer grid over input chunks)."""
        return AxisGrid(np.append(self.edges[:-1:m], self.size))

    def locate_chunks(self, other: AxisGrid) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)``: chunk ``k`` of ``self`` overlaps chunks ``lo[k]..hi[k]`` of ``other``."""
        return other.locate(self.edges[:-1]), other.locate(self.edges[1:] - 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AxisGrid) and np.array_equal(self.edges, other.edges)

    def __hash__(self) -> int:
        return hash(self.edges.tobytes())

    def __repr__(self) -> str:
        c = self.regular_chunk
        if c is not None:
            return f"AxisGrid.regular({self.size}, {c})"
        return f"AxisGrid({self.edges.tolist()})"


_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


def parse_bytes(value: int | float | str) -> int:
    """A number of bytes from an int or a string such as ``"512MB"``, ``"1.5 GiB"`` or ``"300k"``.

    Decimal prefixes (k, M, G, T) are powers of 1000 and binary ones (Ki, Mi, Gi,
    Ti) powers of 1024, as dask's ``parse_bytes`` reads them.

    Raises
    ------
    ValueError
        A string that is not a number followed by an optional unit, or a negative size.
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        n = int(value)
    elif isinstance(value, float) and math.isfinite(value):
        n = int(value)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]i?)?b?\s*", value.lower())
        if m is None:
            raise ValueError(f"a size in bytes such as 512MB, 2GiB or 1000000 was expected, got {value!r}")
        n = int(float(m.group(1)) * _UNITS[m.group(2) or ""])
    else:
        raise TypeError(f"a size in bytes (int or str such as '512MB') was expected, got {type(value).__name__}")
    if n < 0:
        raise ValueError(f"a size in bytes cannot be negative, got {value!r}")
    return n
