"""Rechunk, export and split verbs of the ``.vhdf5`` Dataset accessor (the resplit engine).

They act on the file and version a Dataset was opened from
(``encoding["source"]``, ``encoding["vhdf5_version"]``); the work is done by
:func:`xarray_vhdf5._versions.rechunk` and :mod:`xarray_vhdf5.xr._export`.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import xarray as xr

from .._versions.mutation import open_file
from .._versions.rechunk import RechunkReport, rechunk
from ..errors import IncompatibleDataError
from ._export import ExportReport, export_netcdf, export_zarr, split_version

__all__ = ["ChunkVerbs"]


class ChunkVerbs:
    """Mixed into the Dataset accessor; it provides ``_ds``, ``_encoding`` and ``_opened(what)``."""

    _ds: xr.Dataset

    if TYPE_CHECKING:  # what the accessor provides

        def _opened(self, what: str) -> str: ...

    def rechunk(
        self,
        chunks: Mapping[Hashable, int] | tuple[int, ...],
        *,
        variables: Iterable[Hashable] | None = None,
        max_mem: int | str | None = None,
        progress: bool = False,
        in_place: bool = True,
    ) -> xr.Dataset:
        """Give variables new chunks in every version of the file, each stored chunk read once per version.

        The file's history is rewritten in place (one chunk shape per dataset in
        all versions: see :mod:`xarray_vhdf5._versions.rechunk`); every version
        reads the same values before and after, and versioned-hdf5 reads the
        file as after its own ``modify_metadata(chunks=)``.

        Parameters
        ----------
        chunks : dict or tuple
            ``{dimension: points}`` (-1: the whole dimension; dimensions not named
            keep their size), or a tuple for the variables with that many dimensions.
        variables : iterable of str, optional
            Which variables (default: the data variables having a dimension named
            in ``chunks``, or, for a tuple, of its length).
        max_mem : int or str, optional
            Bytes each version's resplit may hold at once (``"512MB"``; default
            256 MiB, at least the plan's minimum).
        progress : bool
            Progress bars over each version's buffers.
        in_place : bool
            True: the new chunks take the old ones' bytes (the file keeps its size;
            the old chunks are copied aside first, so the data is written twice).
            False: they are written once, after the end of the file, which grows by
            them (see :func:`~xarray_vhdf5._versions.rechunk.rechunk`).

        Returns
        -------
        xarray.Dataset
            The same version reopened (lazily) from the rewritten file; its
            ``encoding["vhdf5_rechunk"]`` maps each variable to its
            :class:`~xarray_vhdf5._versions.rechunk.RechunkReport`.

        Raises
        ------
        ValueError
            Not opened with ``engine="vhdf5"`` from a path.
        IncompatibleDataError
            No variable to rechunk, a variable the version does not store, or chunk
            sizes that are not positive.
        MemoryBudgetError
            ``max_mem`` below a plan's minimum (nothing is rewritten for that variable).
        FileBusyError
            Another writer holds the file past the lock timeout.
        """
        path = self._opened("rechunk")
        ds = self._ds
        names = _chosen(ds, chunks, variables)
        group = _group_of(ds) or ""
        reports: dict[str, RechunkReport] = {}
        with open_file(path, "r+") as f:
            for name in names:
                var = ds[name]
                per_var = {d: chunks.get(d) for d in var.dims} if isinstance(chunks, Mapping) else tuple(chunks)
                spec = tuple(per_var[d] for d in var.dims) if isinstance(per_var, dict) else per_var
                full = f"{group}/{name}" if group else str(name)
                reports[str(name)] = rechunk(f, full, spec, max_mem=max_mem, progress=progress, in_place=in_place)
        out = xr.open_dataset(
            path,
            engine="vhdf5",
            version=self._ds.encoding["vhdf5_version"],
            group=group or None,
            decode_times=self._ds.encoding.get("vhdf5_decode_times", True),
        )
        out.encoding["vhdf5_rechunk"] = reports
        return out

    def export(
        self,
        target: str | os.PathLike,
        *,
        chunks: Mapping[Hashable, int] | tuple[int, ...] | None = None,
        format: str | None = None,
        max_mem: int | str | None = None,
        overwrite: bool = False,
        progress: bool = False,
    ) -> ExportReport:
        """Write the version this Dataset was opened from as a netCDF-4 file or a Zarr store.

        Each stored chunk is read once (:mod:`xarray_vhdf5.xr._export`); the
        Dataset's own (lazy) values are not used: the version's stored values
        and attributes are written as the file holds them.

        Parameters
        ----------
        target : str or os.PathLike
            ``*.nc`` / ``*.h5`` for netCDF-4, ``*.zarr`` for Zarr (or ``format``).
        chunks : dict or tuple, optional
            Output chunks as for :meth:`rechunk`; default: the stored chunks.
        format : {"netcdf", "zarr"}, optional
            Default: from the suffix of ``target``.
        max_mem, progress
            As for :meth:`rechunk`.
        overwrite : bool
            Replace ``target`` (default: refuse if it exists).

        Returns
        -------
        ExportReport

        Raises
        ------
        ValueError
            Not opened with ``engine="vhdf5"`` from a path; an unknown ``format``.
        FileExistsError
            ``target`` exists and ``overwrite`` is False.
        IncompatibleDataError, MemoryBudgetError
            As :func:`~xarray_vhdf5.xr._export.export_netcdf` raises them.
        """
        path = self._opened("export")
        kind = format or ("zarr" if str(target).rstrip("/").endswith(".zarr") else "netcdf")
        version = self._ds.encoding["vhdf5_version"]
        group = _group_of(self._ds)
        options: dict[str, Any] = dict(chunks=chunks, max_mem=max_mem, overwrite=overwrite, progress=progress)
        if kind == "netcdf":
            return export_netcdf(path, target, version=version, group=group, **options)
        if kind == "zarr":
            return export_zarr(path, target, version=version, group=group, **options)
        raise ValueError(f"format must be 'netcdf' or 'zarr', got {format!r}")

    def split(
        self,
        folder: str | os.PathLike,
        blocks: Mapping[Any, int],
        *,
        max_mem: int | str | None = None,
        overwrite: bool = False,
        progress: bool = False,
    ) -> ExportReport:
        """Write the version as one netCDF-4 file per block (``{"time": 30}``: 30 steps a file).

        See :func:`~xarray_vhdf5.xr._export.split_version`.

        Raises
        ------
        ValueError
            Not opened with ``engine="vhdf5"`` from a path.
        IncompatibleDataError, FileExistsError, MemoryBudgetError
            As :func:`~xarray_vhdf5.xr._export.split_version` raises them.
        """
        path = self._opened("split")
        return split_version(
            path,
            folder,
            blocks,
            version=self._ds.encoding["vhdf5_version"],
            group=_group_of(self._ds),
            max_mem=max_mem,
            overwrite=overwrite,
            progress=progress,
        )


def _group_of(ds: xr.Dataset) -> str | None:
    """The group inside the version this Dataset was opened from (None: the root)."""
    return (ds.encoding.get("vhdf5_group") or "/").strip("/") or None


def _chosen(ds: xr.Dataset, chunks, variables) -> list[Hashable]:
    """The variables a rechunk applies to (see :meth:`ChunkVerbs.rechunk`)."""
    if isinstance(chunks, Mapping):
        unknown = sorted(map(str, set(chunks) - set(ds.dims)))
        if unknown:
            raise IncompatibleDataError(
                f"chunks name dimensions {unknown} the Dataset does not have; its dimensions: {list(ds.dims)}"
            )
    if variables is not None:
        names = list(variables)
        missing = [n for n in names if n not in ds.variables]
        if missing:
            raise IncompatibleDataError(f"no variables {missing} in this Dataset; it has {list(ds.variables)}")
    elif isinstance(chunks, Mapping):
        names = [n for n, v in ds.data_vars.items() if set(v.dims) & set(chunks)]
    else:
        names = [n for n, v in ds.data_vars.items() if v.ndim == len(tuple(chunks))]
    if not names:
        raise IncompatibleDataError(f"no variable to rechunk with chunks {chunks!r}")
    return names
