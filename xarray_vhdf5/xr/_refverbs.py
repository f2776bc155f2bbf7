"""Branch and tag verbs of the ``.vhdf5`` accessors (Dataset and DataTree).

The refs themselves live in :mod:`xarray_vhdf5._versions.refs`; these verbs act on
the file and version an object was opened from (``encoding["source"]`` and
``encoding["vhdf5_version"]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from .._versions import refs
from ._engine import BRANCH_KEY

__all__ = ["RefVerbs", "refs_frame"]


def refs_frame(path) -> pd.DataFrame:
    """The branches and tags of the file at ``path``: one row per ref.

    Returns
    -------
    pandas.DataFrame
        Indexed by ref name; columns ``kind`` (``"branch"`` or ``"tag"``) and
        ``version`` (the version it points to). ``main`` is the current version.
    """
    rows = [(name, "branch", v) for name, v in refs.list_branches(path).items()]
    rows += [(name, "tag", v) for name, v in refs.list_tags(path).items()]
    return pd.DataFrame(rows, columns=["name", "kind", "version"]).set_index("name")


class RefVerbs:
    """Mixed into the accessors; they provide ``_encoding`` and ``_opened(what)`` (the source path)."""

    if TYPE_CHECKING:  # what the accessors provide

        @property
        def _encoding(self) -> dict: ...

        def _opened(self, what: str) -> str: ...

    @property
    def branch(self) -> str | None:
        """The branch this object was opened from (``version="qc"``), whose tip a staged commit moves.

        None when it was opened by version name, time or position, or from ``main``
        (the current version, which commits move as before).
        """
        return self._encoding.get(BRANCH_KEY)

    @property
    def refs(self) -> pd.DataFrame:
        """The branches and tags of the file this object was opened from (:func:`refs_frame`).

        Raises
        ------
        ValueError
            Not opened with ``engine="vhdf5"`` from a path.
        """
        return refs_frame(self._opened("refs"))

    def create_branch(self, name: str) -> str:
        """Create branch ``name`` at the version this object was opened from; returns that version.

        Open it with ``version=name`` and ``stage()`` to commit on it.

        Raises
        ------
        RefExistsError
            ``name`` already names a branch, tag or version.
        ValueError
            Not opened with ``engine="vhdf5"`` from a path; a bad name.
        """
        return refs.create_branch(self._opened("create_branch"), name, at=self._encoding["vhdf5_version"])

    def create_tag(self, name: str) -> str:
        """Tag the version this object was opened from as ``name``; returns that version.

        Raises as :meth:`create_branch`.
        """
        return refs.create_tag(self._opened("create_tag"), name, at=self._encoding["vhdf5_version"])
