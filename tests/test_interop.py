"""Interoperability with versioned-hdf5 2.6.0, both directions, bit for bit.

One scenario (several dtypes, fill values, nested groups, attrs, gzip/lzf,
vlen strings, datasets that grow and shrink through edge chunks, deleted and
added datasets, a branch) is played by one library while a plain-numpy model
records what every version must contain; the file is then read by both
libraries and compared with the model. Then versions are committed
alternately by the two libraries on the same file, counting the rows of
raw_data and hash_table each commit adds.
"""

from __future__ import annotations

import copy
import datetime
import tempfile
from dataclasses import dataclass, field

import h5py
import numpy as np
import pytest
import versioned_hdf5
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xarray_vhdf5
from xarray_vhdf5._backend import chunk_hash
from xarray_vhdf5.testing.strategies import chunked_shapes

FORMAT_ATTRS = {"raw_data", "chunks", "committed", "prev_version", "timestamp"}
STR = h5py.string_dtype()


# -- a model of what each version holds ---------------------------------------


@dataclass
class Entry:
    data: np.ndarray
    chunks: tuple[int, ...]
    fill: object
    compression: str | None
    attrs: dict = field(default_factory=dict)


@dataclass
class State:
    datasets: dict[str, Entry] = field(default_factory=dict)
    groups: dict[str, dict] = field(default_factory=dict)  # subgroup path -> attrs


class Editor:
    """Apply an edit to a staged group and to the model at once."""

    def __init__(self, g, state: State):
        self.g, self.s = g, state

    def group(self, path):
        self.g.create_group(path)
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            self.s.groups.setdefault("/".join(parts[:i]), {})

    def create(self, path, data, chunks, fillvalue=None, compression=None, dtype=None, **kw):
        data = np.asarray(data, dtype=object if dtype is STR else None)
        self.g.create_dataset(
            path, data=data, chunks=chunks, fillvalue=fillvalue, compression=compression, dtype=dtype, **kw
        )
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.s.groups.setdefault("/".join(parts[:i]), {})
        if data.dtype.kind == "O":
            fill = None
        else:
            fill = fillvalue if fillvalue is not None else np.zeros((), data.dtype)[()]
        self.s.datasets[path] = Entry(data.copy(), tuple(chunks), fill, compression)

    def set(self, path, index, value):
        self.g[path][index] = value
        self.s.datasets[path].data[index] = value

    def resize(self, path, shape):
        self.g[path].resize(shape)
        e = self.s.datasets[path]
        new = np.empty(shape, e.data.dtype)
        new[...] = b"" if e.data.dtype.kind == "O" else e.fill
        common = tuple(slice(0, min(a, b)) for a, b in zip(shape, e.data.shape))
        new[common] = e.data[common]
        e.data = new

    def attr(self, path, key, value):
        self.g[path].attrs[key] = value
        if path in self.s.datasets:
            self.s.datasets[path].attrs[key] = value
        else:
            self.s.groups[path][key] = value

    def delete(self, path):
        del self.g[path]

        def kept(key):
            return key != path and not key.startswith(path + "/")

        self.s.datasets = {k: v for k, v in self.s.datasets.items() if kept(k)}
        self.s.groups = {k: v for k, v in self.s.groups.items() if kept(k)}


def step_v1(e: Editor):
    e.create("i1", np.arange(-50, 50, dtype="i1"), chunks=(16,))
    e.create("u2", np.arange(1000, dtype="u2") * 3, chunks=(128,), fillvalue=1)
    e.create("f4", np.linspace(-1, 1, 300, dtype="f4"), chunks=(64,), fillvalue=np.float32(np.nan))
    e.create("c16", (np.arange(40) + 1j * np.arange(40)[::-1]).astype("c16"), chunks=(16,))
    e.create("flags", np.arange(50) % 3 == 0, chunks=(20,))
    e.create("fixed", np.array([b"ab", b"", b"xyzzy", b"q"] * 5, dtype="S5"), chunks=(6,))
    e.create("rec", np.zeros(12, dtype=[("a", "<i4"), ("b", "<f8")]), chunks=(5,), fillvalue=None)
    e.set("rec", slice(3, 5), np.array([(1, 2.5), (3, -1.0)], dtype=[("a", "<i4"), ("b", "<f8")]))
    text = np.array(["alpha", "béta", "", "日本", "x" * 40] * 4, dtype=object)
    e.create("text", text, chunks=(7,), dtype=STR)
    e.create("g1/mat", np.arange(23 * 17, dtype="f8").reshape(23, 17), chunks=(5, 4), fillvalue=-9.5)
    e.create("g1/g2/cube", np.arange(6 * 5 * 4, dtype="i8").reshape(6, 5, 4), chunks=(4, 2, 3))
    gz = np.arange(2000, dtype="i4") // 10
    e.create("gz", gz, chunks=(256,), compression="gzip", compression_opts=5, shuffle=True)
    e.create("lz", np.tile(np.arange(100, dtype="f8"), 10), chunks=(100,), compression="lzf")
    e.attr("g1", "title", "group one")
    e.attr("g1/g2", "level", np.int32(2))
    e.attr("g1/mat", "units", "K")
    e.attr("g1/mat", "valid_range", np.array([0.0, 1e3]))
    e.attr("text", "encoding", b"utf-8")


def step_v2(e: Editor):
    e.resize("g1/mat", (27, 21))  # grow past edge chunks on both axes
    e.set("g1/mat", (slice(24, 27), slice(0, 3)), 1.25)
    e.resize("u2", (1100,))
    e.set("u2", 1050, 7)
    e.resize("f4", (170,))  # shrink into the middle of a chunk
    e.set("i1", 0, 99)
    e.set("text", 3, "changed")
    e.resize("text", (25,))
    e.set("gz", slice(500, 510), -1)
    e.attr("g1/mat", "units", "degC")


def step_v3(e: Editor):
    e.resize("g1/mat", (9, 6))
    e.resize("g1/g2/cube", (6, 7, 4))
    e.set("g1/g2/cube", (slice(None), slice(5, 7)), 3)
    e.delete("flags")
    e.create("g3/new", np.arange(10, dtype="u1"), chunks=(3,))
    e.resize("lz", (1050,))
    e.attr("g3", "made", "v3")


def step_branch(e: Editor):
    e.set("i1", slice(0, 10), -1)


SCENARIO = [
    ("v1", None, True, step_v1),
    ("v2", None, True, step_v2),
    ("v3", None, True, step_v3),
    ("b1", "v1", False, step_branch),
]


def play(lib, path):
    """Play SCENARIO with ``lib``; return the model {version: State} and {version: prev}."""
    states: dict[str, State] = {"__first_version__": State()}
    prevs = {}
    with h5py.File(path, "w") as f:
        vf = lib.VersionedHDF5File(f)
        for name, prev, make_current, step in SCENARIO:
            base = prev if prev is not None else vf.current_version
            state = copy.deepcopy(states[base])
            with vf.stage_version(name, prev_version=prev, make_current=make_current) as g:
                step(Editor(g, state))
            states[name] = state
            prevs[name] = base
    del states["__first_version__"]
    return states, prevs


# -- reading back --------------------------------------------------------------


def as_bytes_list(arr) -> list:
    return [v.encode() if isinstance(v, str) else bytes(v) for v in np.asarray(arr, dtype=object).ravel()]


def assert_data_equal(actual, expected: np.ndarray, where: str):
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, where
    if expected.dtype.kind == "O":
        assert as_bytes_list(actual) == as_bytes_list(expected), where
    else:
        assert actual.dtype == expected.dtype, where
        assert actual.tobytes() == expected.tobytes(), where


def assert_attrs_equal(actual: dict, expected: dict, where: str):
    actual = {k: v for k, v in actual.items() if k not in FORMAT_ATTRS}
    assert set(actual) == set(expected), where
    for key, value in expected.items():
        got = actual[key]
        if isinstance(value, bytes | str):
            assert as_bytes_list([got]) == as_bytes_list([value]), where
        else:
            np.testing.assert_array_equal(got, value, err_msg=f"{where}@{key}")
            assert np.asarray(got).dtype == np.asarray(value).dtype, where


def walk(group) -> tuple[dict, dict]:
    """(datasets, groups) by path below a version group of either library."""
    datasets, groups = {}, {}

    def visit(name, obj):
        if hasattr(obj, "dtype"):
            datasets[name] = obj
        else:
            groups[name] = obj

    group.visititems(visit)
    return datasets, groups


def check_version(group, state: State, where: str, ours: bool):
    datasets, groups = walk(group)
    assert set(datasets) == set(state.datasets), where
    assert set(groups) == set(state.groups), where
    for path, attrs in state.groups.items():
        assert_attrs_equal(dict(groups[path].attrs), attrs, f"{where}:{path}")
    for path, e in state.datasets.items():
        ds = datasets[path]
        w = f"{where}:{path}"
        assert_data_equal(ds[()], e.data, w)
        assert tuple(ds.shape) == e.data.shape, w
        if e.data.ndim >= 1 and e.data.shape[0] > 2:
            assert_data_equal(ds[1:3], e.data[1:3], w + "[1:3]")
        assert_attrs_equal(dict(ds.attrs), e.attrs, w)
        if ours:
            assert ds.chunks == e.chunks, w
            assert ds.compression == e.compression, w
            if e.fill is None:  # variable-length strings: h5py's answer, raw_data stores none
                assert ds.fillvalue == b"", w
            else:
                fill = np.asarray(ds.fillvalue, e.data.dtype)
                assert fill.tobytes() == np.asarray(e.fill, e.data.dtype).tobytes(), w
        else:
            assert tuple(ds.attrs["chunks"]) == e.chunks, w


def check_with_ours(path, states, prevs):
    with h5py.File(path, "r") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        assert set(vf.versions) == set(states)
        assert vf.current_version == "v3"
        assert vf[-1].version == "v2"
        for name, state in states.items():
            assert vf.version_info(name).prev_version == prevs[name]
            check_version(vf[name], state, f"ours reading {name}", ours=True)


def check_with_ref(path, states, mode):
    with h5py.File(path, mode) as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        assert set(vf.versions) == set(states)
        assert vf.current_version == "v3"
        for name, state in states.items():
            check_version(vf[name], state, f"versioned-hdf5 ({mode}) reading {name}", ours=False)
        assert vf[-1].attrs["prev_version"] == "v1"
        vf.close()


@pytest.fixture(scope="module")
def ref_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("interop") / "written_by_versioned_hdf5.h5"
    states, prevs = play(versioned_hdf5, path)
    return path, states, prevs


@pytest.fixture(scope="module")
def our_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("interop") / "written_by_xarray_vhdf5.h5"
    states, prevs = play(xarray_vhdf5, path)
    return path, states, prevs


def test_model_sanity(ref_file):
    """versioned-hdf5 reads its own file as the model says (validates the model itself)."""
    path, states, _ = ref_file
    check_with_ref(path, states, "r")


def test_ours_reads_versioned_hdf5_file(ref_file):
    path, states, prevs = ref_file
    check_with_ours(path, states, prevs)


def test_versioned_hdf5_reads_our_file(our_file):
    path, states, _ = our_file
    check_with_ref(path, states, "r")


def test_versioned_hdf5_wrappers_read_our_file(our_file):
    """In r+ mode versioned-hdf5 parses our virtual datasets into its own chunk maps."""
    path, states, _ = our_file
    check_with_ref(path, states, "r+")


def test_ours_reads_our_file(our_file):
    path, states, prevs = our_file
    check_with_ours(path, states, prevs)


def test_timestamps_interchange(ref_file, our_file):
    for path, _, _ in (ref_file, our_file):
        with h5py.File(path, "r") as f:
            ours = xarray_vhdf5.VersionedHDF5File(f)
            ref = versioned_hdf5.VersionedHDF5File(f)
            for name in ("v1", "v2", "v3", "b1"):
                stamp = f[f"_version_data/versions/{name}"].attrs["timestamp"]
                when = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f%z")
                assert ours[when].version == name
                assert ref[when].name == f"/_version_data/versions/{name}"
                later = when + datetime.timedelta(microseconds=1)
                ref_name = ref.get_version_by_timestamp(later).name.rsplit("/", 1)[1]
                assert ours.get_version_by_timestamp(later).version == ref_name
            ref.close()


# -- alternating commits -------------------------------------------------------


LIBS = {"ref": versioned_hdf5, "ours": xarray_vhdf5}


def counts(f, name):
    """(valid hash table rows, raw_data rows) of a dataset."""
    group = f[f"_version_data/{name}"]
    return int(group["hash_table"].attrs["largest_index"]), group["raw_data"].shape[0]


def commit_with(lib_name, path, version, edit):
    with h5py.File(path, "r+") as f:
        vf = LIBS[lib_name].VersionedHDF5File(f)
        with vf.stage_version(version) as g:
            edit(g)
        if lib_name == "ref":
            vf.close()


def read_with(lib_name, path, version, name):
    with h5py.File(path, "r+" if lib_name == "ref" else "r") as f:
        vf = LIBS[lib_name].VersionedHDF5File(f)
        out = vf[version][name][()]
        if lib_name == "ref":
            vf.close()
        return out


@pytest.mark.parametrize("first", ["ref", "ours"])
def test_alternating_commits_reuse_chunks(tmp_path, first):
    """Each library builds on the other's versions: unchanged chunks are reused, only changed ones added."""
    other = {"ref": "ours", "ours": "ref"}
    path = tmp_path / "alt.h5"
    h5py.File(path, "w").close()
    line = np.arange(1000, dtype="f8")  # 10 chunks of 100
    grid = np.arange(40 * 30, dtype="i4").reshape(40, 30)  # 4 x 3 chunks of (10, 10)
    truth = {}

    def v0(g):
        g.create_dataset("line", data=line, chunks=(100,))
        g.create_dataset("grp/grid", data=grid, chunks=(10, 10), fillvalue=-1)
        text = np.array(["a", "b", "c", "d", "e"], dtype=object)
        g.create_dataset("text", data=text, dtype=STR, chunks=(2,))

    commit_with(first, path, "v0", v0)
    truth["v0"] = (line.copy(), grid.copy())
    with h5py.File(path, "r") as f:
        assert counts(f, "line") == (10, 1000) and counts(f, "grp/grid") == (12, 120)

    def e1(L, G):
        L[5] = -5.0
        G[0, 0] = 0  # the value it already has

    def e2(L, G):
        L[300:500] = 7.0  # two chunks, identical
        G[10:20, :] = 3  # three chunks, identical

    def e3(L, G):
        L[5] = 5.0  # back to v0's chunk
        G[35, 29] = -2

    def e4(L, G):
        L[:] = line  # all back to v0
        G[:, :] = grid

    def e5(L, G):
        L[999] = 1.5
        G[39, 0] = 1

    # (edit, new chunks expected in line, in grid), each applied by the next library in turn
    edits = [(e1, 1, 0), (e2, 1, 1), (e3, 0, 1), (e4, 0, 0), (e5, 1, 1)]
    lib = first
    cur_line, cur_grid = line.copy(), grid.copy()
    for i, (edit, new_line, new_grid) in enumerate(edits, start=1):
        lib = other[lib]
        with h5py.File(path, "r") as f:
            before = counts(f, "line"), counts(f, "grp/grid"), counts(f, "text")
        edit(cur_line, cur_grid)

        commit_with(lib, path, f"v{i}", lambda g, edit=edit: edit(g["line"], g["grp/grid"]))
        truth[f"v{i}"] = (cur_line.copy(), cur_grid.copy())
        with h5py.File(path, "r") as f:
            after = counts(f, "line"), counts(f, "grp/grid"), counts(f, "text")
        assert after[0] == (before[0][0] + new_line, before[0][1] + 100 * new_line), (i, lib)
        assert after[1] == (before[1][0] + new_grid, before[1][1] + 10 * new_grid), (i, lib)
        assert after[2] == before[2], (i, lib)  # the untouched dataset is carried, never rewritten

    # every version reads the same through both libraries
    for version, (L, G) in truth.items():
        for reader in ("ref", "ours"):
            assert read_with(reader, path, version, "line").tobytes() == L.tobytes(), (version, reader)
            assert read_with(reader, path, version, "grp/grid").tobytes() == G.tobytes(), (version, reader)
            assert as_bytes_list(read_with(reader, path, version, "text")) == [b"a", b"b", b"c", b"d", b"e"]
    # the hash table rows are the digests of the stored chunks, whoever wrote them
    with h5py.File(path, "r") as f:
        raw = f["_version_data/line/raw_data"]
        for row in f["_version_data/line/hash_table"][: counts(f, "line")[0]]:
            start, stop = row["shape"]
            assert bytes(row["hash"]) == chunk_hash(raw[start:stop])


def test_alternating_new_datasets_and_growth(tmp_path):
    """Datasets created, grown and shrunk by one library are extended by the other."""
    path = tmp_path / "grow.h5"
    h5py.File(path, "w").close()
    expected = np.arange(25, dtype="i8")

    commit_with("ref", path, "a", lambda g: g.create_dataset("x", data=expected, chunks=(10,), fillvalue=-1))

    def grow(g):
        g["x"].resize((37,))
        g["x"][30:] = 4

    commit_with("ours", path, "b", grow)
    expected_b = np.r_[expected, np.full(5, -1), np.full(7, 4)]

    def shrink(g):
        g["x"].resize((12,))
        g.create_dataset("y", data=np.ones((3, 4)), chunks=(2, 2))

    commit_with("ref", path, "c", shrink)

    def regrow(g):
        g["x"].resize((30,))
        g["y"][2, 3] = 5.0

    commit_with("ours", path, "d", regrow)
    expected_d = np.r_[expected[:12], np.full(18, -1)]
    y_d = np.ones((3, 4))
    y_d[2, 3] = 5.0
    for reader in ("ref", "ours"):
        assert read_with(reader, path, "a", "x").tolist() == expected.tolist()
        assert read_with(reader, path, "b", "x").tolist() == expected_b.tolist()
        assert read_with(reader, path, "c", "x").tolist() == expected[:12].tolist()
        assert read_with(reader, path, "d", "x").tolist() == expected_d.tolist()
        np.testing.assert_array_equal(read_with(reader, path, "d", "y"), y_d)
    with h5py.File(path, "r") as f:
        # a (ref): 3 chunks, the last an edge of 5 points; b (ours): chunk 2 becomes full, chunk 3 is
        # an edge of 7; c (ref): chunk 1 trimmed to 2 points; d (ours): chunk 1 full again (padded
        # with the fill value), chunk 2 all fill value: not stored.
        table = f["_version_data/x/hash_table"][: counts(f, "x")[0]]
        rows = [tuple(int(v) for v in r) for r in table["shape"]]
        assert rows == [(0, 10), (10, 20), (20, 25), (30, 40), (40, 47), (50, 52), (60, 70)]


def test_interrupted_commit_leftovers_are_overwritten(tmp_path):
    """Rows past largest_index (left by a crashed commit) are garbage: we write over them,
    as versioned-hdf5 does."""
    path = tmp_path / "crash.h5"
    with h5py.File(path, "w") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(20, dtype="i4"), chunks=(10,))
        vf.close()
        raw, ht = f["_version_data/x/raw_data"], f["_version_data/x/hash_table"]
        raw.resize((40,))
        raw[20:40] = 666
        ht.resize((4,))
        ht[2] = (np.full(32, 1, "u1"), (20, 30))  # a row the crashed commit never validated
    with h5py.File(path, "r+") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][0] = 100
        table = f["_version_data/x/hash_table"]
        assert [tuple(r) for r in table[:3]["shape"]] == [(0, 10), (10, 20), (20, 30)]
        assert f["_version_data/x/hash_table"].attrs["largest_index"] == 3
    with h5py.File(path, "r+") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        np.testing.assert_array_equal(vf["v2"]["x"][()], np.r_[100, np.arange(1, 20)])
        with vf.stage_version("v3") as g:
            g["x"][15] = -15
        np.testing.assert_array_equal(vf["v3"]["x"][()], np.r_[100, np.arange(1, 15), -15, np.arange(16, 20)])
        vf.close()
    with h5py.File(path, "r") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        np.testing.assert_array_equal(vf["v1"]["x"][()], np.arange(20))
        np.testing.assert_array_equal(vf["v3"]["x"][()], np.r_[100, np.arange(1, 15), -15, np.arange(16, 20)])
        assert f["_version_data/x/hash_table"].attrs["largest_index"] == 4


def _reference_v1(f: h5py.File) -> versioned_hdf5.VersionedHDF5File:
    """versioned-hdf5's version ``v1`` (``x = arange(5)``, chunks (2,), 2020-01-01 UTC) in ``f``."""
    vf = versioned_hdf5.VersionedHDF5File(f)
    when = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    with vf.stage_version("v1", timestamp=when) as g:
        g.create_dataset("x", data=np.arange(5), chunks=(2,))
    return vf


def test_interrupted_versioned_hdf5_commit_is_not_a_version(tmp_path):
    """A crash inside versioned-hdf5's commit leaves a group with committed=False, and
    current_version already pointing at it: that group is not a version for us. Read
    only, the other versions read; opened writable, the file is repaired first
    (``versions.openrepair``): current_version back on v1, the group deleted."""
    path = tmp_path / "crashed.h5"
    with h5py.File(path, "w") as f:
        _reference_v1(f).close()
        group = versioned_hdf5.versions.create_version_group(f, "crashed")
        group["x"][0] = 100  # staged in memory only; the commit never happens
        f["_version_data/versions"].attrs["current_version"] = "crashed"  # commit_version's first write
        del group
    with h5py.File(path, "r") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        assert vf.versions == ["v1"]
        assert "crashed" not in vf
        with pytest.raises(xarray_vhdf5.VersionNotFoundError, match="never committed") as info:
            vf[None]
        assert "'v1'" in str(info.value) and "vhdf5 check --repair" in str(info.value)
        with pytest.raises(xarray_vhdf5.VersionNotFoundError):
            vf["crashed"]
        assert vf[datetime.datetime(2100, 1, 1)].version == "v1"
    with h5py.File(path, "r+") as f:
        with pytest.warns(xarray_vhdf5.RepairedFileWarning, match="crashed"):
            vf = xarray_vhdf5.VersionedHDF5File(f)
        assert vf.versions == ["v1"] and vf.current_version == "v1"
        assert "crashed" not in f["_version_data/versions"]
        with vf.stage_version("v2") as g:
            g["x"][1] = -1
        assert vf.current_version == "v2"
        assert vf["v2"]["x"][()].tolist() == [0, -1, 2, 3, 4]
    with h5py.File(path, "r") as f:  # versioned-hdf5 reads the repaired file
        assert versioned_hdf5.VersionedHDF5File(f)["v2"]["x"][()].tolist() == [0, -1, 2, 3, 4]


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_group_without_timestamp_is_not_a_version(tmp_path, mode):
    """A group made by hand in the versions group (no ``timestamp``) does not keep the file
    from opening: it is not a version, the others read, and nothing is changed on disk."""
    path = tmp_path / "stray.h5"
    with h5py.File(path, "w") as f:
        _reference_v1(f)
        f["_version_data/versions"].create_group("stray").attrs["note"] = "made by hand"
    with h5py.File(path, mode) as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        assert vf.versions == ["v1"]
        assert vf.current_version == "v1"
        with pytest.raises(xarray_vhdf5.VersionNotFoundError):
            vf["stray"]
        assert vf[datetime.datetime(2100, 1, 1)].version == "v1"
        np.testing.assert_array_equal(vf["v1"]["x"][()], np.arange(5))
        if mode == "r+":
            with pytest.raises(xarray_vhdf5.VersionExistsError):
                with vf.stage_version("stray"):
                    pass
            with vf.stage_version("v2") as g:
                g["x"][0] = 7
            assert vf.versions == ["v1", "v2"]
    with h5py.File(path, "r") as f:
        assert dict(f["_version_data/versions/stray"].attrs) == {"note": "made by hand"}
        vf = versioned_hdf5.VersionedHDF5File(f)  # still versioned-hdf5's file
        np.testing.assert_array_equal(vf["v1"]["x"][()], np.arange(5))
        if mode == "r+":
            np.testing.assert_array_equal(vf["v2"]["x"][()], [7, 1, 2, 3, 4])


@pytest.mark.parametrize("writer", ["ref", "ours"])
def test_edge_cases_read_alike(tmp_path, writer):
    """Empty datasets, StringDType data, a compound fill value, shrinking to nothing and back."""
    path = tmp_path / "edge.h5"
    h5py.File(path, "w").close()
    rec_fill = np.array((1, 2.5), "i4,f8")[()]

    def v1(g):
        g.create_dataset("e", data=np.zeros((0,)), chunks=(4,))
        g.create_dataset("e2", data=np.zeros((0, 3), "i2"), chunks=(4, 3))
        g.create_dataset("sd", data=np.array(["a", "bb", "ccc"], dtype=np.dtypes.StringDType()), chunks=(2,))
        g.create_dataset("rec", data=np.zeros(6, "i4,f8"), chunks=(4,), fillvalue=rec_fill)
        g.create_dataset("x", data=np.arange(6), chunks=(4,))

    def v2(g):
        g["e"].resize((6,))
        g["e"][1] = 1
        g["x"].resize((0,))
        g["rec"].resize((10,))
        g["sd"][0] = "zz"

    def v3(g):
        g["x"].resize((3,))
        g["e2"].resize((2, 3))

    for name, edit in [("v1", v1), ("v2", v2), ("v3", v3)]:
        commit_with(writer, path, name, edit)
    rec_v2 = np.zeros(10, "i4,f8")
    rec_v2[6:] = rec_fill
    expected = {
        ("v1", "e"): np.zeros(0),
        ("v2", "e"): np.array([0, 1, 0, 0, 0, 0.0]),
        ("v1", "e2"): np.zeros((0, 3), "i2"),
        ("v3", "e2"): np.zeros((2, 3), "i2"),
        ("v2", "rec"): rec_v2,
        ("v1", "x"): np.arange(6),
        ("v2", "x"): np.zeros(0, "i8"),
        ("v3", "x"): np.zeros(3, "i8"),
    }
    for reader in ("ref", "ours"):
        for (version, name), value in expected.items():
            got = read_with(reader, path, version, name)
            assert got.dtype == value.dtype and got.shape == value.shape, (reader, version, name)
            assert got.tobytes() == value.tobytes(), (reader, version, name)
        assert as_bytes_list(read_with(reader, path, "v1", "sd")) == [b"a", b"bb", b"ccc"]
        assert as_bytes_list(read_with(reader, path, "v2", "sd")) == [b"zz", b"bb", b"ccc"]
    with h5py.File(path, "r") as f:
        assert h5py.check_string_dtype(f["_version_data/sd/raw_data"].dtype) is not None
        assert f["_version_data/versions/v1/e"].is_virtual
        assert counts(f, "e") == (1, 4)


@st.composite
def alternating_edits(draw):
    """A 2-d dataset, then 1-4 steps of 1-3 writes or resizes, each step by either library.

    Writes may reach past the current shape: the staged datasets clip them, as numpy does.
    """
    shape, chunks = draw(
        chunked_shapes(
            min_ndim=2, max_ndim=2, max_points=None, min_side=1, max_side=14, max_chunk=5, chunk_overhang=None
        )
    )
    fill = draw(st.sampled_from([0, -1]))
    steps = []
    for _ in range(draw(st.integers(1, 4))):
        writer = draw(st.sampled_from(["ref", "ours"]))
        ops = []
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()):
                ops.append(("resize", (draw(st.integers(0, 16)), draw(st.integers(0, 10)))))
            else:
                r0, c0 = draw(st.integers(0, 15)), draw(st.integers(0, 9))
                rows = slice(r0, r0 + draw(st.integers(1, 6)))
                cols = slice(c0, c0 + draw(st.integers(1, 4)))
                ops.append(("set", (rows, cols), draw(st.sampled_from([fill, 5, 7]))))
        steps.append((writer, ops))
    return shape, chunks, fill, draw(st.sampled_from(["ref", "ours"])), steps


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=alternating_edits())
def test_property_alternating_edits(case):
    """Random resizes and writes of a 2-d dataset, committed by either library in turn."""
    shape, chunks, fill, first, steps = case
    data = (np.arange(shape[0] * shape[1]).reshape(shape) % 4).astype("i4")
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/p.h5"
        h5py.File(path, "w").close()

        def create(g):
            g.create_dataset("d", data=data, chunks=chunks, fillvalue=fill)

        commit_with(first, path, "v0", create)
        truth = {"v0": data.copy()}
        current = data.copy()
        for i, (writer, ops) in enumerate(steps, start=1):
            for op in ops:
                if op[0] == "resize":
                    new = np.full(op[1], fill, "i4")
                    common = tuple(slice(0, min(a, b)) for a, b in zip(op[1], current.shape))
                    new[common] = current[common]
                    current = new
                else:
                    current[op[1]] = op[2]

            def edit(g, ops=ops):
                for op in ops:
                    if op[0] == "resize":
                        g["d"].resize(op[1])
                    else:
                        g["d"][op[1]] = op[2]

            commit_with(writer, path, f"v{i}", edit)
            truth[f"v{i}"] = current.copy()
        for reader in ("ref", "ours"):
            for version, expected in truth.items():
                got = read_with(reader, path, version, "d")
                assert got.shape == expected.shape and got.tobytes() == expected.tobytes(), (reader, version)
        with h5py.File(path, "r") as f:
            raw = f["_version_data/d/raw_data"]
            n, _ = counts(f, "d")
            rows = f["_version_data/d/hash_table"][:n]
            starts = rows["shape"][:, 0]
            assert len(set(starts.tolist())) == n and all(s % chunks[0] == 0 for s in starts)
            digests = [bytes(h) for h in rows["hash"]]
            assert len(set(digests)) == n
            # Each row is the digest of its chunk, trimmed to (stop - start) rows and to one
            # of the widths a chunk had along axis 1 (raw_data pads it to chunks[1]).
            widths = {
                min(chunks[1], t.shape[1] - c * chunks[1])
                for t in truth.values()
                for c in range(-(-t.shape[1] // chunks[1]))
            }
            for digest, (start, stop) in zip(digests, rows["shape"]):
                block = raw[start:stop]
                assert any(chunk_hash(block[:, :w]) == digest for w in widths)
