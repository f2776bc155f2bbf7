"""What the Dataset and DataTree ``.vhdf5`` accessors share: their reading verbs, written once.

:class:`AccessorBase` holds the members both accessors have and that behave the
same on either (``version``, ``source``, ``versions``, ``diff``, ``stage``),
and the checks and commit options both ``commit`` methods use. Their docstrings
are templates in the words of the class (``$noun``: "Dataset" or "tree", ...:
:data:`DATASET_WORDS`, :data:`DATATREE_WORDS`): each accessor class gets its own
copy of every shared member, its docstring filled in with its own words
(:meth:`AccessorBase.__init_subclass__`), so that the API reference documents each
member complete on each class (``docs/conf.py`` documents no inherited member).
"""

from __future__ import annotations

import abc
import functools
import os
import string
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Generic, TypeVar

import pandas as pd
import xarray as xr

from ._refverbs import RefVerbs

__all__ = ["DATASET_WORDS", "DATATREE_WORDS", "AccessorBase", "fill_doc", "version_log_frame"]

#: The object an accessor is attached to.
T = TypeVar("T", xr.Dataset, xr.DataTree)

#: Docstring blocks shared by both accessors (filled in each class's words in turn).
SHARED_BLOCKS = {
    "not_opened": """\
        ValueError
            The $noun was not opened with ``engine="vhdf5"`` from a path.""",
    "diff_parameters": """\
        other : str, int, datetime or None
            The base version (A): a name, ``-n``, a timestamp...
        decode_times : $decode_times_type, optional
            Decode CF times before subtracting; default: as this $noun was
            opened (``xr.$opener(..., decode_times=False)`` gives False:
            ``encoding["vhdf5_decode_times"]``).
        lazy : bool, optional
            Give dask arrays, one block per HDF5 chunk, and read nothing now
            (see :func:`$differ`). Default: lazy
            when this $noun holds dask arrays (opened with ``chunks=``), else
            for variables larger than :data:`~xarray_vhdf5.xr._diff.EAGER_BYTES`.""",
}

#: The words of the Dataset accessor's docstrings.
DATASET_WORDS = {
    "noun": "Dataset",
    "kind": "Dataset",
    "short": "ds",
    "opener": "open_dataset",
    "decode_times_type": "bool or xarray's CFDatetimeCoder",
    "stager": "~xarray_vhdf5.xr._stage.stage_dataset",
    "differ": "~xarray_vhdf5.xr._diff.diff_versions",
    "diff_scope": "in its group",
    "diff_how": "",
    "diff_returns": """\
        xarray.Dataset
            Per modified numeric or time variable, ``<var>_diff`` (B - A
            where both values are numbers and differ, NaN elsewhere); per
            added, replaced or modified variable, ``<var>_changed`` (bool,
            True at every changed point of B, NaN <-> value and appended
            points included) and ``<var>_changes`` (changed points per
            chunk); see :mod:`xarray_vhdf5.xr._diff`.""",
}

#: The words of the DataTree accessor's docstrings.
DATATREE_WORDS = {
    "noun": "tree",
    "kind": "DataTree",
    "short": "dt",
    "opener": "open_datatree",
    "decode_times_type": "bool",
    "stager": "~xarray_vhdf5.xr._datatree.stage_datatree",
    "differ": "~xarray_vhdf5.xr._diff.diff_datatree",
    "diff_scope": "group by group",
    "diff_how": (
        "Each group of the tree (and each group only ``other`` has) is compared\n"
        "as ``ds.vhdf5.diff`` compares a Dataset."
    ),
    "diff_returns": """\
        xarray.DataTree
            One node per group, each the diff Dataset of that group.""",
}


def version_log_frame(path: str | os.PathLike) -> pd.DataFrame:
    """The version log of the file at ``path`` as a DataFrame, oldest version first.

    Built from :func:`xarray_vhdf5._versions.history.version_log` (the virtual
    dataset mappings only: no chunk data is read).

    Returns
    -------
    pandas.DataFrame
        Index ``name`` (the version); columns ``timestamp`` (UTC,
        ``datetime64[ns, UTC]``), ``parent`` (str), ``message`` (str or None),
        ``changed`` (tuple of dataset paths added, removed, or whose shape,
        dtype, chunk mapping or attributes differ from the parent's; netCDF-4
        phony dimension scales left out), ``new_chunks`` (int, chunks the
        version stored: mapped by no earlier version), ``new_bytes`` and
        ``new_bytes_on_disk`` (int, those chunks' bytes uncompressed and in the
        file). The table ``vhdf5 log`` prints
        (:func:`~xarray_vhdf5._versions.history.log_frame`).

    Raises
    ------
    NotVersionedError
        The file has no version history (:class:`~xarray_vhdf5.errors.NotHDF5Error`:
        it is not an HDF5 file).
    """
    from .._backend.signature import open_h5file
    from .._versions.history import log_frame, version_log

    with open_h5file(path, "r", hint="a version log needs a versioned HDF5 file") as f:
        # variables_only: phony dimension scales left out of ``changed``, from the log's
        # records, with no version dataset opened (each open decodes its mappings)
        return log_frame(version_log(f, variables_only=True))


def fill_doc(template: str, words: Mapping[str, str]) -> str:
    """``template`` with every ``$name`` replaced by ``words[name]`` or a block of :data:`SHARED_BLOCKS`.

    A placeholder alone on its line stands for a block of lines: each is
    indented as the placeholder was (numpydoc sections nest by indentation),
    and filled in turn, so a block may hold ``$noun``.

    Raises
    ------
    KeyError
        A placeholder names no word and no block (at import: a typo fails early).
    """
    parts = {**SHARED_BLOCKS, **words}
    out: list[str] = []
    for line in template.splitlines():
        name = line.strip()[1:]
        if line.strip().startswith("$") and name in parts:
            indent = line[: len(line) - len(line.lstrip())]
            block = fill_doc(textwrap.dedent(parts[name]), words)
            out.extend(indent + b if b else b for b in block.splitlines())
        else:
            out.append(string.Template(line).substitute(parts))
    return "\n".join(out)


def _own_copy(member: Any, doc: str) -> Any:
    """``member`` (a property or a method) with docstring ``doc``, to set on a subclass."""
    if isinstance(member, property):
        return property(member.fget, doc=doc)

    @functools.wraps(member)
    def method(self, *args, **kwargs):
        return member(self, *args, **kwargs)

    method.__doc__ = doc
    return method


class AccessorBase(RefVerbs, Generic[T], abc.ABC):
    """The members of ``ds.vhdf5`` and ``dt.vhdf5`` that behave alike; subclassed by each accessor.

    A subclass sets :attr:`_words` and implements :meth:`_datasets`, :meth:`_diff`
    and :meth:`_stage`.
    """

    #: The words filling the docstrings of the subclass (:func:`fill_doc`).
    _words: ClassVar[dict[str, str]]
    #: The members given to every subclass as its own (so that each one's reference documents them).
    _SHARED = ("version", "source", "versions", "diff", "stage")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Fill the docstrings of ``cls``'s public members, and of its copies of the shared ones."""
        super().__init_subclass__(**kwargs)
        for name in AccessorBase._SHARED:
            member = vars(AccessorBase)[name]
            setattr(cls, name, _own_copy(member, fill_doc(member.__doc__, cls._words)))
        for name, member in list(vars(cls).items()):
            if not name.startswith("_") and name not in AccessorBase._SHARED and "$" in (member.__doc__ or ""):
                member.__doc__ = fill_doc(member.__doc__, cls._words)

    def __init__(self, obj: T):
        self._obj: T = obj

    @property
    def _encoding(self) -> dict:
        return self._obj.encoding

    def _opened(self, what: str) -> str:
        """The path this object was opened from; ``what``: the verb that needs it (for the message)."""
        source = self.source
        if source is None or self.version is None:
            short, kind, opener = self._words["short"], self._words["kind"], self._words["opener"]
            raise ValueError(
                f"{short}.vhdf5.{what} needs a {kind} opened with xr.{opener}(path, engine='vhdf5') "
                "(it reads encoding['source'] and encoding['vhdf5_version'])"
            )
        return source

    @abc.abstractmethod
    def _datasets(self) -> Iterable[xr.Dataset | xr.DataTree]:
        """The objects whose variables this accessor's object holds (the Dataset; the tree's nodes)."""
        ...

    @abc.abstractmethod
    def _diff(self, source: str, other, **options: Any) -> T:
        """The diff of ``other`` to this version of ``source`` (``options``: group, decode_times, lazy)."""
        ...

    @abc.abstractmethod
    def _stage(self) -> T:
        """The staged copy of this accessor's object."""
        ...

    @property
    def version(self) -> str | None:
        """The version this $noun was opened from (None if not opened with engine="vhdf5")."""
        return self._encoding.get("vhdf5_version")

    @property
    def source(self) -> str | None:
        """Path of the file this $noun was opened from, if any."""
        return self._encoding.get("source")

    @property
    def versions(self) -> pd.DataFrame:
        """The version log of the file this $noun was opened from (see :func:`version_log_frame`).

        Raises
        ------
        $not_opened
        """
        return version_log_frame(self._opened("versions"))

    def diff(self, other, *, decode_times=None, lazy: bool | None = None) -> T:
        """What changed from version ``other`` to this $noun's version, $diff_scope.

        Like ``git diff other``: ``other`` is the base (A), this $noun's
        version (``encoding["vhdf5_version"]``) is B. Only chunks whose
        mappings differ are read.
        $diff_how

        Parameters
        ----------
        $diff_parameters

        Returns
        -------
        $diff_returns

        Raises
        ------
        $not_opened
        VersionNotFoundError
            No version ``other``.
        """
        source = self._opened("diff")
        if decode_times is None:
            decode_times = self._encoding.get("vhdf5_decode_times", True)
        if lazy is None and any(v.chunks is not None for d in self._datasets() for v in d.variables.values()):
            lazy = True
        return self._diff(source, other, group=self._encoding.get("vhdf5_group"), decode_times=decode_times, lazy=lazy)

    def stage(self) -> T:
        """An editable, lazy copy of this $noun; edits stay in memory until :meth:`commit` (no ``path``).

        See :func:`$stager`.

        Raises
        ------
        $not_opened
        """
        return self._stage()

    @staticmethod
    def _commit_options(message, timestamp, make_current: bool, progress, max_bytes: int | None) -> dict[str, Any]:
        """The options every commit function takes, ``max_bytes`` only when given (else their default)."""
        options = {"message": message, "timestamp": timestamp, "make_current": make_current, "progress": progress}
        return options if max_bytes is None else {**options, "max_bytes": max_bytes}
