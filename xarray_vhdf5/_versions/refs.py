"""Branches and tags: names for versions, stored where versioned-hdf5 does not look.

A version's parent (``prev_version``) makes the versions a DAG; refs name
points of it, as git's do:

- the branch ``main`` is the file's ``current_version`` (versioned-hdf5's
  attribute, which its commits move): it is never stored, so a commit by
  versioned-hdf5 moves ``main`` too;
- every other branch is a name for a version that moves to each version
  committed on it (``stage_version(..., branch="qc")``, ``ds.vhdf5.stage()`` of a
  Dataset opened with ``version="qc"``), without changing the current version;
- a tag names one version and never moves (``reset`` refuses it; delete it and
  create it again).

Storage (``docs/format.md``, "Branches and tags"): attributes of two groups,
``/__vhdf5__/refs/branches`` and ``/__vhdf5__/refs/tags``, each attribute named
as the ref and holding the version's name. versioned-hdf5 2.6 never opens
``/__vhdf5__``: it reads, commits and deletes versions of such a file as of any
other; a ref whose version it deleted is *dangling* and resolving it raises
:class:`~xarray_vhdf5.errors.RefNotFoundError` saying so. Every change is a
mutation (:func:`~xarray_vhdf5._versions.mutation.mutating`: locked, journaled,
counted), so readers in other processes see it at once.

A ref's name is a non-empty ``str`` without ``/`` that names no version, so
that ``version="v1"`` never means two things; resolution
(:func:`~xarray_vhdf5._versions.lookup.lookup_version`) tries version names
first, then tags, then branches (a tag and a branch may not share a name).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import h5py

from .._backend.layout import BOOKKEEPING, FIRST_VERSION, VERSION_DATA, VERSIONS
from ..errors import ReadOnlyError, RefExistsError, RefNotFoundError, VersionNotFoundError
from . import bookkeeping
from .mutation import _disk_path, mutating, open_file

__all__ = [
    "MAIN",
    "RefMethods",
    "branch_tip",
    "branches",
    "create_branch",
    "create_tag",
    "delete_branch",
    "delete_tag",
    "follow_deletion",
    "list_branches",
    "list_tags",
    "refs_to",
    "reset_branch",
    "resolve_in",
    "resolve_ref",
    "set_branch",
    "snapshot",
    "tags",
]

#: The branch that is the file's current version.
MAIN = "main"
_KINDS = ("branches", "tags")


@contextlib.contextmanager
def _writable(f) -> Iterator[h5py.File]:
    """``f`` itself, or the file at path ``f`` opened for writing (:func:`open_file`) and closed after."""
    if isinstance(f, (str, os.PathLike)):
        with open_file(f, "r+") as h:
            yield h
    else:
        yield getattr(f, "f", f)  # a VersionedHDF5File: its h5py file


def _listing(f, which: str) -> dict[str, str]:
    if isinstance(f, (str, os.PathLike)):  # read without blocking writers: the shared reader
        from .reader import SharedVersionedFile

        reader = SharedVersionedFile(f)
        try:
            return getattr(reader, f"list_{which}")()
        finally:
            reader.close()
    f = getattr(f, "f", f)
    if which == "tags":
        return dict(sorted(_read(f, "tags").items()))
    current = _current(f)
    out = {MAIN: current} if current is not None else {}
    out.update(sorted(_read(f, "branches").items()))
    return out


def _group(f: h5py.File, kind: str) -> h5py.Group | None:
    """The group of ``kind`` refs (``"branches"``, ``"tags"``), None if none was ever made."""
    path = f"/{BOOKKEEPING}/refs/{kind}"
    return f[path] if bookkeeping.path_exists(f.id, path.encode()) else None  # every reader's listing asks


def _made_group(f: h5py.File, kind: str) -> h5py.Group:
    """The group of ``kind`` refs, made if missing."""
    return f.require_group(f"/{BOOKKEEPING}/refs/{kind}")


def _read(f: h5py.File, kind: str) -> dict[str, str]:
    group = _group(f, kind)
    if group is None:
        return {}
    out = {}
    for name, value in group.attrs.items():
        out[name] = value.decode() if isinstance(value, bytes) else str(value)
    return out


def _where(f: h5py.File) -> str:
    """The file's path for messages (the path of a journaled file, not its file object)."""
    path = _disk_path(f)
    return repr(path) if path is not None else repr(f.file.filename)


def _versions(f: h5py.File) -> h5py.Group:
    return f[f"/{VERSION_DATA}/{VERSIONS}"]


def _current(f: h5py.File) -> str | None:
    value = _versions(f).attrs.get("current_version")
    if value is None:
        return None
    value = value.decode() if isinstance(value, bytes) else str(value)
    return None if value == FIRST_VERSION else value


def branches(f) -> dict[str, str]:
    """Every branch and the version it points to, ``main`` (the current version) first.

    Parameters
    ----------
    f : str, os.PathLike, h5py.File or VersionedHDF5File
        The file (a path is read without blocking writers).

    ``main`` is left out of a file without any version.
    """
    return _listing(f, "branches")


def tags(f) -> dict[str, str]:
    """Every tag and the version it names, by name (``f`` as for :func:`branches`)."""
    return _listing(f, "tags")


#: The names the package exports (``xarray_vhdf5.list_branches(path)``), as the methods are named.
list_branches, list_tags = branches, tags


def refs_to(f: h5py.File, version: str) -> list[str]:
    """The refs naming ``version`` (``"branch main"``, ``"tag v2.1"``), for messages and logs."""
    out = [f"branch {name}" for name, v in branches(f).items() if v == version]
    return out + [f"tag {name}" for name, v in tags(f).items() if v == version]


def snapshot(f: h5py.File) -> tuple[dict[str, str], dict[str, str]]:
    """``(tags, branches)`` as stored (``main`` not included): what :func:`resolve_in` takes."""
    return _read(f, "tags"), _read(f, "branches")


def resolve_in(
    stored: tuple[dict[str, str], dict[str, str]], name: str, current: str | None, exists, where: str
) -> str | None:
    """The version tag or branch ``name`` points to in ``stored`` (:func:`snapshot`), None if no ref has that name.

    ``current`` is the current version (branch ``main``); ``exists(version)``
    says whether a version is committed; ``where`` names the file in messages.

    Raises
    ------
    RefNotFoundError
        The ref exists but its version does not (deleted, e.g. by versioned-hdf5).
    """
    found_tags, found_branches = stored
    for kind, found in (("tag", found_tags), ("branch", {MAIN: current, **found_branches})):
        version = found.get(name)
        if version is None:
            continue
        if not exists(version):
            fix = "delete_tag" if kind == "tag" else "reset_branch"
            raise RefNotFoundError(
                f"{kind} {name!r} of {where} points to version {version!r}, which was deleted; {fix} fixes it"
            )
        return version
    return None


def resolve_ref(f: h5py.File, name: str) -> str | None:
    """The version a tag or branch ``name`` of ``f`` points to, or None when no ref has that name.

    Raises
    ------
    RefNotFoundError
        The ref exists but its version does not (deleted, e.g. by versioned-hdf5).
    """
    versions = _versions(f)
    return resolve_in(snapshot(f), name, _current(f), lambda v: v in versions and v != FIRST_VERSION, _where(f))


def _check_new_name(f: h5py.File, name: str, kind: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ValueError(f"invalid {kind} name {name!r}: a non-empty str without '/'")
    if name in _versions(f):
        raise RefExistsError(f"{name!r} names a version of {_where(f)}: a {kind} may not share its name")
    for other, found in (("branch", branches(f)), ("tag", tags(f))):
        if name in found:
            raise RefExistsError(f"{other} {name!r} already exists in {_where(f)} (at version {found[name]!r})")


def _version(f: h5py.File, at: str | None) -> str:
    """The version ``at`` names (a version, tag or branch name; None: the current version)."""
    if at is None:
        current = _current(f)
        if current is None:
            raise VersionNotFoundError(f"{_where(f)} has no version yet: commit one first")
        return current
    if at in _versions(f) and at != FIRST_VERSION:
        return at
    version = resolve_ref(f, at)
    if version is None:
        raise VersionNotFoundError(f"no version, tag or branch named {at!r} in {_where(f)}")
    return version


def create_branch(f: h5py.File, name: str, at: str | None = None) -> str:
    """Create branch ``name`` at version ``at`` (a version, tag or branch; default the current version).

    ``f`` is a path (opened for writing and closed), an h5py file open for
    writing or a :class:`~xarray_vhdf5._versions.VersionedHDF5File`; so for
    every function below that changes refs.

    Returns
    -------
    str
        The version the branch points to.

    Raises
    ------
    RefExistsError
        A branch, tag or version already has that name (a ``ValueError``).
    VersionNotFoundError
        ``at`` names nothing.
    ValueError
        ``name`` is empty or has a ``/``.
    """
    with _writable(f) as f, mutating(f, what=f"create_branch({name!r})"):
        _check_new_name(f, name, "branch")
        version = _version(f, at)
        _made_group(f, "branches").attrs[name] = version
    return version


def create_tag(f: h5py.File, name: str, at: str | None = None) -> str:
    """Create tag ``name`` for version ``at`` (default the current version); raises as :func:`create_branch`."""
    with _writable(f) as f, mutating(f, what=f"create_tag({name!r})"):
        _check_new_name(f, name, "tag")
        version = _version(f, at)
        _made_group(f, "tags").attrs[name] = version
    return version


def set_branch(f: h5py.File, name: str, version: str) -> None:
    """Point branch ``name`` at ``version``, inside a mutation the caller holds (a commit on the branch).

    ``main`` sets the current version. No checks: the caller checked.
    """
    if name == MAIN:
        _versions(f).attrs["current_version"] = version
    else:
        _made_group(f, "branches").attrs[name] = version


def follow_deletion(f: h5py.File, surviving) -> dict[str, str | None]:
    """Move each branch whose version is being deleted to ``surviving(version)``, inside the deletion.

    ``surviving(name)`` is the nearest surviving ancestor (``__first_version__``
    when none: the branch is deleted), as ``delete_versions`` moves the
    current version. Returns the moved branches: name -> new version or None.
    """
    moved: dict[str, str | None] = {}
    group = _group(f, "branches")
    if group is None:
        return moved
    for name, version in _read(f, "branches").items():
        target = surviving(version)
        if target == version:
            continue
        if target == FIRST_VERSION:
            del group.attrs[name]
            moved[name] = None
        else:
            group.attrs[name] = target
            moved[name] = target
    return moved


def branch_tip(f: h5py.File, name: str) -> str:
    """The version branch ``name`` points to.

    Raises
    ------
    RefNotFoundError
        No such branch (the message lists the branches), or its version was deleted.
    """
    found = branches(f)
    if name not in found:
        raise RefNotFoundError(f"no branch {name!r} in {_where(f)}; branches: {sorted(found)}")
    version = found[name]
    if version not in _versions(f):
        raise RefNotFoundError(
            f"branch {name!r} of {_where(f)} points to version {version!r}, "
            "which was deleted; move it with reset_branch"
        )
    return version


def reset_branch(f: h5py.File, name: str, to: str) -> str:
    """Point branch ``name`` at version ``to`` (a version, tag or branch), as ``git reset --hard``.

    The versions no longer on the branch stay in the file (other refs or
    versions may need them); ``reset_branch("main", v)`` sets the current version.

    Raises
    ------
    RefNotFoundError
        No such branch; ``name`` is a tag (tags never move).
    VersionNotFoundError
        ``to`` names nothing.
    """
    with _writable(f) as f, mutating(f, what=f"reset_branch({name!r})"):
        if name in tags(f):
            raise RefNotFoundError(f"{name!r} is a tag of {_where(f)}: tags never move; delete it and create it again")
        if name not in branches(f) and name != MAIN:
            raise RefNotFoundError(f"no branch {name!r} in {_where(f)}; branches: {sorted(branches(f))}")
        version = _version(f, to)
        set_branch(f, name, version)
    return version


def _delete(f: h5py.File, kind: str, name: str) -> str:
    group = _group(f, kind)
    found = _read(f, kind)
    if group is None or name not in found:
        raise RefNotFoundError(
            f"no {kind[:-1] if kind == 'tags' else 'branch'} {name!r} in {_where(f)}; {kind}: {sorted(found)}"
        )
    del group.attrs[name]
    return found[name]


def delete_branch(f: h5py.File, name: str) -> str:
    """Delete branch ``name``; its versions stay. Returns the version it pointed to.

    Raises
    ------
    RefNotFoundError
        No such branch.
    ValueError
        ``name`` is ``main`` (the current version: it cannot be deleted).
    """
    if name == MAIN:
        raise ValueError("branch 'main' is the file's current version: it cannot be deleted (reset it instead)")
    with _writable(f) as f, mutating(f, what=f"delete_branch({name!r})"):
        return _delete(f, "branches", name)


def delete_tag(f: h5py.File, name: str) -> str:
    """Delete tag ``name``; its version stays. Returns it. Raises ``RefNotFoundError`` if no such tag."""
    with _writable(f) as f, mutating(f, what=f"delete_tag({name!r})"):
        return _delete(f, "tags", name)


class RefMethods:
    """Branch and tag methods of :class:`~xarray_vhdf5._versions.VersionedHDF5File` (over its ``f``).

    Each raises :class:`~xarray_vhdf5.errors.ClosedFileError` on a closed file
    and, when it writes, :class:`~xarray_vhdf5.errors.ReadOnlyError` on a file
    open read-only; otherwise as the function of this module it calls.
    """

    f: h5py.File
    _read_only: bool

    if TYPE_CHECKING:  # defined by VersionedHDF5File

        def _check_open(self) -> None: ...

    def _refs_file(self, write: bool) -> h5py.File:
        self._check_open()
        if write and self._read_only:
            raise ReadOnlyError(f"{_where(self.f)} is open read-only; open it with mode 'a' to change refs")
        return self.f

    def list_branches(self) -> dict[str, str]:
        """Branch name -> version, ``main`` (the current version) first (:func:`branches`)."""
        return branches(self._refs_file(False))

    def list_tags(self) -> dict[str, str]:
        """Tag name -> version (:func:`tags`)."""
        return tags(self._refs_file(False))

    def create_branch(self, name: str, at: str | None = None) -> str:
        """Create branch ``name`` at ``at`` (default the current version); returns its version.

        See :func:`create_branch`.
        """
        return create_branch(self._refs_file(True), name, at)

    def create_tag(self, name: str, at: str | None = None) -> str:
        """Create tag ``name`` for ``at`` (default the current version); returns its version (:func:`create_tag`)."""
        return create_tag(self._refs_file(True), name, at)

    def reset_branch(self, name: str, to: str) -> str:
        """Point branch ``name`` at ``to``; returns the version (:func:`reset_branch`)."""
        return reset_branch(self._refs_file(True), name, to)

    def delete_branch(self, name: str) -> str:
        """Delete branch ``name``; returns the version it pointed to (:func:`delete_branch`)."""
        return delete_branch(self._refs_file(True), name)

    def delete_tag(self, name: str) -> str:
        """Delete tag ``name``; returns its version (:func:`delete_tag`)."""
        return delete_tag(self._refs_file(True), name)

    def merge(self, source: str, into: str = MAIN, **kwargs):
        """Merge ``source`` (branch, tag or version) into branch ``into``; see
        :func:`~xarray_vhdf5._versions.branchmerge.merge` (keywords ``version``,
        ``message``, ``resolve``, ``fast_forward``). Returns its ``MergeReport``."""
        from .branchmerge import merge

        self._refs_file(True)
        return merge(self, source, into, **kwargs)

    def cherry_pick(self, picked: str, onto: str = MAIN, **kwargs):
        """Commit on branch ``onto`` the changes of version ``picked``; see
        :func:`~xarray_vhdf5._versions.branchmerge.cherry_pick`. Returns its ``MergeReport``."""
        from .branchmerge import cherry_pick

        self._refs_file(True)
        return cherry_pick(self, picked, onto, **kwargs)
