"""``vhdf5 rechunk``, ``vhdf5 export`` (``--split``) and ``vhdf5 ingest``: the resplit engine's commands.

``rechunk`` is :func:`xarray_vhdf5._versions.rechunk`; ``export`` is
:func:`~xarray_vhdf5.xr._export.export_netcdf`, :func:`~xarray_vhdf5.xr._export.export_zarr`
or :func:`~xarray_vhdf5.xr._export.split_version`; ``ingest`` is
:func:`~xarray_vhdf5.xr._export.merge_files`. Each prints the plan and the
counters (reads per input chunk, writes, peak buffer bytes).
"""

from __future__ import annotations

import sys

import click

from ..errors import VHDF5Error

__all__ = ["export", "ingest", "parse_chunks", "rechunk"]

_CHUNKS_HELP = (
    "New chunks, points: '365,16,16' (one per axis; -1 the whole axis) or 'time=365,lat=16' "
    "(by dimension; others keep theirs)."
)
_MEM_HELP = "Memory budget of the resplit: bytes or '512MB', '2GiB'."


def parse_chunks(text: str | None) -> dict[str, int] | tuple[int, ...] | None:
    """``"365,16,16"`` -> ``(365, 16, 16)``; ``"time=365,lat=16"`` -> ``{"time": 365, "lat": 16}``.

    Raises
    ------
    click.BadParameter
        Sizes that are not integers, or a mix of both forms.
    """
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        if all("=" in p for p in parts):
            return {k.strip(): int(v) for k, v in (p.split("=", 1) for p in parts)}
        if any("=" in p for p in parts):
            raise ValueError("mixed")
        return tuple(int(p) for p in parts)
    except ValueError:
        raise click.BadParameter(
            f"expected sizes such as 365,16,16 or time=365,lat=16, got {text!r}", param_hint="--chunks"
        ) from None


def _summary(name: str, plan, counters) -> str:
    reads = counters.input_reads / plan.input_reads if plan.input_reads else 0.0
    return (
        f"{name}: buffer {plan.buffer_shape} (input aggregate {plan.aggregate_shape}), "
        f"{counters.input_reads} input chunks read ({reads:.2f} per chunk), "
        f"{counters.chunk_writes} chunks + {counters.piece_writes} pieces written, "
        f"peak {counters.peak_buffer_bytes / 2**20:.1f} MiB (predicted {plan.predicted_peak / 2**20:.1f}), "
        f"seeks {plan.seeks} (one chunk at a time: {plan.naive_seeks})"
    )


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("variables", nargs=-1, required=True)
@click.option("--chunks", required=True, help=_CHUNKS_HELP)
@click.option("--max-mem", default=None, help=_MEM_HELP + " Default 256 MiB.")
@click.option("--dry-run", is_flag=True, help="Print each variable's plan (its largest version) and write nothing.")
@click.option(
    "--in-place/--grow",
    default=True,
    help="In place (default): the new chunks take the old ones' bytes and the file keeps its size, "
    "the old chunks copied aside first for crash safety (the data written twice). --grow: the new "
    "chunks written once, after the end of the file, which grows by them (the old bytes are free "
    "inside it; 'vhdf5 repack' gives them back).",
)
def rechunk(
    file: str, variables: tuple[str, ...], chunks: str, max_mem: str | None, dry_run: bool, in_place: bool
) -> None:
    """Give VARIABLES of FILE new chunks in every version, each stored chunk read once per version.

    \b
    The format keeps one chunk shape per dataset in all versions (versioned-hdf5
    reads and writes one raw_data per dataset), so the whole history is
    rewritten, deduplicated, into the old raw_data's space (or, with --grow,
    after the end of the file); every version reads the same values after.
    Example: vhdf5 rechunk sst.h5 sst --chunks 365,16,16
    """
    from .._versions.mutation import open_file
    from .._versions.rechunk import dimension_names
    from .._versions.rechunk import rechunk as rechunk_history

    spec = parse_chunks(chunks)
    if dry_run:
        _print_plans(file, variables, spec, max_mem)
        return
    try:
        with open_file(file, "r+") as f:
            for name in variables:
                wanted = spec
                if isinstance(spec, dict):
                    dims = dimension_names(f, name.strip("/"))
                    if dims is None:
                        raise click.ClickException(f"{name} has no named dimensions; give --chunks by position")
                    wanted = {d: v for d, v in spec.items() if d in dims}
                report = rechunk_history(
                    f, name, wanted, max_mem=max_mem, progress=sys.stderr.isatty(), in_place=in_place
                )
                click.echo(
                    f"{report.dataset}: chunks {report.chunks_before} -> {report.chunks_after} in "
                    f"{len(report.versions)} versions; stored chunks {report.stored_before} -> "
                    f"{report.stored_after}; {report.counters.input_reads} chunks read "
                    f"({report.reads_per_input_chunk:.2f} per needed chunk), peak "
                    f"{report.counters.peak_buffer_bytes / 2**20:.1f} MiB"
                )
    except (VHDF5Error, OSError) as err:
        raise click.ClickException(str(err)) from None


def _print_plans(file: str, variables: tuple[str, ...], spec, max_mem: str | None) -> None:
    """``vhdf5 rechunk --dry-run``: each variable's plan, the file opened read-only."""
    from .._backend.signature import open_h5file
    from .._versions.rechunk import dimension_names, rechunk_plan

    try:
        with open_h5file(file, "r") as f:
            for name in variables:
                wanted = spec
                if isinstance(spec, dict):
                    dims = dimension_names(f, name.strip("/")) or ()
                    wanted = {d: v for d, v in spec.items() if d in dims}
                click.echo(f"{name}: {rechunk_plan(f, name, wanted, max_mem=max_mem)!r}")
    except (VHDF5Error, OSError) as err:
        raise click.ClickException(str(err)) from None


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--to", "target", required=True, help="out.nc (netCDF-4), out.zarr (Zarr), or a folder with --split.")
@click.option("--version", "version", default=None, help="Version, branch or tag (default: the current version).")
@click.option("--chunks", default=None, help=_CHUNKS_HELP)
@click.option("--split", default=None, help="One netCDF file per block: 'time=30' (30 steps a file), 'time=1,lat=90'.")
@click.option("--max-mem", default=None, help=_MEM_HELP + " Default 256 MiB.")
@click.option("--overwrite", is_flag=True, help="Replace what is at --to.")
def export(
    file: str,
    target: str,
    version: str | None,
    chunks: str | None,
    split: str | None,
    max_mem: str | None,
    overwrite: bool,
) -> None:
    """Write one version of FILE as a plain netCDF-4 file, a Zarr store or one file per block.

    \b
    Each stored chunk is read once; output chunks are written once when --max-mem
    allows. Examples:
      vhdf5 export sst.h5 --version 2024-06-01 --chunks time=365,lat=16,lon=16 --to sst.nc
      vhdf5 export sst.h5 --to sst.zarr --chunks 365,16,16
      vhdf5 export sst.h5 --split time=30 --to monthly/
    """
    from ..xr._export import export_netcdf, export_zarr, split_version

    spec = parse_chunks(chunks)
    progress = sys.stderr.isatty()
    try:
        if split is not None:
            blocks = parse_chunks(split)
            if not isinstance(blocks, dict):
                raise click.BadParameter("give blocks by dimension, e.g. time=30", param_hint="--split")
            if spec is not None:
                raise click.UsageError("--split keeps the stored chunks; give --chunks or --split, not both")
            report = split_version(
                file, target, dict(blocks), version=version, max_mem=max_mem, overwrite=overwrite, progress=progress
            )
        elif target.rstrip("/").endswith(".zarr"):
            report = export_zarr(
                file, target, version=version, chunks=spec, max_mem=max_mem, overwrite=overwrite, progress=progress
            )
        else:
            report = export_netcdf(
                file, target, version=version, chunks=spec, max_mem=max_mem, overwrite=overwrite, progress=progress
            )
    except (VHDF5Error, OSError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    for name, plan in report.plans.items():
        click.echo(_summary(name, plan, report.counters[name]))
    written = f"{len(report.files)} files in {target}" if report.files else target
    click.echo(f"version {report.version} -> {written}")


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--into", "path", required=True, type=click.Path(dir_okay=False), help="The versioned file.")
@click.option("--version", "version", default=None, help="Name of the new version (default: the next r<n>).")
@click.option("--chunks", default=None, help="HDF5 chunks of the variables (default: the files').")
@click.option("--max-mem", default="256MiB", show_default=True, help=_MEM_HELP)
@click.option("--pattern", default="*.nc", show_default=True, help="Files of a folder to take.")
@click.option("--message", default=None, help="The version's message.")
def ingest(
    files: tuple[str, ...],
    path: str,
    version: str | None,
    chunks: str | None,
    max_mem: str,
    pattern: str,
    message: str | None,
) -> None:
    """Merge netCDF FILES (or a folder of them) tiling one dataset into one new version of --into.

    \b
    The files (per day, per tile) are combined by their coordinates, as
    xarray.open_mfdataset(combine="by_coords") does; each file is read once.
    Example: vhdf5 ingest daily/ --into sst.h5 --version 2024-06 --chunks time=365,lat=16,lon=16
    """
    from ..xr._export import merge_files

    sources: str | list[str] = files[0] if len(files) == 1 else list(files)
    try:
        report = merge_files(
            sources,
            path,
            version,
            chunks=parse_chunks(chunks),
            max_mem=max_mem,
            pattern=pattern,
            progress=sys.stderr.isatty(),
            message=message,
        )
    except (VHDF5Error, OSError, ValueError) as err:
        raise click.ClickException(str(err)) from None
    for name, plan in report.plans.items():
        click.echo(_summary(name, plan, report.counters[name]))
    click.echo(f"{len(report.files)} files -> version {report.version} of {path}")
