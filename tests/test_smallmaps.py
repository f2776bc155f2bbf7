"""The file's map log of small datasets (``_versions/smallmaps.py``).

Checked against the mappings libhdf5 decodes (``reader_history._decoded``, the
map a reader builds without the log) and against reading each version on its
own, over random histories (hypothesis): several small datasets written,
resized or carried unchanged, branches, commits through a new handle each.
Then every way a row stops holding: rows a stopped writer left past the
commit point, a row of another timestamp, rows that do not fill their grid or
name impossible chunks, a deletion, versioned-hdf5's commits and deletion.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import versioned_hdf5
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xarray_vhdf5 as xv
from xarray_vhdf5._backend.h5attrs import read_attr, write_attr
from xarray_vhdf5._backend.h5objects import object_address
from xarray_vhdf5._versions import bookkeeping, chunkmaps, reader_history, smallmaps
from xarray_vhdf5._versions.index import to_micros
from xarray_vhdf5._versions.registry import VersionRegistry

NAMES = ("a", "grp/b", "c")


def logged(f: h5py.File, path: str) -> dict:
    """The log's maps of dataset ``path`` in every version of ``f`` (name -> (shape, numbers))."""
    registry = VersionRegistry(f)
    raw = f[f"_version_data/{path}/raw_data"]
    log = smallmaps.SmallMaps.load(bookkeeping.open_group(f))
    if log is None:
        return {}
    wanted = [(n, to_micros(registry.info(n).timestamp)) for n in registry.names()]
    return log.maps(path, tuple(raw.chunks), chunkmaps.table_owner(raw), wanted)


def decoded(f: h5py.File, path: str) -> dict:
    """Every version's map of ``path`` from its mappings, as a reader without the log builds it."""
    raw = f[f"_version_data/{path}/raw_data"]
    fill = np.asarray(raw.fillvalue, raw.dtype).tobytes()
    found = {}
    for name in VersionRegistry(f).names():
        vds = f.get(f"_version_data/versions/{name}/{path}")
        if vds is not None:
            found[name] = reader_history._decoded(vds, raw, tuple(raw.chunks), fill)
    return found


def assert_logged_right(f: h5py.File, path: str, expect: int) -> None:
    got, want = logged(f, path), decoded(f, path)
    assert len(got) == expect, (path, sorted(got), sorted(want))
    for name, (shape, numbers) in got.items():
        assert want[name][0] == shape, name
        np.testing.assert_array_equal(numbers, want[name][1], err_msg=name)


def assert_reads_match(path, dataset: str, key=np.s_[::2]) -> None:
    with xv.VersionedHDF5File.open(path) as reader:
        got = reader.read_versions(dataset, key)
        want = np.stack([np.asarray(reader[v][dataset][key]) for v in reader.versions])
    np.testing.assert_array_equal(got, want)


def rows_of(f: h5py.File) -> np.ndarray:
    group = bookkeeping.open_group(f)[smallmaps.LOG]
    return group["rows"][: int(read_attr(group.id, "state")[1])]


#: One step: (parent: None for the current version, else an index into the versions so far),
#: per dataset None (carried unchanged) or (new length, where to write, how much).
steps = st.lists(
    st.tuples(
        st.none() | st.integers(0, 20),
        st.tuples(*[st.none() | st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(1, 12))] * 3),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_the_log_holds_every_small_datasets_map(tmp_path_factory, steps):
    path = tmp_path_factory.mktemp("small") / "h.h5"
    rng = np.random.default_rng(len(steps))
    with h5py.File(path, "w") as f:
        with xv.VersionedHDF5File(f).stage_version("v0") as g:  # 3 datasets of 4 chunks of 5
            for name in NAMES:
                g.create_dataset(name, data=rng.random(20), chunks=(5,), maxshape=(None,), fillvalue=-1.0)
    names = ["v0"]
    for k, (parent, edits, reopen) in enumerate(steps, start=1):
        prev = None if parent is None else names[parent % len(names)]
        opener = xv.open_file(path, "r+") if reopen else h5py.File(path, "r+")
        with opener as f, xv.VersionedHDF5File(f).stage_version(f"v{k}", prev_version=prev) as g:
            for name, edit in zip(NAMES, edits):
                if edit is not None:
                    n, at, size = edit
                    g[name].resize((n,))
                    g[name][at : at + size] = rng.random(len(range(n)[at : at + size]))
        names.append(f"v{k}")
    with h5py.File(path, "r") as f:
        for name in NAMES:
            assert_logged_right(f, name, len(names))
        assert rows_of(f).shape[0] == 3 * len(names)
    with xv.VersionedHDF5File.open(path) as reader:
        common = {name: min(reader[v][name].shape[0] for v in names) for name in NAMES}
    for name in NAMES:
        assert_reads_match(path, name, np.s_[: common[name] : 2])


def history(path, n: int = 5) -> None:
    """v0..v{n-1}: ``a`` (30 points in chunks of 4) written at point k, ``b`` carried unchanged."""
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        for k in range(n):
            with vf.stage_version(f"v{k}") as g:
                if k == 0:
                    g.create_dataset("a", data=np.arange(30.0), chunks=(4,))
                    g.create_dataset("b", data=np.arange(7), chunks=(3,))
                else:
                    g["a"][k] = -k


def no_decoding(monkeypatch) -> list:
    used: list = []
    monkeypatch.setattr(reader_history, "_decoded", lambda *a: used.append(a) or None)
    monkeypatch.setattr(reader_history, "resolve_manifest", lambda *a, **k: used.append(a))
    return used


def test_reads_take_no_mapping_and_one_append_a_commit(tmp_path, monkeypatch):
    path = tmp_path / "h.h5"
    history(path)
    with h5py.File(path, "r") as f:
        rows = rows_of(f)
        assert rows.shape[0] == 10  # a and b in each of 5 versions, one append a commit
        state = read_attr(bookkeeping.open_group(f)[smallmaps.LOG].id, "state")
        assert state.tolist() == [smallmaps.FORMAT, 10, 5 * 8 + 3]  # b's copies share v0's values
    used = no_decoding(monkeypatch)
    with xv.VersionedHDF5File.open(path) as reader:
        got = reader.read_versions("a", np.s_[:6])
        got_b = reader.read_versions("b", 2)
    assert used == []
    want = np.tile(np.arange(6.0), (5, 1))  # version j wrote a[k] = -k for k = 1..j
    for j in range(5):
        want[j, 1 : j + 1] = -np.arange(1.0, j + 1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_b, np.full(5, 2))


def test_a_carried_datasets_source_row_is_found_from_a_new_process(tmp_path):
    """A commit through a fresh handle (a new process each day) copies the carried dataset's row."""
    path = tmp_path / "h.h5"
    history(path, 2)
    for k in range(2, 4):
        with xv.open_file(path, "r+") as f, xv.VersionedHDF5File(f).stage_version(f"v{k}") as g:
            g["a"][k] = -k
    with h5py.File(path, "r") as f:
        assert_logged_right(f, "b", 4)
        assert_logged_right(f, "a", 4)


def test_rows_past_the_commit_point_are_overwritten(tmp_path):
    path = tmp_path / "h.h5"
    history(path, 3)
    with h5py.File(path, "r+") as f:  # a stopped writer: rows and values written, no commit point
        group = bookkeeping.open_group(f)[smallmaps.LOG]
        n, m = (int(v) for v in read_attr(group.id, "state")[1:])
        group["rows"].resize((n + 3, group["rows"].shape[1]))
        group["rows"][n:] = 7
        group["numbers"].resize((m + 20,))
        group["numbers"][m:] = 99
    with h5py.File(path, "r+") as f:
        with xv.VersionedHDF5File(f).stage_version("v3") as g:
            g["a"][3] = -3.0
        assert rows_of(f).shape[0] == 8
        assert_logged_right(f, "a", 4)
        assert_logged_right(f, "b", 4)
    assert_reads_match(path, "a")


@pytest.mark.parametrize(
    "damage",
    [
        "timestamp",  # a row of another commit under the version's name
        "count",  # values that do not fill the row's grid
        "numbers",  # a chunk number below -1
        "past",  # a chunk past raw_data's committed ones
        "first",  # values past the commit point
        "shape",  # a shape past the rank
    ],
)
def test_a_row_that_does_not_hold_makes_the_reader_decode(tmp_path, damage):
    path = tmp_path / "h.h5"
    history(path, 3)
    with h5py.File(path, "r+") as f:
        group = bookkeeping.open_group(f)[smallmaps.LOG]
        rows = group["rows"]
        i = 2  # v1's row of a
        assert rows[i, 0] == smallmaps.name_digest("a") and rows[i, 3] == smallmaps.name_digest("v1")
        if damage == "timestamp":
            rows[i, 4] += 1
        elif damage == "count":
            rows[i, 6] -= 1
        elif damage == "numbers":
            group["numbers"][int(rows[i, 5])] = -2
        elif damage == "past":
            group["numbers"][int(rows[i, 5])] = 10**6
        elif damage == "first":
            rows[i, 5] = int(read_attr(group.id, "state")[2])
        else:
            rows[i, 8 + 1] = 5
        got = logged(f, "a")
        if damage == "past":  # the log cannot know: read_versions checks raw_data's committed chunks
            assert set(got) == {"v0", "v1", "v2"}
        else:
            assert set(got) == {"v0", "v2"}
    assert_reads_match(path, "a", np.s_[:])


def test_a_deletion_drops_the_log_and_versioned_hdf5_leaves_it_unused(tmp_path):
    path = tmp_path / "h.h5"
    history(path, 4)
    with h5py.File(path, "r+") as f:
        xv.delete_versions(f, ["v1"])
        assert smallmaps.LOG not in bookkeeping.open_group(f)
        with xv.VersionedHDF5File(f).stage_version("v4") as g:
            g["a"][1] = 9.0
        assert set(logged(f, "a")) == {"v4"}  # a new log, from this commit on
        assert set(logged(f, "b")) == set()  # b's source row went with the old log
    with h5py.File(path, "r+") as f:  # versioned-hdf5 commits: no row; its deletion: a new hash table
        with versioned_hdf5.VersionedHDF5File(f).stage_version("w5") as g:
            g["a"][2] = 8.0
        assert set(logged(f, "a")) == {"v4"}
        versioned_hdf5.delete_versions(f, ["v2"])
        assert logged(f, "a") == {}
    assert_reads_match(path, "a")
    assert_reads_match(path, "b")


def test_a_dataset_growing_past_min_chunks_moves_to_its_own_log(tmp_path, monkeypatch):
    """Versions of fewer than MIN_CHUNKS chunks come from this log, later ones from the dataset's own."""
    path = tmp_path / "h.h5"
    n = chunkmaps.MIN_CHUNKS
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        for k, size in enumerate([n - 2, n - 1, n + 1, n + 5]):
            with vf.stage_version(f"v{k}") as g:
                if k == 0:
                    g.create_dataset("t", data=np.arange(size), chunks=(1,), maxshape=(None,))
                else:
                    g["t"].resize((size,))
                    g["t"][-1] = -k
        assert set(logged(f, "t")) == {"v0", "v1"}
    used = no_decoding(monkeypatch)
    with xv.VersionedHDF5File.open(path) as reader:
        got = reader.read_versions("t", np.s_[: n - 2])
    assert used == [] and got.shape == (4, n - 2)
    monkeypatch.undo()
    assert_reads_match(path, "t", np.s_[: n - 2])
    assert_reads_match(path, "t", np.s_[n - 4 : n - 2])


def test_a_rank_above_max_ndim_is_not_logged(tmp_path):
    path = tmp_path / "h.h5"
    shape = (2,) * (smallmaps.MAX_NDIM + 1)
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("z", data=np.zeros(shape), chunks=(1,) * len(shape))
            g.create_dataset("a", data=np.zeros(3), chunks=(2,))
        with vf.stage_version("v1") as g:
            g["z"][(0,) * len(shape)] = 1.0
        assert smallmaps.name_digest("z") not in rows_of(f)[:, 0].tolist()
        assert smallmaps.name_digest("a") in rows_of(f)[:, 0].tolist()  # the 1-d dataset beside it is
        assert logged(f, "z") == {}
    assert_reads_match(path, "z", (0,) * len(shape))


def test_a_log_of_another_layout_is_replaced(tmp_path):
    path = tmp_path / "h.h5"
    history(path, 2)
    with h5py.File(path, "r+") as f:
        group = bookkeeping.open_group(f)[smallmaps.LOG]
        write_attr(group.id, "state", np.asarray([smallmaps.FORMAT + 1, 4, 11], np.int64))
        assert logged(f, "a") == {}
        with xv.VersionedHDF5File(f).stage_version("v2") as g:
            g["a"][2] = -2.0
        assert set(logged(f, "a")) == {"v2"}  # a new log; b's source row was in the old one
    assert_reads_match(path, "a")


def test_a_source_row_is_looked_for_among_the_last_rows_only(tmp_path, monkeypatch):
    """A carried dataset's source row is found in the first read of the log's tail or in the second; a
    branch from further back gets no copy, and its version is decoded."""
    monkeypatch.setattr(smallmaps, "_TAIL", 2)
    monkeypatch.setattr(smallmaps, "_SEARCHED", 6)
    path = tmp_path / "h.h5"
    history(path, 5)  # rows: v0 a b, v1 a b, ..., v4 a b
    with h5py.File(path, "r+") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("w2", prev_version="v2") as g:  # b's v2 row is rows 4 to 6 from the end
            g["a"][20] = 1.0
        with vf.stage_version("w0", prev_version="v0") as g:  # v0's rows are 12 from the end
            g["a"][21] = 1.0
        got = logged(f, "b")
        assert "w2" in got and "w0" not in got and len(got) == 6
        assert_logged_right(f, "a", 7)
    assert_reads_match(path, "b", 1)


def test_a_log_libhdf5_cannot_read_is_replaced_and_never_fails_a_read(tmp_path, monkeypatch):
    """``rows``' object header overwritten (as a killed plain-handle writer may tear it): read_versions
    decodes, the next commit moves the log aside and starts a new one, and no commit or read fails."""
    path = tmp_path / "h.h5"
    history(path, 3)
    with h5py.File(path, "r") as f:
        header = object_address(bookkeeping.open_group(f)[smallmaps.LOG]["rows"].id)
    with open(path, "r+b") as fh:  # the header's signature and version gone
        fh.seek(header)
        fh.write(b"\xff" * 8)
    with h5py.File(path, "r") as f:
        with pytest.raises((KeyError, RuntimeError, OSError)):
            bookkeeping.open_group(f)[smallmaps.LOG]["rows"]
    used = []
    decode = reader_history._decoded
    monkeypatch.setattr(reader_history, "_decoded", lambda *a: used.append(a) or decode(*a))
    assert_reads_match(path, "a")
    assert len(used) == 3  # every version decoded
    monkeypatch.undo()
    with h5py.File(path, "r+") as f:
        with xv.VersionedHDF5File(f).stage_version("v3") as g:
            g["a"][3] = -3.0
        assert set(logged(f, "a")) == {"v3"}  # a new log, from this commit on
        assert_logged_right(f, "a", 1)
    assert_reads_match(path, "a")


@pytest.mark.parametrize("member", ["rows", "numbers"])
def test_a_log_chunk_libhdf5_cannot_read_makes_the_reader_decode(tmp_path, monkeypatch, member):
    """A read of the log that libhdf5 refuses (a damaged chunk) leaves the log unused, not the read failed."""
    path = tmp_path / "h.h5"
    history(path, 3)
    real = smallmaps.read_rows

    def refused(dsid, start, out):
        if h5py.h5i.get_name(dsid).endswith(f"{smallmaps.LOG}/{member}".encode()):
            raise OSError("Can't synchronously read data (filter returned failure during read)")
        return real(dsid, start, out)

    monkeypatch.setattr(smallmaps, "read_rows", refused)
    used = []
    decode = reader_history._decoded
    monkeypatch.setattr(reader_history, "_decoded", lambda *a: used.append(a) or decode(*a))
    assert_reads_match(path, "a")
    assert len(used) == 3
