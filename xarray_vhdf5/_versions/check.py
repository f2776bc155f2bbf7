"""Checking a versioned file for damage: :func:`check_file` and its :class:`CheckReport` (``vhdf5 check``).

A damaged file must be diagnosed, never misread. :func:`check_file` reads the
whole version history as the format (``docs/format.md``) describes it and
reports every problem it finds, in plain words, as a list of :class:`Problem`
records; it raises only for a file that is not a versioned HDF5 file at all.
libhdf5's errors are caught per object (a version group, a virtual dataset, a
raw_data, a hash table, a chunk), so one damaged object does not hide the rest.

What is checked, in this order:

1. the versions group and its ``current_version`` and ``data_version`` attributes;
2. each version group's ``committed``, ``prev_version`` and ``timestamp`` (a
   group left with ``committed=False``, or without a timestamp, is a leftover
   of an interrupted commit: a warning);
3. the version index (``_versions/index.py``), when it claims to describe the
   versions group, agrees with the groups;
4. the version DAG: every ``prev_version`` chain ends at ``__first_version__``
   through committed versions, and ``current_version`` names one;
5. each versioned dataset's raw_data and hash table
   (:func:`~xarray_vhdf5._versions.chunkcheck.inspect_dataset`);
6. each version's virtual datasets against their raw_data
   (:meth:`~xarray_vhdf5._versions.chunkcheck.DatasetState.check_mappings`); a
   version mapping ``_version_data/<name>/__vhdf5_new_<k>/raw_data`` (a
   ``modify_metadata`` interrupted between its steps B and E, see
   :mod:`~xarray_vhdf5._versions.metadata`) is checked against that raw_data and
   the run reported as a warning (the next writer finishes it); a name that
   exists nowhere stays an error;
7. with ``rehash=True``, every mapped chunk read and its SHA-256 compared with
   the hash table's digest (:meth:`~xarray_vhdf5._versions.chunkcheck.DatasetState.rehash`).

A version is *damaged* when one of its own objects fails (its group or
attributes cannot be read, a virtual dataset fails a check, a chunk it maps
is damaged). The report's ``last_whole_version`` is the newest version along
``current_version``'s ancestry that is not damaged; :func:`~xarray_vhdf5._versions.repair.repair`
rolls back to it. Problems of a dataset's hash table alone (versions still
read right) are errors of the dataset, not of its versions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from .._backend.signature import open_h5file
from ..errors import CorruptFileError
from .chunkcheck import describe, filter_unavailable

__all__ = ["ERROR", "WARNING", "CheckReport", "Problem", "check_file", "corrupt_file_error"]

#: Severity of a problem that makes the file (or a version) read wrong or not at all.
ERROR = "error"
#: Severity of a problem that reads right but is not what the format promises.
WARNING = "warning"

#: Fragments of libhdf5's messages (lower case) that mean the file's bytes are damaged.
DAMAGE_MARKERS = (
    "truncated file",
    "bad object header",
    "checksum",
    "can't decompress",
    "inflate",
    "filter returned failure",
    "bad symbol table",
    "bad local heap",
    "bad global heap",
    "bad heap",
    "wrong b-tree signature",
    "bad b-tree",
    "addr overflow",
    "address overflow",
    "unable to load",
    "unable to decode",
    "unable to deserialize",
    "bad version number",
    "past end of",
    "invalid address",
    "ran out of",
    "corrupt",
    "exceeds buffer end",
    "end of input buffer",
    "bad heap free list",
    "incorrect metadata checksum",
    # torn flushes of plain h5py handles, seen after SIGKILLs (docs/benchmarks.md, "Sharing and durability"):
    "after adjustment for eoa",  # an object header past the end of allocation the superblock records
    "heap object offset too large",  # a fractal heap (a group's links) written in part
    "bad heap index",  # a global heap object (a variable-length attribute) not written
    # bit flips in a virtual dataset's layout message (tests/test_corruption_slow.py)
    "can't deserialize",
    "rank too large",
)


@dataclass(frozen=True)
class Problem:
    """One problem :func:`check_file` found.

    Attributes
    ----------
    severity : str
        :data:`ERROR` (reads wrong or fails) or :data:`WARNING`.
    what : str
        What is wrong, in plain words.
    version : str or None
        The version (or version group) concerned; None for the file or a dataset.
    dataset : str or None
        The dataset's path (inside the versions) concerned, if any.
    """

    severity: str
    what: str
    version: str | None = None
    dataset: str | None = None

    def __str__(self) -> str:
        where = [f"version {self.version!r}"] if self.version is not None else []
        if self.dataset is not None:
            where.append(f"dataset {self.dataset!r}")
        return f"{self.severity}: {', '.join(where) or 'file'}: {self.what}"


@dataclass
class CheckReport:
    """What :func:`check_file` found.

    Attributes
    ----------
    path : str
        The file checked.
    problems : list of Problem
        Every problem, in the order found.
    versions_checked, datasets_checked, virtual_datasets_checked : int
        Committed versions, versioned datasets (raw_data and hash table) and
        versions' virtual datasets checked.
    chunks_checked : int
        Chunk mappings checked, over every version's virtual datasets.
    chunks_rehashed : int
        Distinct raw_data chunks read and hashed (``rehash=True``).
    rehashed : bool
        Whether chunks were read and hashed.
    current_version : str or None
        The ``current_version`` attribute (None: unreadable).
    last_whole_version : str or None
        The newest version along ``current_version``'s ancestry that is not
        damaged (when ``current_version`` names no version: the newest
        undamaged version); None when there is none.
    damaged_versions : list of str
        Versions that read wrong or fail, oldest first.
    leftover_groups : list of str
        Groups of the versions group that are not versions (left by an interrupted commit).
    reroot : list of str
        Versions whose ``prev_version`` names no version, or closes a loop: repair
        gives them ``__first_version__`` as parent.
    bad_rows : dict of str to list of (int, bytes)
        Per dataset, ``(first raw_data row, digest)`` of the hash-table rows whose
        chunk failed its check (``rehash=True``): repair retires them, so no
        commit deduplicates onto a damaged chunk.
    index_wrong : bool
        The version index claims to describe the versions group but does not (or cannot be read).
    past_end : dict of str to int
        Per dataset, the byte where the last of its raw_data chunks that HDF5's
        chunk index places past the end of the file ends (a writer killed
        inside libhdf5's flush leaves such entries): libhdf5 would allocate new
        objects over them; repair moves the file's end of allocation past them.
    crashed : list of str
        The objects (HDF5 paths; ``raw_data[a:b]`` for rows of chunks) not read because
        libhdf5 crashed the process reading them in an earlier attempt (``skip``).
    """

    path: str
    problems: list[Problem] = field(default_factory=list)
    versions_checked: int = 0
    datasets_checked: int = 0
    virtual_datasets_checked: int = 0
    chunks_checked: int = 0
    chunks_rehashed: int = 0
    rehashed: bool = False
    current_version: str | None = None
    last_whole_version: str | None = None
    damaged_versions: list[str] = field(default_factory=list)
    leftover_groups: list[str] = field(default_factory=list)
    reroot: list[str] = field(default_factory=list)
    bad_rows: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    index_wrong: bool = False
    crashed: list[str] = field(default_factory=list)
    past_end: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> list[Problem]:
        """The problems of severity :data:`ERROR`."""
        return [p for p in self.problems if p.severity == ERROR]

    @property
    def warnings(self) -> list[Problem]:
        """The problems of severity :data:`WARNING`."""
        return [p for p in self.problems if p.severity == WARNING]

    @property
    def ok(self) -> bool:
        """True when no error was found (warnings allowed)."""
        return not self.errors

    @property
    def needs_repair(self) -> bool:
        """Whether :func:`~xarray_vhdf5._versions.repair.repair` has something to do."""
        return bool(
            not self.ok or self.leftover_groups or self.reroot or self.bad_rows or self.index_wrong or self.past_end
        )

    def __str__(self) -> str:
        counted = (
            f"{_count(self.versions_checked, 'version')}, {_count(self.datasets_checked, 'dataset')}, "
            f"{_count(self.virtual_datasets_checked, 'virtual dataset')}, "
            f"{_count(self.chunks_checked, 'chunk mapping')} checked"
        )
        if self.rehashed:
            counted += f", {_count(self.chunks_rehashed, 'chunk')} read and hashed"
        lines = [f"{self.path}: {counted}"]
        lines.append(f"current version: {self.current_version}; last whole version: {self.last_whole_version}")
        if self.damaged_versions:
            lines.append(f"damaged versions: {', '.join(self.damaged_versions)}")
        if not self.problems:
            lines.append("no problems found")
        else:
            n_err, n_warn = len(self.errors), len(self.warnings)
            lines.append(f"{_count(n_err, 'error')}, {_count(n_warn, 'warning')}:")
            lines.extend(f"  {p}" for p in self.problems)
        return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def corrupt_file_error(path, exc: BaseException) -> CorruptFileError | None:
    """A :class:`~xarray_vhdf5.errors.CorruptFileError` if libhdf5's ``exc`` says the file is damaged.

    For the openers: h5py raises libhdf5's failures as ``OSError``,
    ``RuntimeError``, ``KeyError`` or ``ValueError``; those whose message names
    damaged bytes (a truncated file, a bad object header or heap, a failed
    checksum, a chunk that does not decompress, :data:`DAMAGE_MARKERS`) become
    a ``CorruptFileError`` chained by the caller (``raise err from exc``).

    Parameters
    ----------
    path : str, os.PathLike or None
        The file (named in the message).
    exc : BaseException
        What h5py raised.

    Returns
    -------
    CorruptFileError or None
        None for anything else: a missing file, a lock held by another
        process, a file without the HDF5 signature (``NotHDF5Error``'s case),
        a missing filter plugin, or an exception of another type.
    """
    if isinstance(exc, CorruptFileError):
        return exc
    if not isinstance(exc, (OSError, RuntimeError, KeyError, ValueError)):
        return None
    text = describe(exc)
    lowered = text.lower()
    if "file signature not found" in lowered or filter_unavailable(lowered):
        return None
    if not any(m in lowered for m in DAMAGE_MARKERS):
        return None
    shown = os.fspath(path) if isinstance(path, (str, os.PathLike)) else "the file"
    return CorruptFileError(
        f"{shown!r} is damaged: libhdf5 says {text}; run 'vhdf5 check {shown}' to list what is damaged, "
        f"then 'vhdf5 check --repair {shown}' to roll the file back to its last whole version",
        path=shown if isinstance(path, (str, os.PathLike)) else None,
    )


def check_file(
    path_or_h5file,
    *,
    rehash: bool = False,
    progress: Callable[[int, int], None] | None = None,
    trace: Callable[[str], None] | None = None,
    skip: Collection[str] = (),
) -> CheckReport:
    """Check a versioned HDF5 file for damage; report every problem found.

    Parameters
    ----------
    path_or_h5file : str, os.PathLike, h5py.File, h5py.Group or VersionedHDF5File
        The file: a path (opened read-only and closed again) or an open file
        (the group holding ``_version_data``). Nothing is written.
    rehash : bool
        Also read every chunk a version maps (libhdf5 decompresses it) and
        compare its SHA-256 with the hash table's digest. Reads all the
        stored data once; without it only metadata and chunk indexes are read.
    progress : callable, optional
        ``progress(done, total)``, in chunks, called while rehashing.
    trace : callable, optional
        ``trace(path)`` called before each object is read: the HDF5 path of a
        group or dataset, or ``<raw_data path>[a:b]`` before rows of chunks.
        libhdf5 can crash the process on some damaged metadata; a caller
        running the check in a child process learns where from the last path
        traced, and runs it again with that path in ``skip``
        (``vhdf5 check`` does).
    skip : collection of str
        Paths (as ``trace`` gives them) not to read: each is reported as an
        error (libhdf5 crashed reading it), and the versions holding it as damaged.

    Returns
    -------
    CheckReport
        ``ok`` when no error was found; its ``str`` lists the problems.

    Raises
    ------
    NotHDF5Error
        The path is not an HDF5 file (no HDF5 signature).
    NotVersionedError
        The file holds no ``_version_data/versions`` group: no version history at all.
    OSError
        libhdf5 cannot open the path for another reason than damage (missing,
        unreadable, locked by a writer). A file libhdf5 refuses as damaged
        (e.g. truncated) gives a report with that error instead.
    TypeError
        ``path_or_h5file`` is none of the above.
    ClosedFileError
        An h5py file that is closed.
    """
    from .checker import Checker  # here: it imports this module
    from .file import VersionedHDF5File  # here: file.py's imports would cycle
    from .objects import check_file_argument

    if isinstance(path_or_h5file, VersionedHDF5File):
        path_or_h5file._check_open()
        path_or_h5file = path_or_h5file.f
    if isinstance(path_or_h5file, (str, os.PathLike)):
        path = os.fspath(path_or_h5file)
        try:
            f = open_h5file(path, "r")
        except OSError as exc:
            if corrupt_file_error(path, exc) is not None:
                from .openrepair import short_of_end  # here: it imports modules that import this one

                report = CheckReport(path)
                said = f"libhdf5 cannot open the file: {describe(exc)}"
                missing = short_of_end(path)
                if missing:
                    said += (
                        f" (it ends {missing} bytes before the end its superblock records, as a writer killed "
                        "inside libhdf5's flush can leave it: --repair extends it with zeros and checks every "
                        "chunk before rolling back)"
                    )
                report.problems.append(Problem(ERROR, said))
                return report
            raise
        with f:
            return Checker(f, path, rehash, progress, trace, skip).run()
    check_file_argument("check_file", path_or_h5file, versioned_file=False)
    from .mutation import file_name

    name = file_name(path_or_h5file)  # a journaled handle's file too
    return Checker(path_or_h5file, name, rehash, progress, trace, skip).run()
