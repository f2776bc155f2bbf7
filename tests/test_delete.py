"""Deleting versions: against a numpy model and against versioned-hdf5 2.6.0 on a twin file.

A history with branches, nested groups, fill values, compression, variable-length
strings and datasets that come and go is written by either library; the same
deletion is done by both libraries on two copies, and every surviving version
(data bit for bit, parent, current version) is compared with the model and across
the libraries. Each result is then read and extended by the *other* library.
Crashes are injected at every flush of the operation (``scratch._barrier_hook``) and inside
link swaps; the file must read right afterwards and finish on the next call.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import tracemalloc
from dataclasses import dataclass, field

import h5py
import numpy as np
import pytest
import versioned_hdf5
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xarray_vhdf5
from xarray_vhdf5 import ReadOnlyError, UnsupportedError, VersionNotFoundError
from xarray_vhdf5._versions import delete_version, delete_versions, scratch
from xarray_vhdf5.testing.strategies import chunked_shapes, edit_sequences

LIBS = {"ours": xarray_vhdf5, "ref": versioned_hdf5}
STR = h5py.string_dtype()
FIRST = "__first_version__"


# -- a model of every version ------------------------------------------------------------


@dataclass
class Model:
    data: dict[str, dict[str, np.ndarray]] = field(default_factory=lambda: {FIRST: {}})
    fills: dict[str, object] = field(default_factory=dict)
    prevs: dict[str, str] = field(default_factory=dict)
    current: str = FIRST

    def delete(self, doomed) -> None:
        """versioned-hdf5's semantics: nearest surviving ancestor for children and current."""
        doomed = set(doomed)

        def up(v):
            while v in doomed:
                v = self.prevs[v]
            return v

        self.current = up(self.current)
        self.prevs = {v: up(p) for v, p in self.prevs.items() if v not in doomed}
        self.data = {v: d for v, d in self.data.items() if v not in doomed}


class Edit:
    """Apply edits to a staged group and to the model's copy of the version at once."""

    def __init__(self, g, data: dict, fills: dict):
        self.g, self.data, self.fills = g, data, fills

    def create(self, name, arr, **kw):
        arr = np.asarray(arr, dtype=object if kw.get("dtype") is STR else None)
        self.g.create_dataset(name, data=arr, **kw)
        self.data[name] = arr.copy()
        self.fills[name] = b"" if arr.dtype.kind == "O" else kw.get("fillvalue") or 0

    def set(self, name, index, value):
        self.g[name][index] = value
        self.data[name][index] = value

    def resize(self, name, shape):
        self.g[name].resize(shape)
        old = self.data[name]
        new = np.full(shape, self.fills[name], dtype=old.dtype)
        common = tuple(slice(0, min(a, b)) for a, b in zip(shape, old.shape))
        new[common] = old[common]
        self.data[name] = new

    def delete(self, name):
        del self.g[name]
        del self.data[name]


def play(lib: str, path, steps, model: Model | None = None) -> Model:
    """Commit ``steps`` [(version, prev or None, make_current, edit)] with ``lib``."""
    model = model or Model()
    with h5py.File(path, "a") as f:
        vf = LIBS[lib].VersionedHDF5File(f)
        for name, prev, make_current, edit in steps:
            base = prev or vf.current_version
            data = copy.deepcopy(model.data[base])
            with vf.stage_version(name, prev_version=prev, make_current=make_current) as g:
                edit(Edit(g, data, model.fills))
            model.data[name], model.prevs[name] = data, base
            if make_current:
                model.current = name
        if lib == "ref":
            vf.close()
    return model


def v1(e):
    e.create("a", np.arange(95, dtype="f8"), chunks=(10,))
    e.create("grp/b", np.arange(20 * 13, dtype="i4").reshape(20, 13), chunks=(7, 5), fillvalue=-1)
    e.create("s", np.array(["x", "yy", "", "zzz", "w"] * 3, dtype=object), chunks=(4,), dtype=STR)
    e.create("z", np.zeros(30, "f4"), chunks=(8,), compression="gzip")


def v2(e):
    e.set("a", 3, -3.0)
    e.set("grp/b", (slice(0, 7), slice(0, 5)), 5)
    e.set("z", 9, 1.5)


def b3(e):
    e.set("a", slice(50, 60), -1.0)
    e.set("s", 0, "branch")


def v4(e):
    e.resize("a", (120,))
    e.set("a", 110, 7.0)
    e.delete("s")
    e.set("grp/b", (19, 12), 0)


def v5(e):
    e.set("a", 3, 3.0)  # back to v1's chunk
    e.create("only5", np.arange(12, dtype="u2"), chunks=(5,))


def b6(e):
    e.set("grp/b", (slice(None), 0), 9)


def v7(e):
    e.set("grp/b", (slice(None), slice(None)), 2)
    e.delete("only5")
    e.resize("grp/b", (9, 4))


HISTORY = [
    ("v1", None, True, v1),
    ("v2", None, True, v2),
    ("b3", "v1", False, b3),
    ("v4", None, True, v4),
    ("v5", None, True, v5),
    ("b6", "b3", False, b6),
    ("v7", None, True, v7),
]


# -- reading back --------------------------------------------------------------------------


def as_bytes(arr) -> bytes | list:
    arr = np.asarray(arr)
    if arr.dtype.kind == "O":
        return [v.encode() if isinstance(v, str) else bytes(v) for v in arr.ravel()]
    return arr.dtype.str.encode() + repr(arr.shape).encode() + arr.tobytes()


def snapshot(path, lib: str | None = None) -> dict:
    """{version: {dataset: bytes}}, {version: prev}, current; through ``lib``'s API or plain h5py."""
    with h5py.File(path, "r+" if lib == "ref" else "r") as f:
        versions = f["_version_data/versions"]
        vf = LIBS[lib].VersionedHDF5File(f) if lib else None
        data, prevs = {}, {}
        for v in versions:
            if v == FIRST:
                continue
            names = []
            versions[v].visititems(lambda n, o, names=names: names.append(n) if isinstance(o, h5py.Dataset) else None)
            group = vf[v] if vf else versions[v]
            data[v] = {n: as_bytes(group[n][()]) for n in names}
            prevs[v] = versions[v].attrs["prev_version"]
        current = versions.attrs["current_version"]
        if lib == "ref":
            vf.close()
    return {"data": data, "prevs": prevs, "current": current}


def model_snapshot(model: Model) -> dict:
    data = {v: {n: as_bytes(a) for n, a in d.items()} for v, d in model.data.items() if v != FIRST}
    return {"data": data, "prevs": dict(model.prevs), "current": model.current}


def check(path, model: Model, libs=("ours", "ref", None)):
    expected = model_snapshot(model)
    for lib in libs:
        assert snapshot(path, lib) == expected, f"read by {lib or 'h5py'}"


def extend(model: Model):
    """A further version on the current one: a changed chunk, a reused one, a new dataset."""

    def edit(e):
        if "a" in e.data:
            e.set("a", 0, 42.0)
            e.set("a", 3, -3.0)  # v2's chunk: reused if a version still maps it, else new
        e.create("late", np.arange(7.0), chunks=(3,))

    return [("next", None, True, edit)]


@pytest.fixture(scope="module", params=["ours", "ref"])
def history(request, tmp_path_factory):
    """HISTORY written by one library: (path, model)."""
    path = tmp_path_factory.mktemp("delete") / f"written_by_{request.param}.h5"
    return path, play(request.param, path, HISTORY)


def run_delete(lib: str, path, doomed):
    with h5py.File(path, "r+") as f:
        if lib == "ours":
            return delete_versions(f, doomed)
        versioned_hdf5.delete_versions(f, doomed)


CASES = [
    ["v2"],
    ["v1"],
    ["v7"],
    ["v5", "v7"],
    ["b3"],
    ["v1", "v2", "v4"],
    ["v5"],
    ["v1", "v2", "b3", "v4", "v5", "b6", "v7"],
    ["b6", "v2", "v5"],
]


#: CASES also run on versioned-hdf5's history in the suite (a leaf, two on the main line, a branch,
#: every version); the others there in the slow run, so the suite stays under 5 minutes on 2 cores.
_REF_IN_SUITE = {0, 3, 4, 7}


@pytest.mark.parametrize(
    "history, doomed",
    [
        pytest.param(
            writer,
            doomed,
            marks=[pytest.mark.slow] if writer == "ref" and i not in _REF_IN_SUITE else [],
            id=f"{writer}-{'-'.join(doomed)}",
        )
        for writer in ("ours", "ref")
        for i, doomed in enumerate(CASES)
    ],
    indirect=["history"],
)
def test_delete_like_versioned_hdf5(history, tmp_path, doomed):
    """Same survivors, data, parents and current version as versioned-hdf5; each extends the other's."""
    source, model = history
    ours, ref = tmp_path / "ours.h5", tmp_path / "ref.h5"
    shutil.copy(source, ours)
    shutil.copy(source, ref)
    model = copy.deepcopy(model)
    run_delete("ours", ours, doomed)
    run_delete("ref", ref, doomed)
    model.delete(doomed)
    check(ours, model)
    check(ref, model, libs=(None,))
    # the other library versions each result further
    ext_ours = play("ref", ours, extend(model), copy.deepcopy(model))
    ext_ref = play("ours", ref, extend(model), copy.deepcopy(model))
    check(ours, ext_ours, libs=("ref",))
    check(ref, ext_ref, libs=("ours",))


def test_space_is_reclaimed(tmp_path):
    """raw_data and hash_table shrink to the chunks still mapped; repacking shrinks the file."""
    path = tmp_path / "space.h5"
    rng = np.random.default_rng(0)
    steps = [
        (
            f"v{i}",
            None,
            True,
            lambda e, i=i: (
                e.create("x", rng.random((64, 64)), chunks=(16, 16))
                if i == 0
                else e.set("x", slice(None), rng.random((64, 64)))
            ),
        )
        for i in range(6)
    ]
    model = play("ours", path, steps)
    size_before = repacked_size(path, tmp_path / "before.h5")
    report = run_delete("ours", path, ["v0", "v1", "v2", "v3"])
    model.delete(["v0", "v1", "v2", "v3"])
    check(path, model)
    with h5py.File(path, "r") as f:
        assert f["_version_data/x/raw_data"].shape == (2 * 16 * 16, 16)
        assert f["_version_data/x/hash_table"].attrs["largest_index"] == 2 * 16
    compaction = report.datasets["x"]
    assert (compaction.chunks_before, compaction.chunks_after, compaction.moved) == (96, 32, 32)
    assert report.freed_chunks == 64
    size_after = repacked_size(path, tmp_path / "after.h5")
    assert size_after < size_before / 2


def repacked_size(path, out) -> int:
    """File size after copying every object into a new file (what h5repack does)."""
    with h5py.File(path, "r") as src, h5py.File(out, "w") as dst:
        for key in src:
            src.copy(src[key], dst, key)
    return os.path.getsize(out)


def test_freed_space_is_reused_in_the_same_session(tmp_path):
    path = tmp_path / "reuse.h5"
    rng = np.random.default_rng(1)
    play(
        "ours",
        path,
        [
            (
                f"v{i}",
                None,
                True,
                lambda e, i=i: (
                    e.create("x", rng.random((64, 64)), chunks=(16, 16))
                    if i == 0
                    else e.set("x", slice(None), rng.random((64, 64)))
                ),
            )
            for i in range(8)
        ],
    )
    with h5py.File(path, "r+") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        vf.delete_versions([f"v{i}" for i in range(6)])
        f.flush()
        size = os.path.getsize(path)
        for i in range(8, 12):  # 4 x 32 KiB of new chunks
            with vf.stage_version(f"v{i}") as g:
                g["x"][:] = rng.random((64, 64))
        f.flush()
        assert os.path.getsize(path) <= size


def test_unreferenced_datasets_are_dropped(tmp_path):
    path = tmp_path / "drop.h5"
    model = play("ours", path, HISTORY)
    run_delete("ours", path, ["v5"])  # "only5" exists in v5 only
    model.delete(["v5"])
    check(path, model)
    with h5py.File(path, "r") as f:
        assert "only5" not in f["_version_data"] and "grp/b" in f["_version_data"]
    run_delete("ours", path, list(model.prevs))
    with h5py.File(path, "r") as f:
        assert set(f["_version_data"]) == {"versions"}
        assert f["_version_data/versions"].attrs["current_version"] == FIRST


def test_empty_list_reclaims_what_versioned_hdf5_del_leaves(tmp_path):
    """versioned-hdf5's ``del vf[name]`` only unlinks the group; ``delete_versions(f, [])`` compacts."""
    path = tmp_path / "gc.h5"
    model = play("ours", path, HISTORY)
    with h5py.File(path, "r+") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        del vf["v7"]
        vf.close()
        rows_before = f["_version_data/grp/b/raw_data"].shape[0]
        report = delete_versions(f, [])
        assert report.deleted == [] and report.freed_chunks > 0
        assert f["_version_data/grp/b/raw_data"].shape[0] < rows_before
    model.delete(["v7"])
    check(path, model)


def test_uncommitted_group_is_kept_intact_and_deletable(tmp_path):
    """A group left uncommitted by a crashed commit keeps its chunks; it can be deleted by name."""
    path = tmp_path / "half.h5"
    model = play("ours", path, HISTORY)
    with h5py.File(path, "r+") as f:
        versions = f["_version_data/versions"]
        versions.copy(versions["v2"], versions, "half")
        versions["half"].attrs["committed"] = False
        delete_versions(f, ["v1", "v2"])
        assert versions["half"]["grp/b"][()].tobytes() == model.data["v2"]["grp/b"].tobytes()
        delete_versions(f, ["half"])
        assert "half" not in versions
    model.delete(["v1", "v2"])
    check(path, model)


def test_errors_change_nothing(history, tmp_path):
    source, _ = history
    path = tmp_path / "err.h5"
    shutil.copy(source, path)
    before = snapshot(path)
    with h5py.File(path, "r+") as f:
        with pytest.raises(VersionNotFoundError, match="'nope'") as info:
            delete_versions(f, ["v2", "nope"])
        assert isinstance(info.value, KeyError)
        with pytest.raises(ReadOnlyError, match="root of the version DAG") as info:
            delete_version(f, FIRST)
        assert isinstance(info.value, ValueError)
        assert delete_versions(f, []).deleted == []
    with h5py.File(path, "r") as f, pytest.raises(ReadOnlyError, match="read-only"):
        delete_versions(f, "v2")
    assert snapshot(path) == before


def test_versioned_file_methods_keep_registry(tmp_path):
    path = tmp_path / "vf.h5"
    play("ours", path, HISTORY)
    with h5py.File(path, "r+") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        del vf["v7"]
        assert vf.current_version == "v5" and "v7" not in vf and vf[-1].version == "v4"
        vf.delete_versions(["v4", "v1"])
        assert vf.versions == ["v2", "b3", "v5", "b6"]
        assert vf.version_info("v5").prev_version == "v2"
        assert vf.version_info("v2").prev_version == FIRST
        assert vf[-1].version == "v2"
        with pytest.raises(VersionNotFoundError):
            del vf["v4"]
        with pytest.raises(UnsupportedError):
            del vf[0]
        with pytest.raises(NotImplementedError):
            del vf[-1]


def test_link_creation_order_is_kept(tmp_path):
    """A rebuilt virtual dataset keeps its place among the variables of its version."""
    path = tmp_path / "order.h5"

    def first(e):
        for name in ("t", "b", "a", "m"):
            e.create(name, np.arange(40.0), chunks=(4,))

    def later(e, k):
        e.set("a", k, -1.0)
        e.set("m", k, -1.0)

    play(
        "ours",
        path,
        [("v0", None, True, first)] + [(f"v{k}", None, True, lambda e, k=k: later(e, k)) for k in range(1, 5)],
    )
    report = run_delete("ours", path, ["v1", "v2"])
    assert report.datasets["a"].rebuilt and report.datasets["m"].rebuilt
    with h5py.File(path, "r") as f:
        for v in ("v0", "v3", "v4"):
            assert list(f[f"_version_data/versions/{v}"]) == ["t", "b", "a", "m"]


def test_memory_is_bounded_by_a_few_chunks(tmp_path):
    """Moving 3 MB of chunks allocates well under a megabyte (tracemalloc: Python and numpy)."""
    path = tmp_path / "mem.h5"
    rng = np.random.default_rng(2)
    play(
        "ours",
        path,
        [
            (
                f"v{i}",
                None,
                True,
                lambda e, i=i: (
                    e.create("x", rng.random((256, 256)), chunks=(32, 32))
                    if i == 0
                    else e.set("x", slice(None), rng.random((256, 256)))
                ),
            )
            for i in range(12)
        ],
    )
    with h5py.File(path, "r+") as f:
        tracemalloc.start()
        report = delete_versions(f, [f"v{i}" for i in range(6)])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert report.datasets["x"].moved == 6 * 64  # 3 MiB moved
    assert peak < 512 * 1024


# -- crashes -----------------------------------------------------------------------------------


STAGES = ["allocated", "unlinked", "moved", "relinked", "tables", "done"]


def crash_child(path, doomed, stage=None, half_swap=None) -> int:
    """Run delete_versions in a forked child that dies (os._exit) at ``stage`` or mid-swap."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            if stage:
                scratch._barrier_hook = lambda s: os._exit(3) if s == stage else None
            if half_swap:

                def die(self, *args, **kwargs):
                    target = args[1] if half_swap == "move_in" else f"{args[0]}/{next(iter(args[1]))}"
                    self.f.move(target, f"{self.path}/dead")
                    self.f.file.flush()
                    os._exit(3)

                setattr(scratch.Scratch, half_swap, die)
            with h5py.File(path, "r+") as f:
                delete_versions(f, doomed)
        finally:
            os._exit(0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("crash", [*STAGES, "replace_members", "move_in"])
def test_crash_leaves_a_readable_file(tmp_path, crash):
    """Killed after any flush, every version reads its data; after a crash inside a link
    swap the next call puts the missing link back. Either way the next call finishes."""
    path = tmp_path / "crash.h5"
    model = play("ours", path, HISTORY)
    doomed = ["v1", "v2", "b3"]
    half = crash if crash in ("replace_members", "move_in") else None
    assert crash_child(path, doomed, None if half else crash, half) == 3
    survivors = copy.deepcopy(model)
    survivors.delete(doomed)
    if not half:
        state = snapshot(path)
        expected = model_snapshot(model)
        for v, data in state["data"].items():  # deleted versions may still be there, intact
            assert data == expected["data"][v], v
        assert set(state["data"]) >= set(survivors.prevs)
    with h5py.File(path, "r+") as f:
        remaining = [v for v in doomed if v in f["_version_data/versions"]]
        delete_versions(f, remaining)  # recovers, then finishes
    check(path, survivors)
    ext = play("ref", path, extend(survivors), copy.deepcopy(survivors))
    check(path, ext)


# -- random histories ------------------------------------------------------------------------


VALUES = [-1, 0, 5, 7]  # -1 is the fill value


@st.composite
def histories(draw):
    """``(shape, chunks, steps, doomed, writer)``: a branching history of one 2-d dataset ``d``.

    ``steps[i]`` is ``(prev, make_current, edits)`` for version ``v{i}``; its
    ``edits`` (:func:`~xarray_vhdf5.testing.strategies.edit_sequences`: writes of
    1-3 points per axis, resizes to 0-14 points per axis) are valid on the shape
    of the version it is staged from, the current one when ``prev`` is None.
    """
    n = draw(st.integers(2, 6))
    shape, chunks = draw(chunked_shapes(min_ndim=2, max_ndim=2, min_side=1, max_side=12, max_points=None, max_chunk=4))
    shapes, current, steps = {"v0": shape}, "v0", [(None, True, [])]
    for i in range(1, n):
        prev = draw(st.sampled_from([None] + [f"v{j}" for j in range(i)]))
        edits = draw(edit_sequences({"d": shapes[prev or current]}, VALUES, max_edits=3, max_side=14))
        make_current = draw(st.booleans())
        resized = [e[2] for e in edits if e[0] == "resize"]
        shapes[f"v{i}"] = resized[-1] if resized else shapes[prev or current]
        current = f"v{i}" if make_current else current
        steps.append((prev, make_current, edits))
    doomed = draw(st.sets(st.sampled_from([f"v{i}" for i in range(n)]), min_size=1))
    return shape, chunks, steps, sorted(doomed), draw(st.sampled_from(["ours", "ref"]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=histories())
def test_property_random_deletions(case):
    """Random branching histories of a 2-d dataset, random subsets deleted: model == both libraries."""
    shape, chunks, steps, doomed, writer = case
    with tempfile.TemporaryDirectory() as tmp:
        path, twin = f"{tmp}/p.h5", f"{tmp}/t.h5"
        plan = []
        for i, (prev, make_current, edits) in enumerate(steps):

            def edit(e, i=i, edits=edits):
                if i == 0:
                    e.create(
                        "d", (np.arange(np.prod(shape)) % 5).reshape(shape).astype("i4"), chunks=chunks, fillvalue=-1
                    )
                for kind, name, *args in edits:
                    if kind == "resize":
                        e.resize(name, *args)
                    else:
                        e.set(name, *args)

            plan.append((f"v{i}", prev, make_current, edit))
        model = play(writer, path, plan)
        shutil.copy(path, twin)
        run_delete("ours", path, doomed)
        run_delete("ref", twin, doomed)
        model.delete(doomed)
        check(path, model, libs=("ours", None))
        assert snapshot(twin) == model_snapshot(model)
        with h5py.File(path, "r") as f:  # hash table rows == raw_data slots, digests unique
            if "d" in f["_version_data"]:
                n = int(f["_version_data/d/hash_table"].attrs["largest_index"])
                rows = f["_version_data/d/hash_table"][:n]
                assert sorted(rows["shape"][:, 0].tolist()) == [k * chunks[0] for k in range(n)]
                assert f["_version_data/d/raw_data"].shape[0] == n * chunks[0]
                assert len({bytes(h) for h in rows["hash"]}) == n
