"""The ``vhdf5`` command line (click): ``demo``, ``log``, ``diff``."""

from __future__ import annotations

import sys

import click
import h5py

from ..errors import VHDF5Error

__all__ = ["cli", "format_diff", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="xarray_vhdf5")
def cli() -> None:
    """Git-like version history for HDF5 files (versioned-hdf5 format), native to xarray."""


@cli.command()
@click.option("--source", type=click.Path(exists=True, dir_okay=False), default=None,
              help="netCDF/HDF5 file with a record dimension (default: the shipped NOAA COADS subset).")
@click.option("--out", type=click.Path(dir_okay=False), default="vhdf5-demo.h5", show_default=True,
              help="Versioned HDF5 file to create.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
def demo(source: str | None, out: str, force: bool) -> None:
    """Ingest a climate file one record step per version, QC-correct it, and verify every version."""
    import os

    from .demo import run_demo

    if force and os.path.exists(out):
        os.remove(out)
    try:
        run_demo(source, out, echo=click.echo, progress=sys.stderr.isatty())
    except (ValueError, FileExistsError) as err:
        raise click.ClickException(str(err)) from None


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
def log(file: str) -> None:
    """Print the version history of FILE: name, timestamp, parent, new chunks and bytes."""
    from ..versions.history import version_log
    from .log import format_log

    try:
        with h5py.File(file, "r") as f:
            click.echo(format_log(version_log(f)))
    except (VHDF5Error, OSError) as err:
        raise click.ClickException(str(err)) from None


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("a")
@click.argument("b")
@click.option("--group", default=None, help="Compare only this group of both versions (and its subgroups).")
@click.option("--mappings-only", is_flag=True,
              help="Compare the chunk mappings only: read no data (no changed-point counts).")
def diff(file: str, a: str, b: str, group: str | None, mappings_only: bool) -> None:
    """Show what changed from version A to version B of FILE: datasets, chunks and points.

    Chunks with the same mapping in both versions are not read; only the others
    are, and compared point by point (NaN equals NaN).
    """
    from ..versions.diff import diff_versions
    from ..xr.names import is_netcdf_dimension_only

    try:
        with h5py.File(file, "r") as f:
            diffs = diff_versions(f, a, b, group=group, values=not mappings_only, skip=is_netcdf_dimension_only)
    except (VHDF5Error, OSError, KeyError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        raise click.ClickException(str(message)) from None
    click.echo(format_diff(diffs.values(), a, b))


def format_diff(diffs, a: str, b: str) -> str:
    """The per-dataset diff as an aligned text table (see ``vhdf5 diff``)."""

    def shape(s):
        return "-" if s is None else str(tuple(int(n) for n in s))

    def count(n):
        return "?" if n is None else str(n)

    header = ("dataset", "status", f"shape {a}", f"shape {b}", "chunks read/total", "chunks changed",
              "points changed", "points removed")
    rows = [header]
    changed = 0
    for d in diffs:
        changed += d.status != "unchanged"
        rows.append((
            d.path, d.status, shape(d.shape_a), shape(d.shape_b),
            f"{len(d.candidates) if d.status == 'modified' else 0}/{d.chunks_total}",
            count(d.chunks_changed), count(d.points_changed), str(d.points_removed),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"{changed} of {len(rows) - 1} datasets differ from {a} to {b}")
    return "\n".join(lines)


def main() -> None:
    """Entry point of the ``vhdf5`` console script."""
    cli()
