"""``vhdf5 refs FILE --version V -o out.json``: a version as a kerchunk reference set.

The reference set is :func:`xarray_vhdf5.store.version_refs`'s (its module,
:mod:`xarray_vhdf5.store._refs`, says what each filter becomes); this module
only parses the options and writes the JSON.
"""

from __future__ import annotations

import click

from ..errors import VHDF5Error

__all__ = ["REFS_HELP", "refs"]

#: The ``vhdf5 refs`` help text.
REFS_HELP = """Write a kerchunk reference set (JSON) of a version of FILE.

\b
fsspec's reference file system then reads the version from any copy of
FILE (local, HTTP, object storage) without libhdf5:
  xr.open_dataset("reference://", engine="zarr", backend_kwargs={
      "storage_options": {"fo": "out.json", "remote_protocol": "s3"}})

\b
Chunks filtered by deflate, shuffle, fletcher32, zstd or blosc (or none)
are byte ranges of URL; arrays with other filters (lzf, lz4, szip, ...),
variable-length strings and scalars are inlined decoded, up to
--max-inline bytes per array (larger ones: an error, or left out with
--skip-unreferenced). Deleting versions invalidates a reference set.
"""


@click.command(help=REFS_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--version", "version", default=None, help="Version name (default: the current version).")
@click.option("--group", default=None, help="Group inside the version to reference (default: the whole version).")
@click.option("--url", default=None, help="Where readers find the copy of FILE (default: FILE's absolute path).")
@click.option("-o", "--out", type=click.Path(dir_okay=False, writable=True), required=True, help="JSON file to write.")
@click.option(
    "--inline-threshold",
    type=click.IntRange(min=0),
    default=100,
    show_default=True,
    help="Inline stored chunks smaller than this many bytes.",
)
@click.option(
    "--max-inline",
    type=click.IntRange(min=0),
    default=16 * 2**20,
    show_default=True,
    help="Most decoded bytes inlined per array whose chunks cannot be referenced.",
)
@click.option(
    "--skip-unreferenced",
    is_flag=True,
    help="Leave out arrays that can be neither referenced nor inlined (with a warning), instead of failing.",
)
def refs(
    file: str,
    version: str | None,
    group: str | None,
    url: str | None,
    out: str,
    inline_threshold: int,
    max_inline: int,
    skip_unreferenced: bool,
) -> None:
    """``vhdf5 refs`` (its help text is :data:`REFS_HELP`)."""
    import warnings

    from ..store import version_refs
    from ..store._refs import UnreferencedArrayWarning, write_refs

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnreferencedArrayWarning)
            made = version_refs(
                file,
                version,
                group,
                url=url,
                inline_threshold=inline_threshold,
                max_inline_bytes=max_inline,
                unreferenced="skip" if skip_unreferenced else "raise",
            )
        for warning in caught:
            click.echo(f"warning: {warning.message}", err=True)
        write_refs(made, out)
    except (VHDF5Error, OSError, KeyError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        raise click.ClickException(str(message)) from None
    chunks = sum(1 for key in made["refs"] if not key.rpartition("/")[2].startswith("."))
    ranges = sum(1 for value in made["refs"].values() if isinstance(value, list))
    click.echo(f"{out}: {chunks} chunks ({ranges} byte ranges, {chunks - ranges} inlined)")
