"""A hypothesis state machine of branches, tags, commits, merges, cherry-picks, expire and repack vs a model.

Every step is checked against a pure-Python model of the version DAG: each
ref resolves to the version the model says, and every version kept reads
bit for bit what it read when it was committed.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import xarray_vhdf5 as xv
from xarray_vhdf5 import VersionedHDF5File, open_file
from xarray_vhdf5.errors import ConflictError, NothingToCommitError
from xarray_vhdf5.testing.strategies import point_edits

N, CHUNK = 12, 3
NAMES = st.sampled_from(["a", "b", "c", "d"])
EDITS = point_edits(N, [-1.0, 1.0, 2.0, 3.0], min_size=1, max_size=5)


class RefsMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        import tempfile

        self.dir = tempfile.TemporaryDirectory()
        self.path = f"{self.dir.name}/sm.h5"
        self.f = open_file(self.path)
        self.vf = VersionedHDF5File(self.f)
        with self.vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.zeros(N), chunks=(CHUNK,))
        self.data = {"v0": np.zeros(N)}
        self.parents = {"v0": []}
        self.branches = {"main": "v0"}
        self.tags: dict[str, str] = {}
        self.count = 0

    def teardown(self):
        self.f.close()
        self.dir.cleanup()

    def _new(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def _ancestors(self, name):
        seen, queue = {name}, collections.deque([name])
        while queue:
            for p in self.parents[queue.popleft()]:
                if p in self.data and p not in seen:
                    seen.add(p)
                    queue.append(p)
        return seen

    def _base(self, a, b):
        ancestors = self._ancestors(a)
        visited, queue = {b}, collections.deque([b])
        while queue:
            name = queue.popleft()
            if name in ancestors:
                return name
            for p in self.parents[name]:
                if p in self.data and p not in visited:
                    visited.add(p)
                    queue.append(p)
        return None  # no common ancestor left (expired): an empty base

    def _three_way(self, base, ours, theirs, resolve):
        base = np.full(N, np.nan) if base is None else base  # an empty base: every point added on both sides
        out, conflicts = ours.copy(), []
        for i in range(N):
            b, o, t = base[i], ours[i], theirs[i]
            if o == t or t == b:
                out[i] = o
            elif o == b:
                out[i] = t
            else:
                conflicts.append(i)
                out[i] = o if resolve == "ours" else t
        return out, conflicts

    @initialize(main=EDITS, a=EDITS, b=EDITS)
    def two_branches_that_diverged(self, main, a, b):
        """Branches a and b from v0, and a commit on each of main, a and b (so merges have work)."""
        for name in ("a", "b"):
            self.vf.create_branch(name, "v0")
            self.branches[name] = "v0"
        for branch, edits in (("main", main), ("a", a), ("b", b)):
            self.commit(branch, edits)

    @rule(branch=st.sampled_from(["main", "a", "b", "c", "d"]), edits=EDITS)
    def commit(self, branch, edits):
        if branch not in self.branches:
            return
        tip = self.branches[branch]
        name = self._new()
        with self.vf.stage_version(name, branch=branch) as g:
            for i, v in edits.items():
                g["x"][i] = v
        new = self.data[tip].copy()
        new[list(edits)] = list(edits.values())
        self.data[name], self.parents[name] = new, [tip]
        self.branches[branch] = name

    @rule(name=NAMES, at=st.integers(0, 1000))
    def create_branch(self, name, at):
        if name in self.branches or name in self.tags:
            return
        version = sorted(self.data)[at % len(self.data)]
        assert self.vf.create_branch(name, version) == version
        self.branches[name] = version

    @rule(name=st.sampled_from(["t1", "t2", "t3"]), at=st.integers(0, 1000))
    def create_tag(self, name, at):
        if name in self.tags:
            return
        version = sorted(self.data)[at % len(self.data)]
        self.vf.create_tag(name, version)
        self.tags[name] = version

    @rule(name=NAMES)
    def delete_branch(self, name):
        if name in self.branches:
            assert self.vf.delete_branch(name) == self.branches.pop(name)

    @rule(
        source=st.sampled_from(["main", "a", "b", "c", "d", "t1", "t2", "t3"]),
        into=st.sampled_from(["main", "a", "b"]),
        resolve=st.sampled_from([None, "ours", "theirs"]),
    )
    def merge(self, source, into, resolve):
        refs = {**self.branches, **self.tags}
        if source not in refs or into not in self.branches:
            return
        s, t = refs[source], self.branches[into]
        base = self._base(t, s)
        if base == s:
            with pytest.raises(NothingToCommitError):
                self.vf.merge(source, into, resolve=resolve)
            return
        if base == t:
            report = self.vf.merge(source, into, resolve=resolve)
            assert report.fast_forward and report.version == s
            event("merge fast-forward")
            self.branches[into] = s
            return
        merged, conflicts = self._three_way(self.data.get(base), self.data[t], self.data[s], resolve)
        name = self._new()
        if conflicts and resolve is None:
            with pytest.raises(ConflictError) as info:
                self.vf.merge(source, into, version=name)
            assert sorted(info.value.points["x"].ravel().tolist()) == conflicts
            event("merge refused: conflicts")
            self.count -= 1
            return
        report = self.vf.merge(source, into, version=name, resolve=resolve)
        event(f"merge committed ({'with' if conflicts else 'no'} conflicts)")
        assert report.version == name and report.base == (base or "__first_version__")
        self.data[name], self.parents[name] = merged, [t, s]
        self.branches[into] = name

    @rule(
        pick=st.integers(0, 1000),
        onto=st.sampled_from(["main", "a"]),
        resolve=st.sampled_from([None, "ours", "theirs"]),
    )
    def cherry_pick(self, pick, onto, resolve):
        candidates = sorted(n for n in self.data if self.parents[n] and self.parents[n][0] in self.data)
        if not candidates or onto not in self.branches:
            return
        picked = candidates[pick % len(candidates)]
        base = self.parents[picked][0]
        t = self.branches[onto]
        merged, conflicts = self._three_way(self.data[base], self.data[t], self.data[picked], resolve)
        name = self._new()
        if conflicts and resolve is None:
            with pytest.raises(ConflictError):
                self.vf.cherry_pick(picked, onto, version=name)
            self.count -= 1
            return
        self.vf.cherry_pick(picked, onto, version=name, resolve=resolve)
        event("cherry-pick committed")
        self.data[name], self.parents[name] = merged, [t]
        self.branches[onto] = name

    @rule(keep_last=st.integers(0, 6))
    def expire(self, keep_last):
        """Versions but the newest ``keep_last`` go, except branch tips and tagged ones."""
        order = list(self.data)  # commit order: the registry's, oldest first
        needed = set(self.branches.values()) | set(self.tags.values())
        doomed = [n for n in order[: max(0, len(order) - keep_last)] if n not in needed]
        report = xv.expire(self.vf, keep_last=keep_last)
        assert sorted(report.deleted) == sorted(doomed)
        if doomed:
            event("expire deleted versions")
        gone = set(doomed)

        def surviving(name):
            while name in gone:
                if not self.parents[name] or self.parents[name][0] not in self.data:
                    return "__first_version__"  # re-parented onto the root of the DAG
                name = self.parents[name][0]
            return name

        for name in [n for n in order if n not in gone]:
            parents = self.parents[name]
            if parents:
                rest = [p for p in parents[1:] if p not in gone]  # a merge parent is not re-linked
                self.parents[name] = [surviving(parents[0]), *rest]
        for name in doomed:
            del self.data[name], self.parents[name]

    @rule()
    def repack(self):
        self.f.close()
        xv.repack(self.path)
        event("repack")
        self.f = open_file(self.path)
        self.vf = VersionedHDF5File(self.f)

    @rule()
    def reopen(self):
        self.f.close()
        self.f = open_file(self.path)
        self.vf = VersionedHDF5File(self.f)

    @invariant()
    def refs_resolve_and_versions_are_unchanged(self):
        assert self.vf.list_branches() == {
            "main": self.branches["main"],
            **{k: v for k, v in sorted(self.branches.items()) if k != "main"},
        }
        assert self.vf.list_tags() == dict(sorted(self.tags.items()))
        assert self.vf.current_version == self.branches["main"]
        for name, want in self.data.items():
            np.testing.assert_array_equal(self.vf[name]["x"][:], want, err_msg=name)

    @precondition(lambda self: True)
    @invariant()
    def parents_are_recorded(self):
        for name, parents in self.parents.items():
            attrs = self.f[f"_version_data/versions/{name}"].attrs
            if parents:
                assert attrs["prev_version"] == parents[0]
            if len(parents) > 1:
                assert attrs["_vhdf5_merge_parent"] == parents[1]


# The suite's run (under 5 minutes on 2 cores): 20 programs of at most 12 rules; the slow run
# below draws 150 of at most 25.
TestRefsMachine = RefsMachine.TestCase
TestRefsMachine.settings = settings(
    max_examples=12, stateful_step_count=12, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.slow
def test_refs_machine_long():
    run_state_machine_as_test(
        RefsMachine,
        settings=settings(
            max_examples=150, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
        ),
    )
