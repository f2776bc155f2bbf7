"""The map log (``_versions/maplog.py``): every version's chunk map of a dataset, as changes.

Checked against the per-version stored maps (``chunkmaps.MapReader``, the
other record of the same maps) and against reading each version on its own,
over random histories (hypothesis): shapes that grow and shrink on any axis,
branches (a parent that is not the last row), datasets carried unchanged.
Then every way the log stops holding: a tip that is not the last row's, rows
a stopped writer left past the commit point, a row whose timestamp is not
the version's, changes outside their grid, a deletion, versioned-hdf5.
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
from xarray_vhdf5._versions import bookkeeping, chunkmaps, maplog, mutation, reader_history
from xarray_vhdf5._versions.index import to_micros
from xarray_vhdf5._versions.registry import VersionRegistry

CHUNKS = (4, 3)


def logged_maps(f: h5py.File, path: str) -> dict:
    """The log's maps of every version of ``f`` (name -> (shape, numbers))."""
    registry = VersionRegistry(f)
    raw = f[f"_version_data/{path}/raw_data"]
    log = maplog.MapLog.load(bookkeeping.open_group(f), path, raw, chunkmaps.table_owner(raw))
    assert log is not None
    return log.maps((n, to_micros(registry.info(n).timestamp)) for n in registry.names())


def stored_maps(f: h5py.File, path: str) -> dict:
    """The per-version stored maps (name -> (shape, numbers)), where they hold."""
    raw = f[f"_version_data/{path}/raw_data"]
    reader = chunkmaps.MapReader(f, path, raw, raw.chunks)
    found = {n: reader.numbers(n) for n in VersionRegistry(f).names()}
    return {n: m for n, m in found.items() if m is not None}


def assert_same_maps(f: h5py.File, path: str, expect: int) -> None:
    logged, stored = logged_maps(f, path), stored_maps(f, path)
    assert set(logged) == set(stored) and len(logged) == expect
    for name, (shape, numbers) in stored.items():
        assert logged[name][0] == shape, name
        np.testing.assert_array_equal(logged[name][1], numbers, err_msg=name)


def assert_reads_match(path, dataset: str = "x", key=(slice(None), 1)) -> None:
    with xv.VersionedHDF5File.open(path) as reader:
        versions = reader.versions
        got = reader.read_versions(dataset, key)
        want = np.stack([np.asarray(reader[v][dataset][key]) for v in versions])
    np.testing.assert_array_equal(got, want)


#: One step of a history: (parent: None for the current version, else an index into the
#: versions so far), new shape of ``x``, the rectangle of ``x`` to write, whether ``y``
#: (a second dataset with a map) is written instead (``x`` carried unchanged).
steps = st.lists(
    st.tuples(
        st.none() | st.integers(0, 30),
        st.tuples(st.integers(33, 48), st.integers(25, 33)),
        st.tuples(st.integers(0, 40), st.integers(0, 30), st.integers(1, 12), st.integers(1, 9)),
        st.booleans(),
    ),
    min_size=1,
    max_size=7,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_the_log_holds_every_versions_map(tmp_path_factory, steps):
    path = tmp_path_factory.mktemp("maplog") / "h.h5"
    rng = np.random.default_rng(len(steps))
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v0") as g:  # 40 x 30 in chunks of 4 x 3: 100 chunks, a stored map
            g.create_dataset("x", data=rng.random((40, 30)), chunks=CHUNKS, maxshape=(None, None))
            g.create_dataset("y", data=np.zeros(1000), chunks=(10,))
        names = ["v0"]
        for k, (parent, shape, (r, c, h, w), other) in enumerate(steps, start=1):
            prev = None if parent is None else names[parent % len(names)]
            with vf.stage_version(f"v{k}", prev_version=prev) as g:
                if other:
                    g["y"][k] = k
                else:
                    g["x"].resize(shape)
                    rows, cols = slice(r, min(r + h, shape[0])), slice(c, min(c + w, shape[1]))
                    g["x"][rows, cols] = rng.random(g["x"][rows, cols].shape)
            names.append(f"v{k}")
        assert_same_maps(f, "x", len(names))
        assert_same_maps(f, "y", len(names))
    assert_reads_match(path, key=(slice(0, 33), slice(2, 25)))
    assert_reads_match(path, "y", key=np.s_[::3])


def history(path, n: int = 6) -> None:
    """v0..v{n-1}: ``x`` (40 x 30, chunks 4 x 3), version k writing row 4k."""
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        for k in range(n):
            with vf.stage_version(f"v{k}") as g:
                if k == 0:
                    g.create_dataset("x", data=np.arange(1200.0).reshape(40, 30), chunks=CHUNKS, maxshape=(None, None))
                else:
                    g["x"][4 * k, :] = -k


def log_group(f: h5py.File) -> h5py.Group:
    return bookkeeping.open_group(f)[maplog.log_path("x")]


def committed(log: h5py.Group) -> int:
    """The rows the log counts (the last value of its ``state``)."""
    return int(read_attr(log.id, "state")[3])


def test_rows_hold_changes_only(tmp_path):
    """Each row after the first lists the chunks its version remapped: a row of ``x`` is 10 chunks."""
    path = tmp_path / "h.h5"
    history(path)
    with h5py.File(path, "r") as f:
        log = log_group(f)
        rows = log["rows"][()]
        assert committed(log) == 6
        assert rows[:, 0].tolist() == [maplog.name_digest(f"v{k}") for k in range(6)]
        assert rows[:, 3].tolist() == [100, 10, 10, 10, 10, 10]  # first: every chunk; then one row of chunks
        assert rows[:, 6:].tolist() == [[40, 30]] * 6
        assert rows[0, 5] == -1 and rows[1:, 5].tolist() == rows[:-1, 1].tolist()  # each base: the version before
        assert log["changes"].shape == (150, 2)
        assert rows[:, 4].tolist() == [-1] + [maplog.name_digest(f"v{k}") for k in range(5)]
        assert_same_maps(f, "x", 6)


def test_rows_past_the_commit_point_are_overwritten(tmp_path):
    """A row a stopped writer appended but did not count is ignored, then written over; a row whose
    base has no row then has no base (it lists every chunk)."""
    path = tmp_path / "h.h5"
    history(path, 3)
    with h5py.File(path, "r+") as f:
        state = read_attr(log_group(f).id, "state")
        write_attr(log_group(f).id, "state", np.asarray([*state[:3], 2]))  # v2's row written, not counted
        assert set(logged_maps(f, "x")) == {"v0", "v1"}
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v3") as g:
            g["x"][0, 0] = 5.0
        digests = log_group(f)["rows"][:, 0].tolist()
        assert digests == [maplog.name_digest(v) for v in ("v0", "v1", "v3")] and committed(log_group(f)) == 3
        assert log_group(f)["rows"][2, 3] == 100  # its base v2 is not the last row's: it lists every chunk
        assert set(logged_maps(f, "x")) == {"v0", "v1", "v3"}
        stored = stored_maps(f, "x")
        for name, (shape, numbers) in logged_maps(f, "x").items():
            assert shape == stored[name][0]
            np.testing.assert_array_equal(numbers, stored[name][1])
    assert_reads_match(path)


def test_a_row_of_another_timestamp_serves_nobody(tmp_path):
    """A version deleted and committed again has another timestamp: its old row is not its map,
    nor the base of the rows after it."""
    path = tmp_path / "h.h5"
    history(path, 4)
    with h5py.File(path, "r+") as f:
        rows = log_group(f)["rows"]
        rows[1, 1] = rows[1, 1] - 1  # v1's timestamp
        assert set(logged_maps(f, "x")) == {"v0"}  # v2's base is v1's row, v3's v2's
    assert_reads_match(path)


def test_changes_outside_their_grid_make_the_reader_decode(tmp_path, monkeypatch):
    path = tmp_path / "h.h5"
    history(path, 4)
    with h5py.File(path, "r+") as f:
        log_group(f)["changes"][105] = (10_000, 0)  # v1's row: a chunk past the grid
        assert logged_maps(f, "x") == {}
    numbers = []
    original = chunkmaps.MapReader.numbers
    monkeypatch.setattr(
        chunkmaps.MapReader, "numbers", lambda self, v, s=None: numbers.append(v) or original(self, v, s)
    )
    assert_reads_match(path)
    assert sorted(set(numbers)) == ["v0", "v1", "v2", "v3"]  # the per-version maps serve instead


def test_the_log_serves_every_version_it_has(tmp_path, monkeypatch):
    """No per-version map is read and no mapping decoded when the log has every version."""
    path = tmp_path / "h.h5"
    history(path, 8)
    key = (slice(None), 1)
    with xv.VersionedHDF5File.open(path) as reader:
        want = np.stack([reader[v]["x"][key] for v in reader.versions])
    used = []
    monkeypatch.setattr(chunkmaps.MapReader, "numbers", lambda *a, **k: used.append(a) or None)
    monkeypatch.setattr(reader_history, "resolve_manifest", lambda *a, **k: used.append(a))
    with xv.VersionedHDF5File.open(path) as reader:
        np.testing.assert_array_equal(reader.read_versions("x", key), want)
    assert used == []


def test_one_read_per_distinct_set_of_chunks(tmp_path, monkeypatch):
    """Versions mapping the same chunks where the selection lies are read once: row 1 changes in v0 only."""
    path = tmp_path / "h.h5"
    history(path, 8)
    reads = []
    through = reader_history._through_manifest
    monkeypatch.setattr(reader_history, "_through_manifest", lambda m, a, p: reads.append(m) or through(m, a, p))
    with xv.VersionedHDF5File.open(path) as reader:
        got = reader.read_versions("x", (1, slice(None)))
        assert len(reads) == 1 and np.array_equal(got, np.tile(np.arange(30.0, 60.0), (8, 1)))
        got = reader.read_versions("x", (slice(None), 0))  # a column crosses every version's change
        assert len(reads) == 1 + 8
    assert_reads_match(path, key=(slice(None), 0))


def test_a_deletion_drops_the_log_and_versioned_hdf5_leaves_it_unused(tmp_path):
    path = tmp_path / "h.h5"
    history(path, 4)
    with h5py.File(path, "r+") as f:
        xv.delete_versions(f, ["v1"])
        assert maplog.log_path("x") not in bookkeeping.open_group(f)
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v4") as g:
            g["x"][1, 1] = 9.0
        assert set(logged_maps(f, "x")) == {"v4"}  # a new log, from this commit on
    with h5py.File(path, "r+") as f:  # versioned-hdf5 commits: no row; its deletion: a new hash table
        vf = versioned_hdf5.VersionedHDF5File(f)
        with vf.stage_version("w5") as g:
            g["x"][2, 2] = 8.0
        assert set(logged_maps(f, "x")) == {"v4"}
        versioned_hdf5.delete_versions(f, ["v2"])
        raw = f["_version_data/x/raw_data"]
        assert maplog.MapLog.load(bookkeeping.open_group(f), "x", raw, chunkmaps.table_owner(raw)) is None
    assert_reads_match(path)


@pytest.mark.parametrize("shape", [(0, 30), (40, 0)])
def test_a_version_without_a_map_between_two_with(tmp_path, shape):
    """An empty grid (fewer than MIN_CHUNKS chunks) gets no row; the next row follows the last one."""
    path = tmp_path / "h.h5"
    history(path, 2)
    with h5py.File(path, "r+") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"].resize(shape)
        with vf.stage_version("v3") as g:
            g["x"].resize((40, 30))
            g["x"][0, 0] = 1.0
        assert set(logged_maps(f, "x")) == {"v0", "v1", "v3"}
        assert_same_maps(f, "x", 3)
    assert_reads_match(path, key=(slice(0, 0), slice(0, 0)))


def test_the_tip_this_process_logged_is_used_only_while_it_is_the_last_row(tmp_path):
    """The in-process tip (the base of the next row) counts only for the log's last row: another
    writer's rows since, or a tip of another row, make the writer read the base's stored map."""
    path = tmp_path / "h.h5"
    history(path, 3)
    key = next(k for k in reversed(maplog._TIPS) if k[0] == "x")  # (path, owner): the last logged
    identity, numbers = maplog._TIPS[key]
    maplog._TIPS[key] = ((*identity[:2], identity[2] + 1, *identity[3:]), np.zeros_like(numbers))  # another row's
    with h5py.File(path, "r+") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v3") as g:
            g["x"][12, 0] = 5.0
        assert log_group(f)["rows"][3, 3] == 1  # one chunk against v2's stored map (against zeros: 100)
        assert_same_maps(f, "x", 4)
    assert_reads_match(path)


def test_the_tip_serves_commits_through_a_handle_opened_for_each(tmp_path, monkeypatch):
    """The journaled opener (``open_file``, the xarray writers) opens the file anew for each commit, and
    libhdf5 names a journaled file by its file object: the tip is keyed by the log, not that name, so
    the base's stored map is read once, not once a commit."""
    path = tmp_path / "h.h5"
    history(path, 2)
    read = []
    numbers = chunkmaps._numbers
    monkeypatch.setattr(chunkmaps, "_numbers", lambda *a: read.append(a[1]) or numbers(*a))
    names = []
    kept = []  # each journaled file object kept, so that no later one reuses its address (and repr)
    for k in range(2, 6):
        with xv.open_file(path, "r+") as f:
            kept.append(mutation._JOURNALED[f.id.fileno])
            names.append(h5py.h5f.get_name(f.id))
            with xv.VersionedHDF5File(f).stage_version(f"v{k}") as g:
                g["x"][4 * k, :] = -k
    assert len(set(names)) == 4, names  # libhdf5 named the file differently at each open
    assert len(read) <= 1, read
    with h5py.File(path, "r") as f:
        assert_same_maps(f, "x", 6)
    assert_reads_match(path)


@pytest.mark.parametrize("unlinked_first", [False, True])
def test_a_cache_whose_header_is_torn_is_moved_aside(tmp_path, monkeypatch, unlinked_first):
    """A deletion drops the maps and logs first; one that libhdf5 cannot unlink (a header a killed
    plain-handle writer tore: "bad object header version number") is parked, and the deletion goes on.

    ``unlinked_first``: libhdf5 removed the link before failing on the header (found by the kill
    harness: "Unable to move link (component not found)" in the next commit); nothing is parked.
    """
    path = tmp_path / "h.h5"
    history(path, 4)
    unlink = h5py.Group.__delitem__

    def torn(self, name):
        if name == "chunk_maps":
            if unlinked_first:
                unlink(self, name)
            raise KeyError("Couldn't delete link (bad object header version number)")
        unlink(self, name)

    monkeypatch.setattr(h5py.Group, "__delitem__", torn)
    with h5py.File(path, "r+") as f:
        xv.delete_versions(f, ["v1"])
        bk = bookkeeping.open_group(f)
        assert "chunk_maps" not in bk
        assert ("damaged_caches/chunk_maps" in bk) is not unlinked_first
        assert maplog.LOG not in bk
    monkeypatch.undo()
    with h5py.File(path, "r+") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v4") as g:
            g["x"][0, 0] = 7.0
    with xv.VersionedHDF5File.open(path) as reader:
        assert reader.versions == ["v0", "v2", "v3", "v4"]
        assert reader["v4"]["x"][0, 0] == 7.0 and reader["v2"]["x"][8, 0] == -2.0
    assert_reads_match(path)


def test_a_cache_under_a_torn_group_parks_the_group(tmp_path, monkeypatch):
    """A cache group whose own links are torn (found by the kill harness: "Unable to move link
    (incorrect cache entry type)" in the next commit) is parked whole: nothing under it can be
    looked up, unlinked or moved, and the commit that wanted to drop one of its members goes on."""
    path = tmp_path / "h.h5"
    history(path, 4)
    contains, unlink, move = h5py.Group.__contains__, h5py.Group.__delitem__, h5py.Group.move

    def torn(name) -> bool:
        return isinstance(name, str) and name.startswith("chunk_maps/")

    def torn_contains(self, name):
        if torn(name):
            raise RuntimeError("Unable to get link info (incorrect cache entry type)")
        return contains(self, name)

    def torn_unlink(self, name):
        if torn(name):
            raise RuntimeError("Couldn't delete link (incorrect cache entry type)")
        unlink(self, name)

    def torn_move(self, source, dest):
        if torn(source):
            raise ValueError("Unable to move link (incorrect cache entry type)")
        move(self, source, dest)

    monkeypatch.setattr(h5py.Group, "__contains__", torn_contains)
    monkeypatch.setattr(h5py.Group, "__delitem__", torn_unlink)
    monkeypatch.setattr(h5py.Group, "move", torn_move)
    with h5py.File(path, "r+") as f:
        bk = bookkeeping.open_group(f)
        bookkeeping.discard(bk, "chunk_maps/v2/x")
        monkeypatch.undo()
        assert "chunk_maps" not in bk and "damaged_caches/chunk_maps" in bk
    with h5py.File(path, "r+") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v4") as g:
            g["x"][0, 0] = 7.0
    assert_reads_match(path)
