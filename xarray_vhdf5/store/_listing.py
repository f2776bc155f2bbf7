"""``list_prefix`` and ``list_dir`` of zarr's Store API, derived from ``list`` (shared by the stores here)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

__all__ = ["ListingFromList"]


class ListingFromList:
    """Mixed into a ``zarr.abc.store.Store`` whose ``list()`` yields every key once."""

    if TYPE_CHECKING:  # declared for the checker only: defined here it would hide the store's

        def list(self) -> AsyncIterator[str]: ...

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
                name = key[len(start) :].split("/", 1)[0]
                if name not in seen:
                    seen.add(name)
                    yield name
