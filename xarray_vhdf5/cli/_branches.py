"""``vhdf5 branch`` and ``vhdf5 tag``: list, create, move and delete refs (:mod:`xarray_vhdf5._versions.refs`)."""

from __future__ import annotations

import click

from .._versions import refs
from ..errors import VHDF5Error

__all__ = ["branch", "cherry_pick", "merge", "tag"]


def _run(action):
    try:
        return action()
    except (VHDF5Error, OSError, ValueError) as err:
        raise click.ClickException(str(err)) from None


def _listing(found: dict[str, str], current: str | None) -> None:
    width = max((len(n) for n in found), default=0)
    for name, version in found.items():
        mark = "*" if name == current else " "
        click.echo(f"{mark} {name.ljust(width)}  {version}")


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("name", required=False)
@click.option(
    "--at", "at", default=None, help="Version, tag or branch to create NAME at (default: the current version)."
)
@click.option(
    "--reset", "reset", default=None, metavar="VERSION", help="Move branch NAME to VERSION (a version, tag or branch)."
)
@click.option("-d", "--delete", is_flag=True, help="Delete branch NAME (its versions stay).")
def branch(file: str, name: str | None, at: str | None, reset: str | None, delete: bool) -> None:
    """List the branches of FILE, or create, move (--reset) or delete (-d) branch NAME.

    \b
    vhdf5 branch FILE                 list: name and version ('*': main, the current version)
    vhdf5 branch FILE qc --at v3      create branch qc at version v3
    vhdf5 branch FILE qc --reset v5   point qc at v5
    vhdf5 branch FILE qc -d           delete branch qc
    """
    if name is None:
        if at or reset or delete:
            raise click.UsageError("--at, --reset and --delete need a branch NAME")
        _listing(_run(lambda: refs.list_branches(file)), refs.MAIN)
        return
    if sum(map(bool, (at, reset, delete))) > 1:
        raise click.UsageError("give one of --at, --reset, --delete")
    if delete:
        version = _run(lambda: refs.delete_branch(file, name))
        click.echo(f"deleted branch {name} (was at {version})")
    elif reset:
        version = _run(lambda: refs.reset_branch(file, name, reset))
        click.echo(f"branch {name} now at {version}")
    else:
        version = _run(lambda: refs.create_branch(file, name, at))
        click.echo(f"created branch {name} at {version}")


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("name", required=False)
@click.option("--at", "at", default=None, help="Version, tag or branch to tag (default: the current version).")
@click.option("-d", "--delete", is_flag=True, help="Delete tag NAME (its version stays).")
def tag(file: str, name: str | None, at: str | None, delete: bool) -> None:
    """List the tags of FILE, or create (--at) or delete (-d) tag NAME. Tags never move."""
    if name is None:
        if at or delete:
            raise click.UsageError("--at and --delete need a tag NAME")
        _listing(_run(lambda: refs.list_tags(file)), None)
        return
    if at and delete:
        raise click.UsageError("give one of --at, --delete")
    if delete:
        version = _run(lambda: refs.delete_tag(file, name))
        click.echo(f"deleted tag {name} (was {version})")
    else:
        version = _run(lambda: refs.create_tag(file, name, at))
        click.echo(f"tagged {version} as {name}")


def _print_report(report) -> None:
    if report.fast_forward:
        click.echo(f"fast-forward: branch {report.target} now at {report.version}")
        return
    click.echo(f"committed {report.version} on branch {report.target} (base {report.base})")
    for path, outcome in sorted(report.datasets.items()):
        settled = f", {report.resolved[path]} conflicting points resolved" if path in report.resolved else ""
        click.echo(f"  {path}: {outcome}{settled}")


_RESOLVE = click.Choice(["ours", "theirs"])


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("source")
@click.option("--into", default="main", show_default=True, help="The branch that receives the merge.")
@click.option("--version", "version", default=None, help="Name of the merge version (default: a UUID).")
@click.option("-m", "--message", default=None, help="Commit message (default: 'merge SOURCE into INTO').")
@click.option(
    "--resolve",
    type=_RESOLVE,
    default=None,
    help="Settle conflicting points: ours (the branch merged into) or theirs (SOURCE).",
)
@click.option("--no-ff", is_flag=True, help="Make a merge version even when a fast-forward would do.")
def merge(file, source, into, version, message, resolve, no_ff) -> None:
    """Merge SOURCE (a branch, tag or version) into branch --into of FILE (a three-way merge).

    Conflicting points (changed on both sides to different values) fail the
    merge and are listed, unless --resolve says which side wins.
    """
    from .._versions.branchmerge import merge as do_merge

    _print_report(
        _run(
            lambda: do_merge(
                file, source, into, version=version, message=message, resolve=resolve, fast_forward=not no_ff
            )
        )
    )


@click.command(name="cherry-pick")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("picked")
@click.option("--onto", default="main", show_default=True, help="The branch that receives the changes.")
@click.option("--version", "version", default=None, help="Name of the new version (default: a UUID).")
@click.option("-m", "--message", default=None, help="Commit message.")
@click.option("--resolve", type=_RESOLVE, default=None, help="Settle conflicting points: ours or theirs.")
def cherry_pick(file, picked, onto, version, message, resolve) -> None:
    """Commit on branch --onto of FILE the changes version PICKED made to its parent."""
    from .._versions.branchmerge import cherry_pick as do_pick

    _print_report(_run(lambda: do_pick(file, picked, onto, version=version, message=message, resolve=resolve)))
