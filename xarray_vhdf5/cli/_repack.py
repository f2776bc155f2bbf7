"""``vhdf5 expire FILE`` and ``vhdf5 repack FILE [--dry-run]``: retention and giving space back.

``expire`` is :func:`xarray_vhdf5._versions.retention.expire`; ``repack`` is
:func:`xarray_vhdf5._versions.repack.repack` (with a tqdm bar on a terminal)
and, with ``--dry-run``, :func:`~xarray_vhdf5._versions.repack.repack_plan`.
"""

from __future__ import annotations

import sys

import click

from ..errors import VHDF5Error

__all__ = ["expire", "repack"]


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--older-than",
    default=None,
    metavar="TIME",
    help="Expire versions committed before TIME (ISO 8601, UTC unless a zone is given).",
)
@click.option(
    "--keep-last",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Keep the N newest versions (all branches together), whatever their age.",
)
@click.option("--no-keep-tags", is_flag=True, help="Expire tagged versions too (their tags are deleted).")
@click.option(
    "--no-keep-branches",
    is_flag=True,
    help="Expire branch tips too (each branch moves to its nearest surviving ancestor).",
)
def expire(
    file: str, older_than: str | None, keep_last: int | None, no_keep_tags: bool, no_keep_branches: bool
) -> None:
    """Delete the versions of FILE that no branch or tag needs and the rules let go.

    \b
    A version is expired when it is older than --older-than (if given) and not
    one of the --keep-last newest (if given), and it is not a branch tip nor
    tagged. Survivors are re-parented to their nearest surviving ancestor and
    read exactly as before. The chunks only expired versions used are dropped;
    their bytes are reused by the next commits (run `vhdf5 repack FILE` to give
    them back to the file system).
    """
    from .._versions.retention import expire as expire_versions

    if older_than is None and keep_last is None:
        raise click.UsageError("give --older-than TIME, --keep-last N or both")
    try:
        report = expire_versions(
            file,
            older_than=older_than,
            keep_last=keep_last,
            keep_tags=not no_keep_tags,
            keep_branches=not no_keep_branches,
        )
    except (VHDF5Error, OSError, ValueError, TypeError) as err:
        raise click.ClickException(str(err)) from None
    n = len(report.deleted)
    click.echo(f"deleted {n} version{'s' if n != 1 else ''}" + (f": {', '.join(report.deleted)}" if n else ""))
    if n:
        click.echo(f"freed {report.freed_chunks} chunks; current version {report.current_version}")


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--out", type=click.Path(dir_okay=False), default=None, help="Write the compact copy here and leave FILE as it is."
)
@click.option("--dry-run", is_flag=True, help="Say what would be copied and dropped; write nothing.")
def repack(file: str, out: str | None, dry_run: bool) -> None:
    """Rewrite FILE compactly: every version, ref and attribute, none of the bytes deletions freed.

    \b
    The copy is written beside FILE, synced and renamed over it, under FILE's
    locks: a crash leaves FILE as it was. Close other programs that have FILE
    open first (they would keep reading the old file). The new file tracks its
    free space, so later deletions' bytes are reused by any commit.
    """
    from .._versions.repack import repack as repack_file
    from .._versions.repack import repack_plan
    from ._check import progress_bar

    try:
        if dry_run:
            plan = repack_plan(file)
            chunks = sum(plan.chunks.values())
            click.echo(
                f"{file}: {_mb(plan.size_before)}; would copy {chunks} chunks ({_mb(plan.chunk_bytes)} stored) "
                f"of {len(plan.chunks)} datasets and drop {_mb(plan.garbage_bytes)} of freed rows; "
                f"the rest of the difference is space freed inside the file"
            )
            return
        update, close = progress_bar(sys.stderr.isatty())
        try:
            report = repack_file(file, out, progress=update)
        finally:
            close()
    except (VHDF5Error, OSError) as err:
        raise click.ClickException(str(err)) from None
    assert report.size_after is not None  # a repack, not a plan: it measured the new file
    click.echo(
        f"repacked {file} -> {report.out}: {_mb(report.size_before)} -> {_mb(report.size_after)} "
        f"({_mb(report.size_before - report.size_after)} given back)"
    )
