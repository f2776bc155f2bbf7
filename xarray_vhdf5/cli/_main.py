"""The ``vhdf5`` command line (click): ``demo``, ``log``, ``diff``, ``check``, ``refs``, ``rechunk``, ``export``.

Tables are formatted in :mod:`.log` and :mod:`.diff`; FILE is opened by
:func:`xarray_vhdf5._backend.signature.open_h5file` (a clear error for a file that is not HDF5)."""

from __future__ import annotations

import importlib
import sys

import click

from .._backend.signature import open_h5file
from ..errors import VHDF5Error
from ._log import LOG_HELP

__all__ = ["cli", "main"]

#: Appended to the message for a FILE that is not HDF5.
_NOT_VERSIONED_HINT = (
    "hence not a versioned HDF5 file; to version its data, open it with xarray and commit it "
    "(ds.vhdf5.commit(version, path=...))"
)


#: The commands defined in other modules of this package: name -> (module, function).
_ELSEWHERE = {
    "branch": ("_branches", "branch"),
    "check": ("_check", "check"),
    "cherry-pick": ("_branches", "cherry_pick"),
    "expire": ("_repack", "expire"),
    "export": ("_rechunk", "export"),
    "fill-maps": ("_maps", "fill_maps"),
    "ingest": ("_rechunk", "ingest"),
    "merge": ("_branches", "merge"),
    "rechunk": ("_rechunk", "rechunk"),
    "refs": ("_refs", "refs"),
    "repack": ("_repack", "repack"),
    "tag": ("_branches", "tag"),
}


class _LazyGroup(click.Group):
    """A group that imports the module of a command in :data:`_ELSEWHERE` only when that command runs.

    click's documented pattern for lazily loaded subcommands ("Advanced
    Patterns"): ``vhdf5 log`` then loads neither the merge nor the rechunk
    machinery, whose imports would cost more than reading a log of 1000 versions.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_ELSEWHERE})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _ELSEWHERE and cmd_name not in self.commands:
            module, name = _ELSEWHERE[cmd_name]
            command = getattr(importlib.import_module(f"{__package__}.{module}"), name)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="xarray_vhdf5")
def cli() -> None:
    """Git-like version history for HDF5 files (versioned-hdf5 format), native to xarray."""


@cli.command()
@click.option(
    "--source",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="netCDF/HDF5 file with a record dimension (default: the shipped NOAA COADS subset).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default="vhdf5-demo.h5",
    show_default=True,
    help="Versioned HDF5 file to create.",
)
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
def demo(source: str | None, out: str, force: bool) -> None:
    """Ingest a climate file one record step per version, QC-correct it, and verify every version."""
    import os

    from ._demo import run_demo

    if force and os.path.exists(out):
        os.remove(out)
    try:
        run_demo(source, out, echo=click.echo, progress=sys.stderr.isatty())
    except (ValueError, FileExistsError) as err:
        raise click.ClickException(str(err)) from None


@cli.command(help=LOG_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--graph", is_flag=True, help="Draw the version DAG newest first, with branches and tags.")
def log(file: str, graph: bool) -> None:
    """``vhdf5 log FILE`` (its help text is :data:`xarray_vhdf5.cli._log.LOG_HELP`)."""
    from .._versions import refs as version_refs
    from .._versions.history import version_log
    from ._log import format_graph, format_log

    try:
        with open_h5file(file, "r", hint=_NOT_VERSIONED_HINT) as f:
            if graph:
                entries = version_log(f, variables_only=True)
                click.echo(format_graph(entries, version_refs.list_branches(f), version_refs.list_tags(f)))
            else:
                click.echo(format_log(version_log(f)))
    except (VHDF5Error, OSError, KeyError, RuntimeError) as err:
        raise _read_failed(file, err) from None


def _read_failed(file: str, err: Exception) -> click.ClickException:
    """The command's error for what reading ``file`` raised: damage said as such, with what to run.

    Raises ``err`` again when it is a ``RuntimeError`` that does not say the
    file is damaged (a defect, shown with its traceback).
    """
    from .._versions.check import corrupt_file_error

    damage = corrupt_file_error(file, err)  # its message says what to run
    if damage is not None:
        return click.ClickException(str(damage))
    if isinstance(err, RuntimeError):
        raise err
    message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
    return click.ClickException(str(message))


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("a")
@click.argument("b")
@click.option("--group", default=None, help="Compare only this group of both versions (and its subgroups).")
@click.option(
    "--mappings-only",
    is_flag=True,
    help="Compare the chunk mappings and attributes only: read no chunk data "
    "(chunks and points changed are not counted: '?').",
)
def diff(file: str, a: str, b: str, group: str | None, mappings_only: bool) -> None:
    """Show what changed from version A to version B of FILE: datasets, attributes, chunks and points.

    \b
    points added        points of B beyond A's shape (B grew)
    points changed      points in both shapes whose stored value differs
    points removed      points of A beyond B's shape
    attributes changed  the dataset's attributes that differ (old -> new below)

    Chunks with the same mapping in both versions are not read; only the others
    are, and compared point by point as stored (NaN equals NaN). A dataset
    differs if it was added, removed, changed shape, points or attributes.
    """
    from .._backend.names import is_netcdf_dimension_only
    from .._versions.diff import diff_versions
    from ._diff import attribute_changes, format_diff

    try:
        with open_h5file(file, "r", hint=_NOT_VERSIONED_HINT) as f:
            diffs = diff_versions(f, a, b, group=group, values=not mappings_only, skip=is_netcdf_dimension_only)
            attrs = attribute_changes(f, a, b, diffs, group=group)
    except (VHDF5Error, OSError, KeyError, RuntimeError) as err:
        raise _read_failed(file, err) from None
    click.echo(format_diff(diffs.values(), a, b, attrs, values=not mappings_only))


def main() -> None:
    """Entry point of the ``vhdf5`` console script."""
    cli()
