"""The ``vhdf5`` command line (click)."""

from __future__ import annotations

import sys

import click
import h5py

from ..errors import VHDF5Error

__all__ = ["main", "cli"]


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


def main() -> None:
    """Entry point of the ``vhdf5`` console script."""
    cli()
