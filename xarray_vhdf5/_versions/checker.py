"""The walk behind :func:`~xarray_vhdf5._versions.check.check_file`: one :class:`Checker` per run.

The versions group, each version group, the version index, the version DAG,
then each versioned dataset (:mod:`~xarray_vhdf5._versions.chunkcheck`) and
each version's virtual datasets, then (``rehash``) the chunks. Every object is
read inside its own ``try``, so a damaged one is reported and the walk goes on;
``trace`` and ``skip`` let a caller survive libhdf5 crashing the process (see
``check_file``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import h5py

from .._backend.chunkmap import version_dataset_layout
from .._backend.h5objects import end_of_allocation
from .._backend.layout import DATA_VERSION, FIRST_VERSION, VERSION_DATA, VERSIONS
from ..errors import NotVersionedError
from . import bookkeeping
from . import index as version_index
from .check import ERROR, WARNING, CheckReport, Problem
from .chunkcheck import DAMAGE_ERRORS, DatasetState, describe, inspect_dataset
from .timestamps import parse_timestamp

__all__ = ["Checker"]

#: Said of a versions group that cannot be read (``relink.relink_versions`` is what repairs it).
_RELINK_HINT = "; --repair rebuilds it from the version index's addresses of the version groups"

#: Scratch group of interrupted deletions, rebuilds and modify_metadata runs (``_versions/scratch.py``).
_SCRATCH = "__vhdf5_scratch__"
#: Prefix of the group holding the new raw_data of a modify_metadata run, in ``_version_data/<name>``.
_NEW_PREFIX = "__vhdf5_new_"


@dataclass
class _Group:
    """A member of the versions group, as its attributes say."""

    name: str
    prev: str | None = None
    micros: int | None = None
    committed: bool = False
    readable: bool = True


class Checker:
    """One run of :func:`~xarray_vhdf5._versions.check.check_file` over an open file.

    Parameters
    ----------
    f : h5py.File or h5py.Group
        The group holding ``_version_data``.
    path : str
        The file's name, for the report.
    rehash, progress, trace, skip
        As for ``check_file``.
    """

    def __init__(self, f: h5py.Group, path: str, rehash: bool, progress, trace, skip):
        self.f = f
        self.report = CheckReport(path, rehashed=rehash)
        self.rehash = rehash
        self.progress = progress
        self.trace = trace
        self.skip = frozenset(skip)
        self.damaged: set[str] = set()
        #: States of the new raw_data of interrupted modify_metadata runs (None: not one), by path.
        self.interrupted: dict[str, DatasetState | None] = {}

    def _traced(self, path: str) -> None:
        """Tell ``trace`` that ``path`` is read again (already checked against ``skip``)."""
        if self.trace is not None:
            self.trace(path)

    def touch(self, path: str, version: str | None = None, dataset: str | None = None) -> bool:
        """Whether the object at ``path`` may be read; tells ``trace``, or reports a skipped one."""
        if path in self.skip:
            self.report.crashed.append(path)
            self.problem(ERROR, f"not read: libhdf5 crashed the process reading {path}", version, dataset)
            return False
        if self.trace is not None:
            self.trace(path)
        return True

    def problem(
        self, severity: str, what: str, version: str | None = None, dataset: str | None = None, damages: bool = True
    ) -> None:
        """Record a problem; an error of a version makes it damaged unless ``damages`` is False."""
        self.report.problems.append(Problem(severity, what, version, dataset))
        if severity == ERROR and version is not None and damages:
            self.damaged.add(version)

    def run(self) -> CheckReport:
        """Check the file; return the report.

        Raises
        ------
        NotVersionedError
            No ``_version_data/versions`` group.
        """
        versions = self._versions_group()
        if versions is None:
            return self.report
        groups = self._groups(versions)
        if groups is None:
            return self.report
        committed = {g.name: g for g in groups.values() if g.committed}
        self._check_index(versions, groups)
        self._check_dag(committed, groups)
        states = self._datasets()
        self._check_versions(versions, committed, states)
        if self.rehash:
            self._rehash(states)
        for state in states.values():
            if state.usable:
                self.damaged |= state.locate(versions, self.problem)
            if state.past_end:
                self.report.past_end[state.path] = max(state.past_end, self.report.past_end.get(state.path, 0))
            bad = list(state.bad_rows) + [(s, d) for s in sorted(state.bad) for d in state.digests.get(s, ())]
            if bad:  # an interrupted modify_metadata gives a dataset two states: merged
                rows = self.report.bad_rows.setdefault(state.path, [])
                rows.extend(b for b in bad if b not in rows)
        order = sorted(committed.values(), key=lambda g: (g.micros, g.name))
        self.report.damaged_versions = [g.name for g in order if g.name in self.damaged]
        self.report.damaged_versions += sorted(self.damaged - set(committed) - set(self.report.leftover_groups))
        self.report.last_whole_version = self._last_whole(committed, order)
        return self.report

    # -- the versions group ---------------------------------------------------------
    def _versions_group(self) -> h5py.Group | None:
        try:
            has_data = VERSION_DATA in self.f
        except DAMAGE_ERRORS as exc:
            self.problem(ERROR, f"the group {self.f.name} cannot be read: {describe(exc)}")
            return None
        if not has_data:
            if bookkeeping.RELINKING in self.f:
                self.problem(
                    ERROR,
                    f"a relink of the versions group was interrupted: /{VERSION_DATA} is at {bookkeeping.RELINKING}; "
                    "--repair moves it back",
                )
                return None
            raise NotVersionedError(
                f"{self.report.path!r} is not a versioned HDF5 file: it has no /{VERSION_DATA} group"
            )
        try:
            self.vdata = self.f[VERSION_DATA]
        except DAMAGE_ERRORS as exc:
            self.problem(ERROR, f"the group /{VERSION_DATA} cannot be opened: {describe(exc)}")
            return None
        try:
            present = VERSIONS in self.vdata
        except DAMAGE_ERRORS:
            present = True  # the link is there or not: opening it says what is wrong
        if not present:
            raise NotVersionedError(
                f"{self.report.path!r} is not a versioned HDF5 file: it has no /{VERSION_DATA}/{VERSIONS} group"
            )
        if not self.touch(f"{self.vdata.name}/{VERSIONS}"):
            return None
        try:
            versions = self.vdata[VERSIONS]
        except DAMAGE_ERRORS as exc:
            self.problem(
                ERROR, f"the versions group /{VERSION_DATA}/{VERSIONS} cannot be opened: {describe(exc)}" + _RELINK_HINT
            )
            return None
        try:
            current = versions.attrs["current_version"]
            self.report.current_version = current.decode() if isinstance(current, bytes) else str(current)
        except DAMAGE_ERRORS as exc:
            self.problem(ERROR, f"the versions group's current_version cannot be read: {describe(exc)}")
        try:
            data_version = int(versions.attrs.get("data_version", 1))
        except DAMAGE_ERRORS as exc:
            self.problem(ERROR, f"the versions group's data_version cannot be read: {describe(exc)}")
        else:
            if data_version > DATA_VERSION:
                self.problem(WARNING, f"data_version {data_version} is newer than this package's ({DATA_VERSION})")
        return versions

    def _groups(self, versions: h5py.Group) -> dict[str, _Group] | None:
        try:
            names = list(versions)
        except DAMAGE_ERRORS as exc:
            self.problem(ERROR, f"the versions group's members cannot be listed: {describe(exc)}" + _RELINK_HINT)
            return None
        if FIRST_VERSION not in names:
            self.problem(WARNING, f"the versions group has no {FIRST_VERSION} (the root of the version DAG)")
        groups: dict[str, _Group] = {}
        for name in names:
            if name == FIRST_VERSION:
                continue
            g = groups[name] = _Group(name)
            if not self.touch(f"{versions.name}/{name}", version=name):
                g.readable = False
                continue
            try:
                attrs = versions[name].attrs
                has_time = "timestamp" in attrs
                prev = attrs.get("prev_version", FIRST_VERSION)
                g.prev = prev.decode() if isinstance(prev, bytes) else str(prev)
                done = bool(attrs.get("committed", True))
                if has_time:
                    g.micros = version_index.to_micros(parse_timestamp(attrs["timestamp"]))
            except DAMAGE_ERRORS as exc:
                g.readable = False
                self.problem(
                    ERROR, f"the version group or its attributes cannot be read: {describe(exc)}", version=name
                )
                continue
            if not has_time or not done:
                why = "committed=False" if has_time else "no timestamp"
                self.report.leftover_groups.append(name)
                self.problem(
                    WARNING,
                    f"a group that is not a version ({why}): a leftover of an interrupted commit; repair removes it",
                    version=name,
                )
                continue
            g.committed = True
        return groups

    def _check_index(self, versions: h5py.Group, groups: dict[str, _Group]) -> None:
        """The stored version index, where it claims to be valid, against the groups' attributes."""
        vdata = self.vdata
        where = bookkeeping.find(vdata) or bookkeeping.PATH
        if not self.touch(where):
            self.report.index_wrong = True
            return
        try:
            entries = version_index.load(vdata, versions)
        except DAMAGE_ERRORS as exc:
            self.report.index_wrong = True
            self.problem(
                ERROR,
                f"the version index {where} cannot be read "
                f"({describe(exc)}): this package cannot open the file; repair rebuilds it",
            )
            return
        if entries is None or not all(g.readable for g in groups.values()):
            return
        stored = {
            n: (p, int(t), bool(c))
            for n, p, t, c in zip(
                entries.names, entries.parents, entries.timestamps.tolist(), entries.committed.tolist()
            )
        }
        scanned = {g.name: (g.prev, g.micros or 0, g.committed) for g in groups.values()}
        wrong = sorted(n for n in set(stored) | set(scanned) if stored.get(n) != scanned.get(n))
        if wrong:
            self.report.index_wrong = True
            shown = ", ".join(map(repr, wrong[:3])) + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else "")
            self.problem(
                ERROR,
                f"the version index disagrees with the version groups on {shown}: versions "
                "are listed with wrong names, parents or timestamps; repair rebuilds it",
            )

    def _check_dag(self, committed: dict[str, _Group], groups: dict[str, _Group]) -> None:
        looped: set[str] = set()
        for g in committed.values():
            if g.prev == FIRST_VERSION or g.prev in committed:
                continue
            if g.prev in groups and groups[g.prev].readable:
                self.problem(
                    ERROR,
                    f"prev_version names {g.prev!r}, a group that is not a version "
                    "(repair removes it and re-parents this version)",
                    version=g.name,
                    damages=False,
                )
            elif g.prev not in groups:  # its data reads right: the history ends early there
                self.report.reroot.append(g.name)
                self.problem(
                    WARNING,
                    f"prev_version names {g.prev!r}, which is not in the file, so its "
                    "ancestry ends here (versioned-hdf5's del vf[name] leaves this); repair "
                    f"makes {FIRST_VERSION} its parent",
                    version=g.name,
                )
        for g in committed.values():
            chain: list[str] = []
            name: str | None = g.name
            while name is not None and name in committed and name not in chain and name not in looped:
                chain.append(name)
                name = committed[name].prev
            if name in chain:
                loop = chain[chain.index(name) :]
                looped |= set(loop)
                breaker = min(loop, key=lambda n: (committed[n].micros, n))
                self.report.reroot.append(breaker)
                self.problem(
                    ERROR,
                    f"prev_version chain loops: {' -> '.join([*loop, name])} "
                    f"(repair makes {FIRST_VERSION} the parent of {breaker!r})",
                )
        current = self.report.current_version
        if current is None or current == FIRST_VERSION or current in committed:
            return
        if current in groups:
            self.problem(ERROR, f"current_version names {current!r}, a group that is not a committed version")
        else:
            self.problem(ERROR, f"current_version names {current!r}, which is not in the file")

    # -- datasets -----------------------------------------------------------------
    def _ends(self) -> tuple[int | None, int | None]:
        """The file's length and its end of allocation, in bytes (None: not known).

        A chunk past the end of allocation was placed by a writer killed inside
        libhdf5's flush, and libhdf5 would allocate new objects over it
        (:func:`~xarray_vhdf5._versions.chunkcheck.inspect_dataset`).
        """
        try:
            filesize = int(self.f.file.id.get_filesize())
        except DAMAGE_ERRORS:
            return None, None
        try:
            return filesize, end_of_allocation(self.f.file.id)
        except (RuntimeError, NotImplementedError):  # a journaled handle: its opener moved it
            return filesize, None

    def _datasets(self) -> dict[str, DatasetState]:
        """Each versioned dataset's :class:`DatasetState`, by the absolute path of its raw_data."""
        vdata = self.vdata
        filesize, allocated_end = self._ends()
        states: dict[str, DatasetState] = {}

        def walk(group: h5py.Group, prefix: str) -> None:
            if not prefix and not self.touch(group.name):
                return
            self._traced(group.name)
            try:
                names = list(group)
            except DAMAGE_ERRORS as exc:
                self.problem(ERROR, f"the group {group.name} cannot be listed: {describe(exc)}")
                return
            for name in names:
                if not prefix and name == VERSIONS:
                    continue
                if not prefix and name == _SCRATCH:
                    self.problem(
                        WARNING,
                        "an interrupted deletion, rebuild or modify_metadata left its scratch "
                        "group; the next writer (a VersionedHDF5File opened writable) finishes "
                        "it, as do delete_versions, modify_metadata and repair",
                    )
                    continue
                if name.startswith("__vhdf5_"):  # ours at any depth: a new raw_data (see _interrupted_state)
                    continue
                if not self.touch(f"{group.name}/{name}", dataset=prefix + name):
                    continue
                try:
                    obj = group[name]
                    holds = isinstance(obj, h5py.Group) and "raw_data" in obj
                except DAMAGE_ERRORS as exc:
                    self.problem(ERROR, f"{group.name}/{name} cannot be opened: {describe(exc)}")
                    continue
                if holds:
                    path = prefix + name
                    states[f"{vdata.name}/{path}/raw_data"] = inspect_dataset(
                        obj, path, filesize, self.problem, allocated_end=allocated_end
                    )
                elif isinstance(obj, h5py.Group):
                    walk(obj, f"{prefix}{name}/")

        walk(vdata, "")
        self.report.datasets_checked = len(states)
        return states

    def _check_versions(
        self, versions: h5py.Group, committed: dict[str, _Group], states: dict[str, DatasetState]
    ) -> None:
        for name in committed:
            self.report.versions_checked += 1
            if f"{versions.name}/{name}" in self.skip:
                continue  # reported by _groups
            try:
                root = versions[name]
            except DAMAGE_ERRORS as exc:
                self.problem(ERROR, f"the version group cannot be opened: {describe(exc)}", version=name)
                continue
            for vpath, vds in self._members(root, name):
                self.report.virtual_datasets_checked += 1
                try:
                    _, raw_name = version_dataset_layout(vds)
                except DAMAGE_ERRORS as exc:
                    self.problem(ERROR, f"not a versioned dataset: {describe(exc)}", version=name, dataset=vpath)
                    continue
                state = states.get(raw_name)
                if state is None:
                    state = self._interrupted_state(raw_name, states)
                if state is None:
                    self.problem(
                        ERROR,
                        f"its 'raw_data' attribute names {raw_name!r}, which is not a versioned dataset of this file",
                        version=name,
                        dataset=vpath,
                    )
                    continue
                n, _ = state.check_mappings(vds, name, vpath, self.problem, keep=self.rehash)
                self.report.chunks_checked += n

    def _interrupted_state(self, raw_name: str, states: dict[str, DatasetState]) -> DatasetState | None:
        """The state of ``_version_data/<path>/__vhdf5_new_<k>/raw_data`` if a version maps it, else None.

        An interrupted :func:`~xarray_vhdf5._versions.metadata.modify_metadata` leaves versions
        mapping the new raw_data by that name (steps B to E of its module docstring): not
        damage, once the mappings check out against it. Its hash table is ``<path>/hash_table``
        once that raw_data is linked as ``<path>/raw_data`` too (step C), else the one in the
        scratch group's journal, else none (its chunks are then not verified by ``rehash``).
        Warned about once per dataset; added to ``states`` (rehash and locate see it).
        """
        if raw_name in self.interrupted:
            return self.interrupted[raw_name]
        self.interrupted[raw_name] = None
        head, _, leaf = raw_name.rpartition("/")
        parent, _, new = head.rpartition("/")
        prefix = f"{self.vdata.name}/"
        digits = new[len(_NEW_PREFIX) :]
        if leaf != "raw_data" or not new.startswith(_NEW_PREFIX) or not digits.isdigit():
            return None
        if not parent.startswith(prefix) or parent == f"{self.vdata.name}/{VERSIONS}":
            return None
        path = parent[len(prefix) :]
        if not self.touch(raw_name, dataset=path):
            return None
        try:
            raw = self.f[raw_name]
            group = self.f[parent]
            if not isinstance(raw, h5py.Dataset) or not isinstance(group, h5py.Group):
                return None
            linked = group.get("raw_data")
            same = isinstance(linked, h5py.Dataset) and linked.id == raw.id
            table = group.get("hash_table") if same else self._pending_table(f"{parent}/hash_table")
        except DAMAGE_ERRORS:
            return None
        filesize, allocated_end = self._ends()
        members = {"raw_data": raw}
        if isinstance(table, h5py.Dataset):
            members["hash_table"] = table

        def problem(severity, what, version=None, dataset=None, damages=True):
            if "hash_table" in members or not what.startswith("the hash table or its largest_index"):
                self.problem(severity, f"{what} (the new raw_data {raw_name})", version, dataset, damages)

        state = inspect_dataset(members, path, filesize, problem, allocated_end=allocated_end)
        if not state.usable:
            return None
        missing = "" if isinstance(linked, h5py.Dataset) else f"; {parent}/raw_data is missing and will be relinked"
        self.problem(
            WARNING,
            f"a modify_metadata run was interrupted: versions map its new raw_data {raw_name}"
            f"{missing}; every version reads its data; the next writer finishes it, or run "
            f"modify_metadata(f, {path!r}) again",
            dataset=path,
        )
        states[raw_name] = self.interrupted[raw_name] = state
        return state

    def _pending_table(self, target: str) -> h5py.Dataset | None:
        """The scratch group's object journaled to be moved to ``target`` (a new hash table), or None."""
        scratch = self.vdata.get(_SCRATCH)
        if not isinstance(scratch, h5py.Group):
            return None
        try:
            journal = json.loads(scratch.attrs.get("journal", "[]"))
        except (TypeError, ValueError):
            return None
        for sname, where in journal:
            if where == target and sname in scratch:
                obj = scratch[sname]
                return obj if isinstance(obj, h5py.Dataset) else None
        return None

    def _members(self, root: h5py.Group, version: str):
        """``(path, h5py.Dataset)`` of every dataset under a version's group; damaged members reported."""
        stack = [(root, "")]
        while stack:
            group, prefix = stack.pop()
            self._traced(group.name)
            try:
                names = list(group)
            except DAMAGE_ERRORS as exc:
                self.problem(ERROR, f"the group {prefix or '/'} cannot be listed: {describe(exc)}", version=version)
                continue
            for name in names:
                if not self.touch(f"{group.name}/{name}", version=version, dataset=prefix + name):
                    continue
                try:
                    obj = group[name]
                except DAMAGE_ERRORS as exc:
                    self.problem(ERROR, f"cannot be opened: {describe(exc)}", version=version, dataset=prefix + name)
                    continue
                if isinstance(obj, h5py.Dataset):
                    yield prefix + name, obj
                elif isinstance(obj, h5py.Group):
                    stack.append((obj, f"{prefix}{name}/"))

    def _rehash(self, states: dict[str, DatasetState]) -> None:
        total = sum(state.rehash_count() for state in states.values())
        done = [0]

        def advance(n: int) -> None:
            done[0] += n
            if self.progress is not None:
                self.progress(done[0], total)

        def touch(path: str) -> bool:
            if path in self.skip:
                self.report.crashed.append(path)
                return False
            if self.trace is not None:
                self.trace(path)
            return True

        for state in states.values():
            self.report.chunks_rehashed += state.rehash(self.problem, advance, touch)

    # -- the verdict ------------------------------------------------------------------
    def _last_whole(self, committed: dict[str, _Group], order: list[_Group]) -> str | None:
        current = self.report.current_version
        if current in committed:
            seen: set[str] = set()
            name: str | None = current
            while name is not None and name in committed and name not in seen:
                if name not in self.damaged:
                    return name
                seen.add(name)
                name = committed[name].prev
            return None
        if current == FIRST_VERSION:
            return None
        whole = [g.name for g in order if g.name not in self.damaged]
        return whole[-1] if whole else None
