"""A version out to a plain netCDF-4 file, a Zarr store, or one netCDF file per block; files merged in.

All four run on the resplit engine (:mod:`xarray_vhdf5.resplit`): each stored
chunk of the version (or each input file) is read exactly once, and output
chunks are written once when the memory budget allows (pieces otherwise).

- :func:`export_netcdf`: the version's raw (CF-encoded) values and attributes,
  as the file stores them, into a netCDF-4 file written with h5netcdf, every
  variable in the chunks asked for (gzip and shuffle as the source's, other
  filters becoming gzip level 4, which every netCDF tool reads);
- :func:`export_zarr`: the version through ``Dataset.to_zarr(compute=False)``
  (xarray writes the metadata and encoding, the small variables), then the raw
  values of each stored variable straight into its Zarr array;
- :func:`split_version`: one netCDF-4 file per block of the given dimensions
  (``{"time": 30}``: 30 time steps a file), each variable's block an output chunk;
- :func:`merge_files`: netCDF files tiling a dataset (per day, per tile) combined
  by their coordinates (``xarray.open_mfdataset(combine="by_coords")``), each
  file one input chunk, committed as a version.

Chunks are given as ``{dimension: size}`` (``-1``: the whole dimension;
dimensions not named keep the source's chunks) or as a tuple, which applies to
the variables with that many dimensions.
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import h5py
import numpy as np
import xarray as xr

from .._backend.chunks import chunk_grid_shape
from ..errors import IncompatibleDataError
from ..resplit import (
    DEFAULT_MAX_MEM,
    ResplitCounters,
    ResplitPlan,
    default_budget,
    iter_resplit,
    parse_bytes,
    plan_resplit,
    resplit_into,
)
from ..resplit import version_chunk_reader as _version_chunk_reader

__all__ = ["ExportReport", "export_netcdf", "export_zarr", "merge_files", "split_version"]

#: Output files a split keeps open at once.
_OPEN_FILES = 16


@dataclass
class ExportReport:
    """What an export, split or merge did.

    Attributes
    ----------
    source, target : str
        The versioned file and what was written (a file, a store or a folder).
    version : str
        The version exported (or committed, for a merge).
    plans, counters : dict
        Per variable streamed: its :class:`~xarray_vhdf5.resplit.ResplitPlan` and
        :class:`~xarray_vhdf5.resplit.ResplitCounters`.
    files : list of str
        The files written by a split (or read by a merge).
    """

    source: str
    target: str
    version: str
    plans: dict[str, ResplitPlan] = field(default_factory=dict)
    counters: dict[str, ResplitCounters] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    @property
    def input_reads(self) -> int:
        """Input chunks read, over every variable."""
        return sum(c.input_reads for c in self.counters.values())

    @property
    def reads_per_input_chunk(self) -> float:
        """Reads per input chunk the plans needed (1.0: each read once)."""
        needed = sum(p.input_reads for p in self.plans.values())
        return self.input_reads / needed if needed else 0.0


def target_chunks(
    dims: Sequence[Hashable], shape: tuple[int, ...], current: tuple[int, ...], chunks
) -> tuple[int, ...]:
    """The output chunks of a variable: ``chunks`` by dimension or by position, else ``current``.

    Raises
    ------
    IncompatibleDataError
        A chunk size that is not a positive int or -1; a dict naming no dimension
        of the dataset is checked by the callers.
    """
    if chunks is None:
        wanted: Sequence = (None,) * len(dims)
    elif isinstance(chunks, Mapping):
        wanted = tuple(chunks.get(d) for d in dims)
    else:
        wanted = tuple(chunks) if len(tuple(chunks)) == len(dims) else (None,) * len(dims)
    out = []
    for w, s, c in zip(wanted, shape, current, strict=True):
        if w is None:
            out.append(max(1, min(int(c), int(s))))
        elif int(w) == -1:
            out.append(max(1, int(s)))
        elif int(w) >= 1:
            out.append(min(int(w), max(1, int(s))))
        else:
            raise IncompatibleDataError(f"chunk sizes must be positive or -1 (the whole dimension), got {chunks!r}")
    return tuple(out)


def _check_dims(chunks, dataset: xr.Dataset) -> None:
    if isinstance(chunks, Mapping):
        unknown = sorted(set(chunks) - set(dataset.dims))
        if unknown:
            raise IncompatibleDataError(
                f"chunks name dimensions {unknown} the version does not have; its dimensions: {list(dataset.dims)}"
            )


def _budget(max_mem, in_chunks, out_chunks, itemsize: int) -> int:
    if max_mem is not None:
        return parse_bytes(max_mem)
    return default_budget(in_chunks, out_chunks, itemsize)


def _open_raw(path, version, group: str | None) -> xr.Dataset:
    return xr.open_dataset(path, engine="vhdf5", version=version, group=group, decode_cf=False)


def _stored(group: h5py.Group, name: str, var: xr.Variable) -> h5py.Dataset | None:
    """The version's dataset ``name`` if the resplit can stream it (numeric, ``ndim >= 1``, stored)."""
    ds = group.get(name)
    if not isinstance(ds, h5py.Dataset) or var.ndim == 0 or var.size == 0 or var.dtype.kind not in "biufc":
        return None
    if ds.shape != var.shape or "raw_data" not in ds.attrs:
        return None
    return ds


def _filters(ds: h5py.Dataset, netcdf: bool) -> dict:
    raw = ds.file[ds.attrs["raw_data"]]
    compression, opts = raw.compression, raw.compression_opts
    if netcdf and compression not in (None, "gzip"):
        compression, opts = "gzip", 4  # lzf, blosc, zstd: not readable by every netCDF tool
    return {"compression": compression, "compression_opts": opts, "shuffle": bool(raw.shuffle)}


def _version_group(f: h5py.File, version: str, group: str | None = None) -> h5py.Group:
    """The version's group (``group``: a group inside the version, as ``engine="vhdf5"`` takes it)."""
    node = f["_version_data"]["versions"][version]
    inner = (group or "").strip("/")
    return node[inner] if inner else node


def export_netcdf(
    path: str | os.PathLike,
    target: str | os.PathLike,
    *,
    version: str | None = None,
    group: str | None = None,
    chunks=None,
    max_mem: int | str | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> ExportReport:
    """Write one version as a plain netCDF-4 file, in new chunks, each stored chunk read once.

    Parameters
    ----------
    path : str or os.PathLike
        The versioned file.
    target : str or os.PathLike
        The netCDF-4 file to write.
    version : str, optional
        A version name, branch, tag or anything ``engine="vhdf5"`` takes as
        ``version`` (default: the current version).
    group : str, optional
        A group inside the version (``engine="vhdf5"``'s ``group``); default the root.
    chunks : dict or tuple, optional
        Output chunks (points): ``{dimension: size}`` (-1: whole dimension;
        dimensions not named keep the source's chunks) or a tuple for the
        variables with that many dimensions. Default: the source's chunks.
    max_mem : int or str, optional
        Bytes each variable's resplit may hold at once (default 256 MiB, at
        least one input and one output chunk).
    overwrite : bool
        Replace ``target`` if it exists (default: refuse).
    progress : bool
        Progress bars over each variable's buffers.

    Returns
    -------
    ExportReport

    Raises
    ------
    FileExistsError
        ``target`` exists and ``overwrite`` is False.
    IncompatibleDataError
        Chunks naming dimensions the version lacks, or not positive.
    MemoryBudgetError
        ``max_mem`` below a variable's minimum (:func:`~xarray_vhdf5.resplit.minimum_memory`).
    VersionNotFoundError, NotVersionedError
        As ``xr.open_dataset(path, engine="vhdf5", version=version)`` raises them.
    """
    import h5netcdf

    raw = _open_raw(path, version, group)
    _check_dims(chunks, raw)
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(f"{target} exists; pass overwrite=True (vhdf5 export --overwrite) to replace it")
    name = raw.encoding["vhdf5_version"]
    report = ExportReport(str(path), str(target), name)
    with h5py.File(path, "r") as f, h5netcdf.File(target, "w") as out:
        node = _version_group(f, name, group)
        out.attrs.update(raw.attrs)
        for dim, size in raw.sizes.items():
            out.dimensions[dim] = size
        for vname, var in raw.variables.items():
            _netcdf_variable(out, node, str(vname), var, chunks, max_mem, report, progress)
    raw.close()
    return report


def _netcdf_variable(out, group, name: str, var: xr.Variable, chunks, max_mem, report, progress, region=None) -> None:
    """Create variable ``name`` in the open h5netcdf file ``out`` and fill it (``region``: a block of it)."""
    attrs = dict(var.attrs)
    fill = attrs.pop("_FillValue", None)
    stored = _stored(group, name, var)
    shape = var.shape if region is None else tuple(r.stop - r.start for r in region)
    if stored is None or region is not None:
        kwargs = {}
        if var.ndim and var.dtype.kind in "biufc":
            current = tuple(int(c) for c in (stored.attrs["chunks"] if stored is not None else shape))
            kwargs["chunks"] = target_chunks(var.dims, shape, current, chunks if region is None else None)
        if stored is not None:
            kwargs.update(_filters(stored, netcdf=True))
        dtype = h5py.string_dtype() if var.dtype.kind in "OU" else var.dtype
        v = out.create_variable(name, dimensions=var.dims, dtype=dtype, fillvalue=fill, **kwargs)
        v.attrs.update(attrs)
        if region is None:
            values = var.values
            v[...] = values.astype(object) if var.dtype.kind == "U" else values
        return
    current = tuple(int(c) for c in stored.attrs["chunks"])
    out_chunks = target_chunks(var.dims, var.shape, current, chunks)
    v = out.create_variable(
        name, dimensions=var.dims, dtype=var.dtype, fillvalue=fill, chunks=out_chunks, **_filters(stored, netcdf=True)
    )
    v.attrs.update(attrs)
    read_chunk, in_chunks = _version_chunk_reader(stored)
    itemsize = var.dtype.itemsize
    plan = plan_resplit(var.shape, in_chunks, out_chunks, itemsize, _budget(max_mem, in_chunks, out_chunks, itemsize))
    report.plans[name] = plan
    report.counters[name] = resplit_into(plan, read_chunk, v, progress=progress, desc=f"export {name}")


def export_zarr(
    path: str | os.PathLike,
    target,
    *,
    version: str | None = None,
    group: str | None = None,
    chunks=None,
    max_mem: int | str | None = None,
    overwrite: bool = False,
    progress: bool = False,
    zarr_format: int | None = None,
) -> ExportReport:
    """Write one version as a Zarr store, in new chunks, each stored chunk read once.

    xarray writes the store's metadata (``to_zarr(compute=False)``: CF encoding,
    dimension names, attributes) and the variables the resplit does not stream
    (coordinates held in indexes, strings, scalars); the stored numeric variables
    are then written as raw values, chunk by chunk, into their Zarr arrays: each
    whole chunk encoded with the array's own codecs in writer threads and put
    into the store by key, chunks all fill value left out, as zarr itself would
    (:func:`~xarray_vhdf5.resplit.resplit_into`). Read it back with
    ``xr.open_zarr(target)``.

    Parameters
    ----------
    path : str or os.PathLike
        The versioned file.
    target : str, os.PathLike or zarr store
        Where to write the store.
    version, group, chunks, max_mem, overwrite, progress
        As for :func:`export_netcdf`.
    zarr_format : int, optional
        2 or 3 (default: zarr-python's, 3).

    Returns
    -------
    ExportReport

    Raises
    ------
    FileExistsError
        ``target`` holds a store and ``overwrite`` is False (zarr's ``ContainsGroupError``).
    IncompatibleDataError, MemoryBudgetError, VersionNotFoundError, NotVersionedError
        As :func:`export_netcdf`.
    """
    import zarr

    # Raw values and attributes (no CF decoding): what the file stores is what the store gets.
    ds = xr.open_dataset(path, engine="vhdf5", version=version, group=group, chunks={}, decode_cf=False)
    _check_dims(chunks, ds)
    name = ds.encoding["vhdf5_version"]
    report = ExportReport(str(path), str(target), name)
    with h5py.File(path, "r") as f:
        node = _version_group(f, name, group)
        streamed, encoding = {}, {}
        for vname, var in ds.variables.items():
            stored = _stored(node, str(vname), var)
            if stored is not None and not isinstance(var, xr.IndexVariable) and stored.dtype == _raw_dtype(var):
                current = tuple(int(c) for c in stored.attrs["chunks"])
                streamed[str(vname)] = stored
                encoding[vname] = {"chunks": target_chunks(var.dims, var.shape, current, chunks)}
        ds = ds.copy()
        for vname in ds.variables:
            if vname not in streamed and not isinstance(ds.variables[vname], xr.IndexVariable):
                ds[vname] = ds[vname].load()  # written by xarray now
        mode: Literal["w", "w-"] = "w" if overwrite else "w-"
        # Consolidated metadata, as xarray's to_zarr writes by default, so that
        # xr.open_zarr reads one key and does not warn; zarr-python's warning that
        # Zarr v3 has no consolidated metadata in its spec is for the writer, who
        # chose it here.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")
            ds.to_zarr(
                target,
                mode=mode,
                compute=False,
                encoding=encoding,
                safe_chunks=False,
                zarr_format=zarr_format,
                consolidated=True,
            )
        root = zarr.open_group(target, mode="r+")
        for vname, stored in streamed.items():
            arr = root[vname]
            assert isinstance(arr, zarr.Array)  # to_zarr just made it an array
            if arr.dtype != stored.dtype:  # pragma: no cover - guarded by _raw_dtype above
                raise IncompatibleDataError(f"{vname}: Zarr array of {arr.dtype}, stored values of {stored.dtype}")
            read_chunk, in_chunks = _version_chunk_reader(stored)
            out_chunks = encoding[vname]["chunks"]
            itemsize = stored.dtype.itemsize
            budget = _budget(max_mem, in_chunks, out_chunks, itemsize)
            plan = plan_resplit(stored.shape, in_chunks, out_chunks, itemsize, budget)
            report.plans[vname] = plan
            report.counters[vname] = resplit_into(plan, read_chunk, arr, progress=progress, desc=f"export {vname}")
    ds.close()
    return report


def _raw_dtype(var: xr.Variable) -> np.dtype:
    """The dtype xarray encodes ``var`` to (its ``encoding["dtype"]``, else its own)."""
    return np.dtype(var.encoding.get("dtype", var.dtype))


class _OpenFiles:
    """The split's output files, a few kept open (least recently used closed first)."""

    def __init__(self, limit: int = _OPEN_FILES):
        self.limit = limit
        self.files: OrderedDict[str, Any] = OrderedDict()

    def get(self, path: str):
        import h5netcdf

        f = self.files.pop(path, None)
        if f is None:
            f = h5netcdf.File(path, "a")
            while len(self.files) >= self.limit:
                self.files.popitem(last=False)[1].close()
        self.files[path] = f
        return f

    def close(self) -> None:
        while self.files:
            self.files.popitem()[1].close()


def split_version(
    path: str | os.PathLike,
    folder: str | os.PathLike,
    blocks: Mapping[Any, int],
    *,
    version: str | None = None,
    group: str | None = None,
    max_mem: int | str | None = None,
    prefix: str | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> ExportReport:
    """Write one version as one netCDF-4 file per block of ``blocks`` (e.g. ``{"time": 30}``).

    Each file holds every variable: those along the split dimensions cut to its
    block, the others whole. Each variable's block is an output chunk of one
    resplit, so each stored chunk is read once; inside the files, variables
    keep the source's chunks (trimmed to the block).

    Parameters
    ----------
    path : str or os.PathLike
        The versioned file.
    folder : str or os.PathLike
        Folder of the files (created); files are named
        ``<prefix>_<dim><index>[_<dim><index>...].nc``, indices zero-padded.
    blocks : dict
        ``{dimension: points per file}`` for the dimensions to split along.
    version, group, max_mem, overwrite, progress
        As for :func:`export_netcdf`.
    prefix : str, optional
        Default: the versioned file's stem.

    Returns
    -------
    ExportReport
        ``files`` lists the files written, in block order.

    Raises
    ------
    IncompatibleDataError
        ``blocks`` empty, naming dimensions the version lacks, or sizes not positive.
    FileExistsError
        A file to write exists and ``overwrite`` is False.
    """
    import h5netcdf

    raw = _open_raw(path, version, group)
    if not blocks:
        raise IncompatibleDataError("split needs the points per file of at least one dimension, e.g. {'time': 30}")
    _check_dims(blocks, raw)
    if any(int(n) < 1 for n in blocks.values()):
        raise IncompatibleDataError(f"points per file must be positive, got {dict(blocks)}")
    name = raw.encoding["vhdf5_version"]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    prefix = prefix or Path(path).stem
    split_dims = [d for d in raw.dims if d in blocks]
    per_dim = chunk_grid_shape(tuple(raw.sizes[d] for d in split_dims), tuple(int(blocks[d]) for d in split_dims))
    counts = dict(zip(split_dims, per_dim, strict=True))
    width = {d: len(str(counts[d] - 1)) for d in split_dims}

    def file_of(block: Mapping[Hashable, int]) -> str:
        parts = "_".join(f"{d}{block[d]:0{width[d]}d}" for d in split_dims)
        return str(folder / f"{prefix}_{parts}.nc")

    def extent(d: Hashable, i: int) -> slice:
        n = int(blocks[d])
        return slice(i * n, min((i + 1) * n, raw.sizes[d]))

    report = ExportReport(str(path), str(folder), name)
    grid = [range(counts[d]) for d in split_dims]
    for block in np.ndindex(*[len(r) for r in grid]):
        target = file_of(dict(zip(split_dims, block, strict=True)))
        if os.path.exists(target) and not overwrite:
            raise FileExistsError(f"{target} exists; pass overwrite=True (vhdf5 export --overwrite) to replace it")
        report.files.append(target)
    with h5py.File(path, "r") as f:
        node = _version_group(f, name, group)
        # every file: dimensions, attributes, the variables along no split dimension
        for block, target in zip(np.ndindex(*[len(r) for r in grid]), report.files, strict=True):
            where = dict(zip(split_dims, block, strict=True))
            with h5netcdf.File(target, "w") as out:
                out.attrs.update(raw.attrs)
                for dim, size in raw.sizes.items():
                    s = extent(dim, where[dim]) if dim in where else slice(0, size)
                    out.dimensions[dim] = s.stop - s.start
                for vname, var in raw.variables.items():
                    region = tuple(extent(d, where[d]) if d in where else slice(0, n) for d, n in var.sizes.items())
                    along = any(d in where for d in var.dims)
                    _netcdf_variable(
                        out, node, str(vname), var, None, max_mem, report, False, region if along else None
                    )
        # the variables along split dimensions: one resplit each, an output chunk per file
        files = _OpenFiles()
        try:
            for vname, var in raw.variables.items():
                if not any(d in split_dims for d in var.dims):
                    continue
                vname = str(vname)
                out_chunks = tuple(int(blocks[d]) if d in blocks else n for d, n in var.sizes.items())
                stored = _stored(node, vname, var)
                if stored is not None:
                    read_chunk, in_chunks = _version_chunk_reader(stored)
                else:  # strings, unstored: the values, read once
                    values = var.values
                    in_chunks = tuple(max(1, n) for n in var.shape)

                    def read_chunk(index, values=values):
                        return values

                itemsize = max(var.dtype.itemsize, 1)
                plan = plan_resplit(
                    var.shape, in_chunks, out_chunks, itemsize, _budget(max_mem, in_chunks, out_chunks, itemsize)
                )
                counters = ResplitCounters()
                for w in iter_resplit(
                    plan,
                    read_chunk,
                    var.dtype,
                    pieces=True,
                    counters=counters,
                    progress=progress,
                    desc=f"split {vname}",
                ):
                    at = {d: w.chunk[k] for k, d in enumerate(var.dims) if d in split_dims}
                    full = dict.fromkeys(split_dims, 0)
                    full.update(at)
                    for target in _targets(full, split_dims, var.dims, counts, file_of):
                        local = tuple(
                            slice(r.start - extent(d, at[d]).start, r.stop - extent(d, at[d]).start) if d in at else r
                            for d, r in zip(var.dims, w.region, strict=True)
                        )
                        data = w.data.astype(object) if var.dtype.kind == "U" else w.data
                        files.get(target).variables[vname][local] = data
                report.plans[vname] = plan
                report.counters[vname] = counters
        finally:
            files.close()
    raw.close()
    return report


def _targets(block: dict, split_dims: list, var_dims, counts: dict, file_of) -> list[str]:
    """Files receiving a block of a variable: every block of the split dimensions it does not have."""
    missing = [d for d in split_dims if d not in var_dims]
    out = []
    for rest in np.ndindex(*[counts[d] for d in missing]):
        b = dict(block)
        b.update(zip(missing, rest, strict=True))
        out.append(file_of(b))
    return out


def merge_files(
    files: str | os.PathLike | Sequence[str | os.PathLike],
    path: str | os.PathLike,
    version: str | None = None,
    *,
    chunks=None,
    max_mem: int | str = DEFAULT_MAX_MEM,
    pattern: str = "*.nc",
    progress: bool = False,
    **commit_kwargs,
) -> ExportReport:
    """Commit netCDF files that tile one dataset (per day, per tile) as a version, each file read once.

    The files are combined by their coordinates
    (``xarray.open_mfdataset(combine="by_coords")``), each variable of each file
    one block (one input chunk, read once), and committed on the resplit
    engine (:class:`~xarray_vhdf5.xr._resplit_source.ResplitChunkSource`).

    Parameters
    ----------
    files : path or sequence of paths
        The files, or a folder (its files matching ``pattern``, sorted).
    path : str or os.PathLike
        The versioned file (created if missing).
    version : str, optional
        The new version's name (default: the next ``r<n>``).
    chunks : dict or tuple, optional
        HDF5 chunks of the new variables (as for :func:`export_netcdf`); default:
        those of an existing dataset, else the first file's, else chosen.
    max_mem : int or str
        Bytes the resplit of each variable may hold at once.
    pattern : str
        Glob of the files in a folder.
    progress : bool
        Progress bars.
    **commit_kwargs
        Passed to :func:`~xarray_vhdf5.xr._writer.commit_dataset` (``message``,
        ``prev_version``, ``timestamp``...).

    Returns
    -------
    ExportReport
        ``files`` are the files read; ``plans``/``counters`` per variable streamed.

    Raises
    ------
    FileNotFoundError
        No file to merge.
    IncompatibleDataError, MemoryBudgetError
        As the commit and the planner raise them.
    """
    from ._resplit_source import ResplitBudget
    from ._writer import commit_dataset

    if isinstance(files, (str, os.PathLike)) and Path(files).is_dir():
        paths = sorted(str(p) for p in Path(files).glob(pattern))
    elif isinstance(files, (str, os.PathLike)):
        paths = [str(files)]
    else:
        paths = [str(p) for p in files]
    if not paths:
        raise FileNotFoundError(f"no files to merge in {files!s} (pattern {pattern!r})")
    parse_bytes(max_mem)
    combined = xr.open_mfdataset(paths, combine="by_coords", chunks=-1, decode_times=False, data_vars="all")
    _check_dims(chunks, combined)
    if chunks is not None:
        for var in combined.variables.values():
            if var.ndim:
                current = var.encoding.get("chunksizes") or var.shape
                var.encoding["chunksizes"] = target_chunks(var.dims, var.shape, tuple(current), chunks)
                var.encoding.pop("chunks", None)
                var.encoding.pop("preferred_chunks", None)
    budget = ResplitBudget(max_mem)
    try:
        name = commit_dataset(combined, path, version, max_mem=budget, progress=progress, **commit_kwargs)
    finally:
        combined.close()
    report = ExportReport(str(path), str(path), name, files=paths)
    for src in budget.sources:
        if src.plan is not None:
            report.plans[str(src.name)] = src.plan
            report.counters[str(src.name)] = src.counters
    return report
