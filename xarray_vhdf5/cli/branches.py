"""``vhdf5 branch`` and ``vhdf5 tag``: list, create, move and delete refs (:mod:`xarray_vhdf5.versions.refs`)."""

from __future__ import annotations

import click

from ..errors import VHDF5Error
from ..versions import refs

__all__ = ["branch", "tag"]


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
@click.option("--at", "at", default=None, help="Version, tag or branch to create NAME at (default: the current version).")
@click.option("--reset", "reset", default=None, metavar="VERSION", help="Move branch NAME to VERSION (a version, tag or branch).")
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
