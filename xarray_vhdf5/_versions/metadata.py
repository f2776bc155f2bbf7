"""Changing a dataset's chunks, dtype, fill value or filters across every version.

Semantics of versioned-hdf5 2.6 ``replay.modify_metadata``, checked against it by
``tests/test_modify_metadata.py``:

- every version holding the dataset is rewritten; its stored chunks are cast to the
  new dtype *by HDF5's conversion* (``H5Dread``: floats truncate toward zero,
  out-of-range values and infinities saturate, NaN becomes the integer minimum) and
  its unstored (all fill) chunks hold the old fill value cast *by numpy* (the two
  differ only for out-of-range values: 300.0 -> uint8 is 255 stored, 44 unstored);
  then, if a fill value is given and differs (``!=``) from the old one, every point
  equal (``==``, so ``-0.0`` matches ``0.0`` and a NaN never matches) to the old fill
  value becomes the new fill value (variable-length strings, which have none, count
  ``b""`` as theirs when made fixed-width with a fill value);
- without ``fillvalue`` the new fill value is the old one cast by numpy (as h5py does
  when creating the dataset);
- filters not passed are kept; ``compression=None`` removes compression. Unlike
  versioned-hdf5 (which raises "LZF compression filter accepts no options" for
  gzip -> lzf), changing ``compression`` without ``compression_opts`` takes the new
  filter's default options;
- ``chunks`` is a tuple (one size per axis) or True, as versioned-hdf5 2.6 takes it:
  anything else (an int, False, a list) raises
  :class:`~xarray_vhdf5.errors.IncompatibleDataError` (a ``ValueError``, "chunks must
  be a tuple..."). ``chunks=True`` picks chunks as versioned-hdf5 2.6 does in 1-d:
  h5py's guess for an empty dataset (``guess_chunk((0,), ...)``, i.e. for 1024
  points: ``(1024,)`` up to 8 bytes a point, ``(512,)`` for 16, ``(256,)`` for 40),
  whatever the data; in n-d it raises :class:`~xarray_vhdf5.errors.UnsupportedError`
  (a ``NotImplementedError``, "chunks must be specified for multi-dimensional
  datasets"), as versioned-hdf5 does. :func:`~xarray_vhdf5._versions.rechunk.rechunk`
  (``vhdf5 rechunk``, ``ds.vhdf5.rechunk``) takes more (dicts by dimension name,
  None to keep an axis) and passes a tuple.

How. Every stored chunk of the new layout is built once: a new chunk's content is
fixed by its position, its edge-trimmed shape and the raw_data rows (or fill) of the
old chunks it overlaps, so a dictionary of those keys skips reading and hashing chunks
an earlier version already produced (with unchanged chunks, a key is just the old
chunk's row: each stored chunk is read, cast and hashed once). Misses are read in
batches of at most :data:`BATCH_BYTES` with
:func:`~xarray_vhdf5._backend.transfer.read_many_slices` straight from raw_data (the
cast happens in ``H5Dread``) and written through a
:class:`~xarray_vhdf5._backend.raw_data.ChunkWriter` whose queue is capped at the same
size: chunk data in memory is bounded by two batches, never by the dataset. Besides,
the digests of the new hash table and the dictionary above hold about 200 bytes per
stored chunk.

Order of operations (crash safety, see :mod:`.delete` for barriers and the scratch
group). The new raw_data cannot take the name ``raw_data`` while old virtual datasets
map the old one by that name, so each version's virtual dataset is rebuilt twice:

A. new raw_data and hash table in ``_version_data/<name>/__vhdf5_new_<k>/`` (ignored by
   both libraries), every version's data written there, and for each version a
   virtual dataset mapping it (in the scratch group);
B. versions switched to those (each version reads the same data before and after);
C. ``raw_data`` relinked to the new dataset (a hard link: it has both names now, the old
   one is freed), the new hash table moved in;
D. every version's virtual dataset rebuilt to map ``raw_data`` (in the scratch group);
E. versions switched to those;
F. ``__vhdf5_new_<k>`` and the scratch group deleted.

At every barrier every version reads its data (old or new metadata). If the process
dies between B and F, run ``modify_metadata(f, name)`` again: with no argument it
takes the interrupted run's target (``dtype``, ``chunks``, fill value, filters) and
finishes it; :func:`~xarray_vhdf5._versions.delete.delete_versions` refuses the
dataset until then. :func:`finish_interrupted` does that for every dataset, and
``VersionedHDF5File`` calls it when it opens a file writable (as SQLite rolls a
hot journal back on open), so a plain ``h5py.File(path, "a")`` handle that died
halfway is finished by the next writer of this package. A run that dies before B
is rolled back instead (its new raw_data is deleted): no version used it.

Finding an interrupted run must cost nothing on open, so it is marked: the attribute
``__vhdf5_modify_metadata__`` of ``_version_data`` (the dataset's name) is set in epoch
A, before any version maps ``__vhdf5_new_<k>``, and deleted in F after the last
``__vhdf5_new_<k>``; a run finishing an interrupted one leaves it in place until then.
(Neither library reads attributes of ``_version_data``; the scratch group is no marker:
``delete_versions``, repair and the hash-table rebuilds delete it.) Before B no version
maps the new raw_data, so a kill before the mark reaches the disk leaves at most an
unused ``__vhdf5_new_<k>``, deleted by the next run of the dataset.
"""

from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass

import h5py
from h5py import h5a

from .._backend.hashtable import HashTable
from .._backend.layout import FIRST_VERSION, VERSION_DATA, VERSIONS
from .._backend.raw_data import ChunkWriter, create_raw_data
from .._backend.virtual import create_virtual_dataset
from ..errors import DatasetNotFoundError, IncompatibleDataError, UnsupportedError
from ._rewrite import (
    BATCH_BYTES,
    UNCHANGED,
    _check_budget,
    _check_cast,
    _OneSourceRewriter,
    _Rewriter,
    _same_metadata,
    _Target,
    _target,
)
from .delete import MAP_CACHE_BYTES
from .journal import SIDE_USERBLOCK
from .locking import file_locks
from .mutation import _JOURNALED, _no_live_writer, disk_path, mutating
from .objects import _open, check_file_argument, chunk_rows, copy_attrs, dataset_paths, read_chunk_map, version_dataset
from .scratch import SCRATCH, Scratch, _attachment_plan, _barrier, _reattach, relink_plan
from .sidecopy import SideCopy, file_manifest, side_manifest

__all__ = [
    "BATCH_BYTES",
    "UNCHANGED",
    "DatasetNotFoundError",
    "ModifyReport",
    "finish_interrupted",
    "modify_metadata",
]

#: Prefix of the groups holding a new raw_data being built, inside ``_version_data/<name>``.
NEW_PREFIX = "__vhdf5_new_"
#: The scratch group's link, relative to the group holding ``_version_data``.
_SCRATCH_LINK = f"{VERSION_DATA}/{SCRATCH}".encode()
#: Attribute of ``_version_data`` marking a run whose ``__vhdf5_new_<k>`` exist (see the module docstring).
MARK = "__vhdf5_modify_metadata__"


@dataclass
class ModifyReport:
    """What :func:`modify_metadata` did.

    ``chunks_before`` / ``chunks_after`` count the stored chunks of raw_data (hash
    table rows); ``chunks_read`` the blocks read from the old raw_data (one per old
    chunk a new chunk overlaps, each distinct content once: see the module docstring).
    """

    dataset: str
    versions: list[str]
    chunks_before: int
    chunks_after: int
    chunks_read: int = 0


def _swap_all(h5file, scratch: Scratch, new: dict[str, str], name: str) -> list:
    """Relink plans to swap each version's dataset ``name`` for ``new[version]`` (scratch names)."""
    versions = h5file[VERSION_DATA][VERSIONS]
    swaps = []
    for version, sname in new.items():
        parent, _, member = f"{versions.name}/{version}/{name}".rpartition("/")
        swaps.append((parent, {member: sname}, relink_plan(h5file, parent, [member], scratch)))
    return swaps


def modify_metadata(
    f,
    dataset_name: str,
    *,
    chunks=None,
    compression=UNCHANGED,
    compression_opts=UNCHANGED,
    dtype=None,
    fillvalue=None,
    shuffle=UNCHANGED,
    fletcher32=UNCHANGED,
    scaleoffset=UNCHANGED,
    max_mem: int | str | None = None,
    progress: bool = False,
) -> ModifyReport:
    """Change the chunks, dtype, fill value or filters of a dataset in every version.

    Parameters
    ----------
    f : VersionedHDF5File or h5py.File
        The file, open writable.
    dataset_name : str
        The dataset's path in the versions (``"x"``, ``"grp/y"``).
    chunks : tuple of int or True, optional
        New chunk shape, in points (one int per axis). True (1-d only): chosen
        as versioned-hdf5 2.6 chooses (h5py's guess for 1024 points:
        ``(1024,)`` up to 8 bytes a point). Omitted: unchanged.
    compression, compression_opts, shuffle, fletcher32, scaleoffset : optional
        HDF5 filters as for ``h5py.Group.create_dataset``. Omitted: unchanged;
        ``compression=None``: uncompressed (versioned-hdf5's convention).
    dtype : numpy dtype, optional
        New dtype; data is cast by HDF5's conversion (see the module docstring).
        ``h5py.string_dtype()`` (or ``object``) for variable-length strings.
    fillvalue : scalar, optional
        New fill value; points equal to the old one become it (versioned-hdf5 2.6).
    max_mem : int or str, optional
        When the chunks change: bytes the resplit of one version may hold at once
        (``"512MB"``; default :data:`~xarray_vhdf5.resplit.DEFAULT_MAX_MEM`,
        raised to the plan's minimum). Each stored chunk of a version is read once
        (see :mod:`~xarray_vhdf5._versions.rechunk`).
    progress : bool
        Progress bars (tqdm) over each version's resplit.

    Returns
    -------
    ModifyReport
        The versions rewritten and the stored chunks before and after.

    Raises
    ------
    DatasetNotFoundError
        No versioned dataset ``dataset_name`` (a ``KeyError``, as versioned-hdf5).
    IncompatibleDataError
        A cast HDF5 cannot do (numbers <-> strings, float -> bool, complex <-> real),
        chunks neither a tuple nor True (an int, a list, ``False``): "chunks must
        be a tuple..."; of the wrong number of axes: "shape and chunk_size must
        have the same dimensionality..." (versioned-hdf5 2.6's messages); not
        positive; a fill value for variable-length strings. Raised before
        anything is written.
    UnsupportedError
        ``chunks=True`` for a dataset of more than one dimension: "chunks must
        be specified for multi-dimensional datasets" (a ``NotImplementedError``,
        as versioned-hdf5 2.6). Raised before anything is written.
    MemoryBudgetError
        ``max_mem`` given, the chunks change, and it is below the resplit's minimum
        (two old chunks and one new one). Raised before anything is written.
    ReadOnlyError
        The file is open read-only.
    TypeError
        ``f`` is not an h5py.File or VersionedHDF5File (e.g. a path: open it
        first; versioned-hdf5 2.6 takes no path either).
    ClosedFileError
        ``f`` is closed.

    Notes
    -----
    Crash safety: see the module docstring. A run interrupted between its steps B
    and F (a killed process, an exception) leaves every version reading its data
    through the new raw_data or the old one; it is finished by the next
    ``VersionedHDF5File`` opened on the file writable (and by its next
    ``stage_version``), by :func:`finish_interrupted`, or by calling
    ``modify_metadata(f, name)`` again with no argument, which takes the
    interrupted run's target. Any call first finishes the interrupted runs of other
    datasets. A run interrupted before B is rolled back by those.

    Space: through a handle of :func:`~xarray_vhdf5.open_file` (what the
    accessor and the CLI use), whose writes go through the rollback journal, the
    new raw_data is written into the old one's bytes and the file keeps its
    size. Through a plain ``h5py.File`` there is no journal, so the old raw_data
    must stay whole until every version maps the new one; libhdf5 forgets the
    bytes it then frees when the file closes (unless the file tracks free space
    persistently), and the file grows by the new raw_data's size. ``vhdf5
    repack`` gives those bytes back (docs/benchmarks.md, "Space after deleting
    versions").
    """
    if not (chunks is None or chunks is True or isinstance(chunks, tuple)):
        # versioned-hdf5 2.6's rule and message ("chunks must be a tuple[int, ...] or True").
        raise IncompatibleDataError(
            f"chunks must be a tuple[int, ...] or True, got {chunks!r}"
            + (
                " (versioned datasets are always chunked)"
                if chunks is False
                else "; for a 1-d dataset give (n,)"
                if isinstance(chunks, int)
                else ""
            )
        )
    return run_modify_metadata(
        f,
        dataset_name,
        chunks=chunks,
        compression=compression,
        compression_opts=compression_opts,
        dtype=dtype,
        fillvalue=fillvalue,
        shuffle=shuffle,
        fletcher32=fletcher32,
        scaleoffset=scaleoffset,
        resplit=(max_mem, progress, None),
    )


def run_modify_metadata(f, dataset_name: str, *, resplit: tuple, in_place: bool = True, **target) -> ModifyReport:
    """:func:`modify_metadata`, with ``resplit = (max_mem, progress, RechunkReport or None)``.

    ``in_place=False`` writes the new raw_data after the end of the file even
    through a journaled handle (see :func:`~xarray_vhdf5._versions.rechunk.rechunk`).
    """
    h5file, _ = _open(f, "modify_metadata")
    with mutating(h5file, moves=True, what="modify_metadata"):
        name = str(dataset_name).strip("/")
        if _marked(h5file):
            for other in _pending_datasets(h5file):
                if other != name:
                    _finish(h5file, other, keep_mark=True)
        return _modify_metadata(h5file, dataset_name, resplit=resplit, in_place=in_place, **target)


def finish_interrupted(h5file) -> list[str]:
    """Finish every ``modify_metadata`` (and deletion or rebuild) a dead writer left halfway.

    For each versioned dataset whose ``_version_data/<name>`` group holds
    ``__vhdf5_new_<k>`` groups left by an interrupted :func:`modify_metadata`, run
    it again with no argument: the interrupted run's target is finished (or, if it
    died before any version used the new raw_data, rolled back). A scratch group left
    by an interrupted :func:`~xarray_vhdf5._versions.delete.delete_versions` or hash
    table rebuild is recovered too (half-done link swaps completed, the group
    deleted: every state a barrier leaves is a valid file, and a later
    ``delete_versions`` compacts what is left). Locked and counted as any
    mutation (``mutating(..., moves=True)``).

    ``VersionedHDF5File`` calls it when it opens a file writable and before each
    ``stage_version``. With nothing to do it costs an attribute and a link lookup
    (whatever the number of datasets): every interrupted run leaves
    :data:`MARK` on ``_version_data`` (see the module docstring), every interrupted
    deletion its scratch group; only then are the dataset groups walked.

    Parameters
    ----------
    h5file : h5py.File, h5py.Group or VersionedHDF5File
        The file (the group holding ``_version_data``), open writable.

    Returns
    -------
    list of str
        The datasets whose interrupted run was finished (or rolled back), then
        ``"__vhdf5_scratch__"`` if a scratch group was recovered with no such
        dataset. Empty when there was nothing to do, or when another process's
        writer holds the file's ``WRITE`` lock (its run is not interrupted: it
        finishes it itself; nothing is waited for).

    Raises
    ------
    ReadOnlyError
        There is something to finish and the file is open read-only.
    TypeError
        ``h5file`` is not an h5py file or group or a VersionedHDF5File.
    ClosedFileError
        ``h5file`` is closed.
    StaleVersionError
        Another process wrote the file since this handle last read it (possible
        only with libhdf5's file locking off): nothing was done; reopen it.
    FileBusyError
        Readers of this package held the chunks' lock past the timeout: nothing
        was done.
    """
    f = h5file
    if not isinstance(h5file, (h5py.File, h5py.Group)) or not h5file.id.valid:
        check_file_argument("finish_interrupted", h5file)  # TypeError, or ClosedFileError for h5py
        h5file._check_open()  # a VersionedHDF5File
        h5file = h5file.f
    try:
        if not (_marked(h5file) or h5file.id.links.exists(_SCRATCH_LINK)):
            return []
    except (KeyError, RuntimeError):  # no _version_data: nothing versioned
        return []
    h5file, _ = _open(f, "finish_interrupted")  # a VersionedHDF5File's caches are cleared
    path = disk_path(h5file)
    if path is not None and not _no_live_writer(file_locks(path)):
        return []  # a live writer's run, not an interrupted one
    with mutating(h5file, moves=True, what="finish of an interrupted modify_metadata"):
        pending = _pending_datasets(h5file)
        for i, name in enumerate(pending):
            _finish(h5file, name, keep_mark=i < len(pending) - 1)
        done = list(pending)
        if Scratch.recover(h5file) and not pending:  # a deletion's or a rebuild's
            done.append(SCRATCH)
        vdata = h5file[VERSION_DATA]
        if MARK in vdata.attrs:  # killed in F after its last __vhdf5_new_<k> went
            del vdata.attrs[MARK]
            _barrier(h5file, "done")
        return done


def _marked(h5file: h5py.Group) -> bool:
    """Whether ``_version_data`` carries :data:`MARK` (one attribute lookup).

    Raises
    ------
    KeyError, RuntimeError
        No ``_version_data``.
    """
    return bool(h5a.exists(h5file.id, MARK.encode(), obj_name=VERSION_DATA.encode()))


def _pending_datasets(h5file: h5py.Group) -> list[str]:
    """Datasets whose ``_version_data/<name>`` group holds ``__vhdf5_new_<k>`` groups (interrupted runs).

    Walks the groups under ``_version_data`` as :func:`dataset_paths` does, except that a
    group holding a ``__vhdf5_new_<k>`` but no ``raw_data`` (a run killed inside step C)
    counts. Only called when :func:`_marked` or a scratch group says there may be one.
    """
    found: list[str] = []

    def walk(group: h5py.Group, prefix: str) -> None:
        for name in group:
            if (name == VERSIONS and not prefix) or name.startswith("__vhdf5_"):
                continue
            obj = group.get(name)
            if not isinstance(obj, h5py.Group):
                continue
            members = list(obj)
            if any(m.startswith(NEW_PREFIX) for m in members):
                found.append(prefix + name)
            elif "raw_data" not in members:
                walk(obj, f"{prefix}{name}/")

    walk(h5file[VERSION_DATA], "")
    return found


def _finish(h5file: h5py.Group, name: str, keep_mark: bool) -> ModifyReport:
    """Finish the interrupted run of dataset ``name`` (every argument omitted: the interrupted target)."""
    return _modify_metadata(
        h5file,
        name,
        chunks=None,
        compression=UNCHANGED,
        compression_opts=UNCHANGED,
        dtype=None,
        fillvalue=None,
        shuffle=UNCHANGED,
        fletcher32=UNCHANGED,
        scaleoffset=UNCHANGED,
        keep_mark=keep_mark,
    )


def _unmark(h5file: h5py.Group, keep: bool) -> None:
    """Delete :data:`MARK` (unless ``keep``: another dataset's run is still to finish)."""
    attrs = h5file[VERSION_DATA].attrs
    if not keep and MARK in attrs:
        del attrs[MARK]


def _modify_metadata(
    h5file,
    dataset_name,
    *,
    chunks,
    compression,
    compression_opts,
    dtype,
    fillvalue,
    shuffle,
    fletcher32,
    scaleoffset,
    keep_mark: bool = False,
    resplit: tuple = (None, False, None),
    in_place: bool = True,
) -> ModifyReport:
    Scratch.recover(h5file)
    name = str(dataset_name).strip("/")
    group = h5file[VERSION_DATA].get(name) if name else None
    interrupted = isinstance(group, h5py.Group) and any(k.startswith(NEW_PREFIX) for k in group)
    if interrupted and isinstance(group, h5py.Group) and "raw_data" not in group:  # killed inside step C
        newest = max((k for k in group if k.startswith(NEW_PREFIX)), key=lambda k: int(k[len(NEW_PREFIX) :]))
        group["raw_data"] = group[newest]["raw_data"]
    paths = dataset_paths(h5file)
    if name not in paths:
        shown = ", ".join(map(repr, paths)) or "none"
        raise DatasetNotFoundError(f"no versioned dataset {dataset_name!r} in this file; datasets: {shown}")
    versions = h5file[VERSION_DATA][VERSIONS]
    group = h5file[VERSION_DATA][name]
    # Version datasets are opened one at a time: an open virtual dataset holds its mappings.
    holders, shapes, sources = [], [], set()
    for version in versions:
        vds = version_dataset(versions, version, name) if version != FIRST_VERSION else None
        if vds is not None:
            holders.append(version)
            shapes.append(vds.shape)
            if vds.is_virtual:
                sources.add(h5file[vds.attrs["raw_data"]].name)
            del vds
    leftovers = _leftovers(group, sources)
    base = group[leftovers[-1]]["raw_data"] if leftovers else group["raw_data"]
    filters = dict(
        compression=compression,
        compression_opts=compression_opts,
        shuffle=shuffle,
        fletcher32=fletcher32,
        scaleoffset=scaleoffset,
    )
    if chunks is True and len(base.attrs["chunks"]) > 1:
        raise UnsupportedError(
            f"chunks must be specified for multi-dimensional datasets: {name!r} has "
            f"{len(base.attrs['chunks'])} dimensions and chunks=True guesses in 1-d only "
            "(as versioned-hdf5 2.6); give a tuple, one size per axis"
        )
    t = _target(base, bool(leftovers), shapes, chunks, dtype, fillvalue, filters)
    for src in sources | {base.name}:
        _check_cast(h5file[src].dtype, t.dtype)
    _check_budget(resplit[0], tuple(int(c) for c in base.attrs["chunks"]), t)
    before = int(group["hash_table"].attrs.get("largest_index", 0))
    if not leftovers and _same_metadata(group["raw_data"], t):
        if interrupted:  # rolled back (died before B, or in F): no __vhdf5_new_<k> left to mark
            _unmark(h5file, keep_mark)
            _barrier(h5file, "done")
        return ModifyReport(name, [], before, before)

    if in_place and not leftovers and not interrupted and sources == {group["raw_data"].name} and _journaled(h5file):
        del base  # an open h5py object would keep the old raw_data's bytes allocated
        return _modify_in_place(h5file, name, group, holders, t, before, resplit)

    attachments = {v: plan for v in holders if (plan := _attachment_plan(versions[v]))}
    # A: new raw_data, its hash table, every version's data, virtual datasets onto it.
    scratch = Scratch(h5file)
    taken = [int(k[len(NEW_PREFIX) :]) for k in group if k.startswith(NEW_PREFIX)]
    new_group = group.create_group(f"{NEW_PREFIX}{max(taken, default=-1) + 1}")
    h5file[VERSION_DATA].attrs[MARK] = name  # on disk at the first barrier, before any version maps it
    new_raw = create_raw_data(new_group, t.dtype, t.chunks, t.fillvalue, t.filters)
    table_slot = scratch.reserve(f"{group.name}/hash_table")
    writer = ChunkWriter(new_raw, HashTable.create(scratch.group.create_group("tables")))
    writer.max_queued_bytes = BATCH_BYTES
    maps, budget, first = {}, MAP_CACHE_BYTES, {}
    with contextlib.ExitStack() as reading:
        # Every version resplit from the one raw_data, whose bytes stay put until step C: read
        # its chunks where they are without libhdf5, while libhdf5 writes the new ones behind.
        in_file = None
        if not leftovers and sources == {group["raw_data"].name} and _resplit_everywhere(versions, holders, name, t):
            h5file.flush()  # the chunks' bytes on disk are the ones read
            path = disk_path(h5file)
            in_file = file_manifest(group["raw_data"], path, t.dtype) if path else None
        if in_file is not None:
            reading.callback(in_file.close)
            rewriter: _Rewriter = _OneSourceRewriter(h5file, t, writer, in_file, resplit[2])
            reading.enter_context(writer.writing_behind())
        else:
            rewriter = _Rewriter(h5file, t, writer, resplit[2])
        rewriter.max_mem, rewriter.progress = resplit[0], resplit[1]
        for version in holders:
            vds = versions[version][name]
            flat, starts = rewriter.version(vds)
            writer.flush()  # raw_data covers every row the virtual dataset maps
            writer.stats.chunk_rows.clear()  # per-commit bookkeeping, unused here
            sname = first[version] = scratch.reserve(vds.name)
            created = create_virtual_dataset(
                scratch.group, sname, new_raw, vds.shape, t.chunks, chunk_rows(vds.shape, t.chunks, flat, starts)
            )
            copy_attrs(vds, created, skip=("raw_data", "chunks"))
            if budget >= flat.nbytes + starts.nbytes:
                budget -= flat.nbytes + starts.nbytes
                maps[version] = (flat, starts)
        writer.flush()
    h5file.move(writer.hash_table.dataset.name, f"{scratch.path}/{table_slot}")
    swaps = _swap_all(h5file, scratch, first, name)
    scratch.write_journal()
    _barrier(h5file, "written")

    # B: versions onto the new raw_data (through its scratch name).
    for parent, new, relink in swaps:
        scratch.replace_members(parent, new, relink)
    _barrier(h5file, "switched")

    # C: raw_data is the new dataset; its hash table moves in.
    del group["raw_data"]
    group["raw_data"] = new_raw
    scratch.move_in(table_slot, f"{group.name}/hash_table")
    _barrier(h5file, "linked")

    # D: virtual datasets mapping raw_data by its own name.
    raw = group["raw_data"]
    second = {}
    for version in holders:
        current = versions[version][name]
        known = maps.pop(version, None)
        flat, starts = known if known is not None else read_chunk_map(current, t.chunks, new_raw.name)
        sname = second[version] = scratch.reserve(current.name)
        created = create_virtual_dataset(
            scratch.group, sname, raw, current.shape, t.chunks, chunk_rows(current.shape, t.chunks, flat, starts)
        )
        copy_attrs(current, created, skip=("raw_data", "chunks"))
    swaps = _swap_all(h5file, scratch, second, name)
    scratch.write_journal()
    _barrier(h5file, "rebuilt")

    # E: versions onto raw_data; F: clean up.
    for parent, new, relink in swaps:
        scratch.replace_members(parent, new, relink)
    for version, plan in attachments.items():
        _reattach(versions[version], plan)
    _barrier(h5file, "relinked")
    for k in [k for k in group if k.startswith(NEW_PREFIX)]:
        del group[k]
    scratch.remove()
    _unmark(h5file, keep_mark)
    _barrier(h5file, "done")
    after = int(group["hash_table"].attrs["largest_index"])
    return ModifyReport(name, holders, before, after, rewriter.chunks_read)


def _journaled(h5file: h5py.Group) -> bool:
    """Whether ``h5file`` writes through a rollback journal (opened by ``open_file`` or the xarray layer)."""
    return _JOURNALED.get(h5file.id.fileno) is not None


def _modify_in_place(
    h5file, name: str, group: h5py.Group, holders: list[str], t: _Target, before: int, resplit: tuple
) -> ModifyReport:
    """Rewrite dataset ``name`` into the bytes of its old raw_data: the file does not grow to twice its size.

    For a handle writing through the rollback journal only: the mutation is whole
    or absent after a crash whatever its order, so the old raw_data can be freed
    before the new one is written. Its chunks are first copied, as stored, into
    a side file beside the file (``<file>.vhdf5-modify``: byte ranges copied in
    the kernel when every version is resplit, else ``H5Ocopy``; see :mod:`.sidecopy`;
    deleted at the end); then it is deleted, which hands its bytes to libhdf5's
    free-space manager for the rest of the session, and the new raw_data, written
    next, takes them (what does not fit goes to the end of the file). Then every
    version's virtual dataset is rebuilt to map it. Should anything fail, the
    file is rolled back at once and the handle left stale (reopen it).

    The side file is the journal's (:meth:`JournaledFile.create_side`): the old
    chunks' extents are registered with it (:func:`_same_chunks`), so the new
    raw_data's first overwrite of them is journaled by reference to their copies,
    not copied a second time (peak disk use is the old raw_data twice, once in
    the side file, once in the file); it is deleted after the journal.
    """
    versions = h5file[VERSION_DATA][VERSIONS]
    raw_name = group["raw_data"].name
    attachments = {v: plan for v in holders if (plan := _attachment_plan(versions[v]))}
    jf = _JOURNALED[h5file.id.fileno]
    try:
        h5file.flush()  # the old chunks' bytes in the file are the ones copied (libhdf5 may cache some)
        with contextlib.ExitStack() as reading:
            sidefile = jf.create_side()
            aside = _resplit_everywhere(versions, holders, name, t) and side_manifest(
                group["raw_data"], sidefile.name, t.dtype
            )
            if aside:  # chunk by chunk in the kernel, read back without libhdf5 (see .sidecopy)
                # In a thread, while the rewrite starts: reads of the side file wait for
                # their chunks (the manifest's gate), the first overwrite of an old
                # chunk's bytes for the whole copy (the journal refers to it then).
                side_raw, copy_plan = aside
                reading.callback(side_raw.close)
                copy = SideCopy(jf.io, jf.fileno(), sidefile, copy_plan)
                jf.refer_when_copied(copy)
                side_raw.gate = copy.wait_copied
            else:
                with sidefile, h5py.File(sidefile, "w", userblock_size=SIDE_USERBLOCK) as side:
                    h5file.copy(group["raw_data"], side.require_group(group.name), "raw_data")
                    extents = _same_chunks(jf.fileno(), group["raw_data"], sidefile.fileno(), side[raw_name])
                jf.refer(extents)
                side_raw = reading.enter_context(h5py.File(sidefile.name, "r"))[raw_name]
            gc.collect()  # no h5py object may keep the old raw_data open: its bytes are freed when unlinked
            del group["raw_data"]
            del group["hash_table"]
            h5file.flush()
            new_raw = create_raw_data(group, t.dtype, t.chunks, t.fillvalue, t.filters)
            writer = ChunkWriter(new_raw, HashTable.create(group))
            writer.max_queued_bytes = BATCH_BYTES
            rewriter = _OneSourceRewriter(h5file, t, writer, side_raw, resplit[2])
            rewriter.max_mem, rewriter.progress = resplit[0], resplit[1]
            if aside:  # reads without libhdf5: the writes go behind them (one batch in flight)
                reading.enter_context(writer.writing_behind())
            scratch = Scratch(h5file)
            rebuilt = {}
            for version in holders:
                vds = versions[version][name]
                flat, starts = rewriter.version(vds)
                writer.flush()
                writer.stats.chunk_rows.clear()
                sname = rebuilt[version] = scratch.reserve(vds.name)
                created = create_virtual_dataset(
                    scratch.group, sname, new_raw, vds.shape, t.chunks, chunk_rows(vds.shape, t.chunks, flat, starts)
                )
                copy_attrs(vds, created, skip=("raw_data", "chunks", "DIMENSION_LIST", "REFERENCE_LIST"))
            writer.flush()
            for parent, new, relink in _swap_all(h5file, scratch, rebuilt, name):
                scratch.replace_members(parent, new, relink)
            for version, plan in attachments.items():
                _reattach(versions[version], plan)
            scratch.remove()
            _barrier(h5file, "done")
    except BaseException:
        # The old raw_data is gone from this state: put the file's bytes back now (the side
        # file goes with the journal), and drop whatever libhdf5 still writes through this
        # handle (its caches hold the state being undone). The handle is stale: the next
        # mutation through it raises StaleVersionError, so the caller reopens the file.
        jf.abandon()
        jf.stale = True
        raise
    # The side file stays until the journal is deleted (JournaledFile.end, the commit point).
    after = int(group["hash_table"].attrs["largest_index"])
    return ModifyReport(name, holders, before, after, rewriter.chunks_read)


def _resplit_everywhere(versions: h5py.Group, holders: list[str], name: str, t: _Target) -> bool:
    """Whether every version of ``name`` gets new chunks (each is then read by the resplit engine only)."""
    return all(tuple(int(c) for c in versions[v][name].attrs["chunks"]) != t.chunks for v in holders)


def _same_chunks(fd: int, old: h5py.Dataset, side_fd: int, copy: h5py.Dataset) -> list[tuple[int, int, int]]:
    """The extents ``(offset in the file, size, offset in the side file)`` of ``old``'s stored chunks.

    ``copy`` is ``old`` copied by ``H5Ocopy`` (which copies chunks as stored) into
    the side file; ``fd`` and ``side_fd`` are descriptors of the two files. Each
    chunk is paired with the copy of the same position, kept only when size and
    filter mask match and its first and last bytes are the same in both files
    (a cheap check of the pairing; every byte is compared in
    ``tests/test_journal_refs.py``). A chunk left out is journaled by copy.
    """
    found: dict[tuple, tuple[int, int, int]] = {}

    def visit(info) -> None:
        found[info.chunk_offset] = (info.byte_offset, info.size, info.filter_mask)

    old.id.chunk_iter(visit)
    extents = []

    def pair(info) -> None:
        mine = found.get(info.chunk_offset)
        if mine is not None and mine[1:] == (info.size, info.filter_mask) and info.size > 0:
            extents.append((mine[0], info.size, info.byte_offset))

    copy.id.chunk_iter(pair)
    copy.file.flush()

    def same(at: int, side_at: int, n: int) -> bool:
        return os.pread(fd, n, at) == os.pread(side_fd, n, side_at)

    edge = 64
    return [
        (at, n, sat)
        for at, n, sat in extents
        if same(at, sat, min(edge, n)) and same(at + n - min(edge, n), sat + n - min(edge, n), min(edge, n))
    ]


def _leftovers(group: h5py.Group, sources: set[str]) -> list[str]:
    """New raw_data groups left by an interrupted run that versions still map, oldest first.

    Those no version maps are deleted; ``raw_data`` is relinked if the run died between
    unlinking it and linking the new one (step C).
    """
    found = sorted((k for k in group if k.startswith(NEW_PREFIX)), key=lambda k: int(k[len(NEW_PREFIX) :]))
    if found and "raw_data" not in group:
        group["raw_data"] = group[found[-1]]["raw_data"]
    mapped = [k for k in found if f"{group.name}/{k}/raw_data" in sources]
    for k in found:
        if k not in mapped:
            del group[k]
    if found:
        _barrier(group, "recovered")
    return mapped
