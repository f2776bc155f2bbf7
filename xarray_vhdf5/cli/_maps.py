"""``vhdf5 fill-maps FILE``: chunk maps for versions another writer committed.

:func:`xarray_vhdf5._versions.mapfill.fill_chunk_maps`, with a tqdm bar on a terminal.
"""

from __future__ import annotations

import sys

import click

from ..errors import VHDF5Error

__all__ = ["fill_maps"]


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
def fill_maps(file: str) -> None:
    """Store the chunk maps of FILE's versions that lack them (committed by versioned-hdf5).

    \b
    This package's commits store each version's chunk maps, so that opening a
    version and reading a point's history do not make libhdf5 decode every
    mapping of its virtual datasets. Versions committed by versioned-hdf5
    have none: this stores them once, in journaled batches of about a quarter
    of a second under FILE's write lock (readers and writers go in between).
    Nothing else changes; versioned-hdf5 reads and writes FILE as before.
    """
    from .._versions.mapfill import fill_chunk_maps
    from ._check import progress_bar

    update, close = progress_bar(sys.stderr.isatty(), unit="version", desc="chunk maps")
    try:
        report = fill_chunk_maps(file, progress=update)
    except (VHDF5Error, OSError) as err:
        raise click.ClickException(str(err)) from None
    finally:
        close()
    click.echo(
        f"{file}: {report.versions} versions; stored {report.stored} chunk maps, {report.present} were there already"
    )
    for where, why in report.skipped.items():
        click.echo(f"  skipped {where}: {why}")
