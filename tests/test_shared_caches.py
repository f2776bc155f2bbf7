"""Commit caches shared between successive handles to one file (``_versions/caches.py``)."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

import xarray_vhdf5
import xarray_vhdf5._backend.hashtable as hashtable
import xarray_vhdf5._wrappers.chunked as chunked
from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions import forget_shared_caches
from xarray_vhdf5._versions.caches import COMMIT_TOKEN
from xarray_vhdf5.errors import StaleVersionError

SHAPE, CHUNKS = (40, 6), (10, 6)


@pytest.fixture
def counting(monkeypatch):
    """Count hash-table loads and chunk-map decodes (the O(history) reads the caches avoid)."""
    calls = {"table_loads": 0, "map_reads": 0}
    real_init = hashtable.HashTable.__init__
    real_map = chunked.build_slab_indices_and_offsets

    def init(self, dataset):
        calls["table_loads"] += 1
        real_init(self, dataset)

    def build(*args):
        calls["map_reads"] += 1
        return real_map(*args)

    monkeypatch.setattr(hashtable.HashTable, "__init__", init)
    monkeypatch.setattr(chunked, "build_slab_indices_and_offsets", build)
    forget_shared_caches()
    yield calls
    forget_shared_caches()


def _commit(path, name, edit):
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version(name) as g:
            edit(g)


def _create(g, data):
    g.create_dataset("x", data=data, chunks=CHUNKS)


def _first_version(f: h5py.File, data) -> VersionedHDF5File:
    """A handle on ``f`` after committing ``v1`` holding ``x`` = ``data``."""
    vf = VersionedHDF5File(f)
    with vf.stage_version("v1") as g:
        _create(g, data)
    return vf


#: The first version's data: float64 of shape SHAPE; read-only (tests copy before editing).
DATA = np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE)
DATA.flags.writeable = False


@pytest.fixture
def first(tmp_path):
    """``(h5py.File open for writing, VersionedHDF5File)`` with version v1 holding :data:`DATA`."""
    with h5py.File(tmp_path / "f.h5", "a") as f:
        yield f, _first_version(f, DATA)


def _read(path, version):
    with h5py.File(path, "r") as f:
        return VersionedHDF5File(f)[version]["x"][()]


def test_reopened_file_reuses_hash_table_and_chunk_map(tmp_path, counting):
    path = str(tmp_path / "f.h5")
    data = np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE)
    _commit(path, "v1", lambda g: _create(g, data))
    loads_after_first = counting["table_loads"]
    for k in range(2, 6):

        def edit(g, k=k):
            g["x"][k, 0] = -k

        _commit(path, f"v{k}", edit)
        data[k, 0] = -k
    # One load when the dataset was created; none for the four reopen-and-commit cycles.
    assert counting["table_loads"] == loads_after_first == 1
    assert counting["map_reads"] == 0
    np.testing.assert_array_equal(_read(path, "v5"), data)


def test_file_replaced_at_the_same_path_gets_fresh_caches(tmp_path, counting):
    path = str(tmp_path / "f.h5")
    a = np.zeros(SHAPE)
    _commit(path, "v1", lambda g: _create(g, a))
    _commit(path, "v2", lambda g: g["x"].__setitem__((0, 0), 1.0))
    # Another file with the same name and layout (the inode may well be reused).
    os.remove(path)
    b = np.full(SHAPE, 7.0)
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            _create(g, b)
        f["/__vhdf5__"].attrs.__delitem__(COMMIT_TOKEN)
    loads = counting["table_loads"]
    _commit(path, "v2", lambda g: g["x"].__setitem__((0, 0), 1.0))
    assert counting["table_loads"] == loads + 1  # no token: the table was read again
    expected = b.copy()
    expected[0, 0] = 1.0
    np.testing.assert_array_equal(_read(path, "v2"), expected)
    np.testing.assert_array_equal(_read(path, "v1"), b)


def test_versioned_hdf5_commits_in_between_are_seen(tmp_path, counting):
    versioned_hdf5 = pytest.importorskip("versioned_hdf5")
    path = str(tmp_path / "f.h5")
    data = np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE)
    _commit(path, "v1", lambda g: _create(g, data))
    _commit(path, "v2", lambda g: g["x"].__setitem__((1, 1), -1.0))
    data[1, 1] = -1.0
    with h5py.File(path, "a") as f:  # versioned-hdf5 adds chunks, then deletes v1
        vf = versioned_hdf5.VersionedHDF5File(f)
        with vf.stage_version("w3") as g:
            g["x"][25:35] = 5.0
        versioned_hdf5.delete_versions(f, ["v1"])
    data[25:35] = 5.0
    _commit(path, "v4", lambda g: g["x"].__setitem__((39, 5), 9.0))
    data[39, 5] = 9.0
    np.testing.assert_array_equal(_read(path, "v4"), data)
    with h5py.File(path, "r") as f:  # and versioned-hdf5 reads what we wrote
        np.testing.assert_array_equal(versioned_hdf5.VersionedHDF5File(f)["v4"]["x"][()], data)


def test_token_is_checked_only_when_the_index_was_written_again(tmp_path, counting, monkeypatch):
    """Commits appending to the version index keep the token without reading it back; a commit
    that finds the index stale (versioned-hdf5 committed meanwhile) puts it on the index written
    again, and a later handle shares the caches."""
    import xarray_vhdf5._versions.caches as caches

    versioned_hdf5 = pytest.importorskip("versioned_hdf5")
    path = str(tmp_path / "f.h5")
    data = np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE)
    reads = []
    real = caches._index_group
    monkeypatch.setattr(caches, "_index_group", lambda vdata: reads.append(1) or real(vdata))
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            _create(g, data)
        assert len(reads) == 1  # the first commit of these caches writes the token
        for k in range(2, 5):
            with vf.stage_version(f"v{k}") as g:
                g["x"][k, 0] = -k
        assert len(reads) == 1
        with vf.stage_version("v6") as g:
            g["x"][6, 0] = -6.0
            # versioned-hdf5 commits while v6 is staged: the index is stale when v6 is
            # committed, and written again by the registry (after v6's group exists).
            with versioned_hdf5.VersionedHDF5File(f).stage_version("w5", prev_version="v4") as h:
                h["x"][0, 0] = 5.0
        assert len(reads) == 2
        token = f[caches.bookkeeping.PATH].attrs[COMMIT_TOKEN]
    loads = counting["table_loads"]
    _commit(path, "v7", lambda g: g["x"].__setitem__((7, 0), -7.0))
    assert counting["table_loads"] == loads  # the token matched: the kept hash table was used
    with h5py.File(path, "r") as f:
        assert f[caches.bookkeeping.PATH].attrs[COMMIT_TOKEN] == token


def test_no_sharing_for_in_memory_files(counting):
    data = np.ones(SHAPE)
    with h5py.File("mem.h5", "w", driver="core", backing_store=False) as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            _create(g, data)
        vf2 = VersionedHDF5File(f)
        assert vf2._caches is not vf._caches
        with vf2.stage_version("v2") as g:
            g["x"][0, 0] = 2.0
        data[0, 0] = 2.0
        np.testing.assert_array_equal(vf2["v2"]["x"][()], data)


def test_kept_caches_do_not_hold_the_file_open(tmp_path, counting):
    import gc

    path = str(tmp_path / "f.h5")
    _commit(path, "v1", lambda g: _create(g, np.zeros(SHAPE)))

    def commit_without_closing():
        f = h5py.File(path, "a")  # left to the garbage collector
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][0, 0] = 3.0

    commit_without_closing()
    gc.collect()
    with h5py.File(path, "w"):  # libhdf5 refuses to truncate a file it still has open
        pass


def test_held_hash_tables_follow_a_rebuilt_table(tmp_path):
    from xarray_vhdf5._backend.hashtable import table_state
    from xarray_vhdf5._backend.held import OpenDatasets

    path = str(tmp_path / "f.h5")
    _commit(path, "v1", lambda g: _create(g, np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE)))
    with h5py.File(path, "a") as f:
        raw = f["_version_data/x/raw_data"]
        tables = OpenDatasets()
        first = tables.hash_table_id(raw)
        assert tables.hash_table_id(raw) is first  # held: the same handle
        before = table_state(first)
        assert before[0] == 4
        # Rebuild the table as another library would: a new dataset at the same path.
        rows = f["_version_data/x/hash_table"][:2]
        del f["_version_data/x/hash_table"]
        new = f.create_dataset("_version_data/x/hash_table", data=rows, maxshape=(None,), chunks=(4096,))
        new.attrs["largest_index"] = np.int64(2)
        second = tables.hash_table_id(raw)
        assert second is not first
        assert table_state(second) == (2, bytes(rows[1]["hash"]))


def test_held_raw_data_has_a_chunk_cache_of_a_few_chunks_and_follows_a_rebuild(tmp_path):
    from xarray_vhdf5._backend.held import CACHED_CHUNKS, OpenDatasets

    path = str(tmp_path / "f.h5")
    big = (64, 128, 128)  # 8 MiB float64 chunks: beyond HDF5's default cache
    with h5py.File(path, "w") as f:
        f.create_dataset("raw", shape=big, chunks=big, dtype="f8")
        held = OpenDatasets()
        raw = held.raw_data(f.id, "/raw", np.prod(big) * 8)
        assert raw.id.get_access_plist().get_chunk_cache()[1] == CACHED_CHUNKS * np.prod(big) * 8
        assert held.raw_data(f.id, "/raw", np.prod(big) * 8).id == raw.id  # held: the same object
        del f["raw"]
        f.create_dataset("raw", data=np.ones((4, 4)))
        again = held.raw_data(f.id, "/raw", 128)
        np.testing.assert_array_equal(again[()], np.ones((4, 4)))


def test_held_raw_data_answers_what_h5py_answers_and_follows_a_rebuild(tmp_path):
    """The held wrapper keeps name, dtype and fill value: the same as h5py's, until the dataset is replaced."""
    from xarray_vhdf5._backend.held import HeldDataset, OpenDatasets

    with h5py.File(tmp_path / "f.h5", "w") as f:
        f.create_dataset("g/raw_data", shape=(8, 2), chunks=(4, 2), dtype="<i2", fillvalue=-7)
        f.create_dataset("g/hash_table", shape=(1,), dtype="i8")
        held = OpenDatasets()
        raw = held.raw_data(f.id, "/g/raw_data", 16)
        plain = f["g/raw_data"]
        assert isinstance(raw, HeldDataset) and raw.address == h5py.h5o.get_info(plain.id).addr
        assert (
            (raw.name, raw.dtype, raw.fillvalue)
            == (plain.name, plain.dtype, plain.fillvalue)
            == ("/g/raw_data", np.dtype("<i2"), -7)
        )
        table, addr = held.hash_table(raw)
        assert table.name == "/g/hash_table" and held.hash_table(raw)[0] is table
        assert addr == h5py.h5o.get_info(table.id).addr
        del f["g/raw_data"]
        f.create_dataset("g/raw_data", shape=(3,), dtype="f4", fillvalue=1.5)
        again = held.raw_data(f.id, "/g/raw_data", 12)
        assert again is not raw and (again.dtype, again.fillvalue, again.shape) == (np.dtype("f4"), 1.5, (3,))


def test_commits_after_versioned_hdf5_rewrote_raw_data_through_the_same_handle(tmp_path):
    versioned_hdf5 = pytest.importorskip("versioned_hdf5")
    path = str(tmp_path / "f.h5")
    data = np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE)
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            _create(g, data)
        with vf.stage_version("v2") as g:
            g["x"][0, :] = -1.0
        data[0, :] = -1.0
        # versioned-hdf5 rewrites raw_data and the hash table (new chunks, new order).
        versioned_hdf5.modify_metadata(f, "x", chunks=(5, 6))
        with vf.stage_version("v3") as g:
            g["x"][39, 5] = 42.0
        data[39, 5] = 42.0
        np.testing.assert_array_equal(vf["v3"]["x"][()], data)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(versioned_hdf5.VersionedHDF5File(f)["v3"]["x"][()], data)


def test_object_address_is_h5o_get_info_addr(tmp_path):
    from h5py import h5o

    from xarray_vhdf5._backend.h5objects import object_address, object_address_by_name

    with h5py.File(tmp_path / "a.h5", "w") as f:
        for obj in (f["/"], f.create_group("g"), f.create_dataset("d", data=np.arange(5))):
            assert object_address(obj.id) == h5o.get_info(obj.id).addr
            assert object_address_by_name(f.id, obj.name.encode()) == h5o.get_info(obj.id).addr
        with pytest.raises(KeyError):
            object_address_by_name(f.id, b"/nothing")


def test_memory_types_are_h5py_s_built_once(tmp_path):
    from h5py import h5t

    from xarray_vhdf5._backend.h5objects import memory_type
    from xarray_vhdf5._backend.layout import HASH_TABLE_DTYPE

    enum = h5py.enum_dtype({"A": 0, "B": 1}, basetype="i1")
    for dtype in (np.dtype("<f8"), np.dtype(">i4"), np.dtype(bool), np.dtype("S7"), HASH_TABLE_DTYPE, enum):
        tid = memory_type(dtype)
        assert tid == h5t.py_create(dtype), dtype
        assert memory_type(dtype) is tid  # built once
    for dtype in (h5py.string_dtype(), np.dtype(object), np.dtype("M8[s]"), np.dtype("V0")):
        assert memory_type(dtype) is None, dtype


@pytest.mark.parametrize("name", ["v1", "ünïcode", "a/b"])
def test_ordered_groups_are_created_as_h5py_creates_them(tmp_path, name):
    """``create_ordered_group`` (property lists made once) against ``create_group(track_order=True)``."""
    from xarray_vhdf5._backend.h5objects import create_ordered_group

    with h5py.File(tmp_path / "f.h5", "w") as f:
        ours, ref = f.create_group("ours"), f.create_group("ref")
        made, want = create_ordered_group(ours, name), ref.create_group(name, track_order=True)
        assert made.name == f"/ours/{name}"
        mine, theirs = made.id.get_create_plist(), want.id.get_create_plist()
        for prop in ("get_link_creation_order", "get_attr_creation_order", "get_obj_track_times"):
            assert getattr(mine, prop)() == getattr(theirs, prop)(), prop
        top = name.split("/")[0].encode()
        assert ours.id.links.get_info(top).cset == ref.id.links.get_info(top).cset
        with pytest.raises(ValueError, match="exists"):
            create_ordered_group(ours, name)


@pytest.mark.parametrize("track_order", [False, True])
@pytest.mark.parametrize("n", [0, 3, 40])  # 40 links: dense storage
def test_member_names_list_in_h5py_order(tmp_path, track_order, n):
    """``member_names`` gives h5py's iteration order: creation order when tracked, else by name."""
    from xarray_vhdf5._backend.h5objects import member_names

    with h5py.File(tmp_path / "m.h5", "w") as f:
        g = f.create_group("g", track_order=track_order)
        for i in range(n):
            name = f"n{(n - i) * 7 % 97:02d}"  # not created in name order
            if i % 2:
                g.create_group(name)
            else:
                g[name] = i
        names = [b.decode() for b in member_names(g.id)]
        assert names == list(g)
        assert (names == sorted(names)) is (not track_order or n < 2)


class _Refusing:
    """A group id whose creation-order iteration fails as libhdf5's refusal was once seen to:
    with a message h5py cannot decode (``UnicodeDecodeError``, not its ``RuntimeError``)."""

    def __init__(self, gid):
        self._gid, self.asked = gid, []
        self.links = self

    def get_create_plist(self):
        return self._gid.get_create_plist()

    def iterate(self, func, idx_type):
        self.asked.append(idx_type)
        if idx_type == h5py.h5.INDEX_CRT_ORDER and not (
            self._gid.get_create_plist().get_link_creation_order() & h5py.h5p.CRT_ORDER_TRACKED
        ):
            raise UnicodeDecodeError("utf-8", b"\x87", 0, 1, "invalid start byte")
        return self._gid.links.iterate(func, idx_type=idx_type)


@pytest.mark.parametrize("track_order", [False, True])
def test_member_names_asks_creation_order_only_of_groups_that_track_it(tmp_path, track_order):
    """A group that does not track creation order (versioned-hdf5's) is listed by name without
    asking libhdf5 for creation order: its refusal could not always be decoded (three full
    test runs failed on it, in a group versioned-hdf5's modify_metadata had written)."""
    from xarray_vhdf5._backend.h5objects import member_names

    with h5py.File(tmp_path / "m.h5", "w") as f:
        g = f.create_group("g", track_order=track_order)
        for name in ("b", "c", "a"):
            g.create_group(name)
        gid = _Refusing(g.id)
        names = [b.decode() for b in member_names(gid)]
        assert names == list(g) == (["b", "c", "a"] if track_order else ["a", "b", "c"])
        assert gid.asked == ([h5py.h5.INDEX_CRT_ORDER] if track_order else [h5py.h5.INDEX_NAME])


def test_chunk_maps_skip_the_version_stamp_only_while_the_versions_group_is_unchanged(first, monkeypatch):
    """A version deleted and made again under the same name between two commits: its chunk map
    is not taken from the cache, whether or not the stamp is read; the data staged is the new one."""
    import xarray_vhdf5._backend.chunkmap_cache as chunkmap_cache

    stamps = []
    real = chunkmap_cache._version_stamp
    monkeypatch.setattr(chunkmap_cache, "_version_stamp", lambda *a: stamps.append(1) or real(*a))
    f, vf = first
    with vf.stage_version("v2") as g:
        g["x"][0, 0] = -1.0
    with vf.stage_version("v3") as g:  # the versions group is as v2's commit left it
        g["x"][1, 0] = -2.0
    assert stamps == []
    other = VersionedHDF5File(f)  # does not share this handle's registry
    other.delete_versions(["v3"])
    with other.stage_version("v3", prev_version="v1") as g:
        g["x"][2, 0] = -3.0
    with vf.stage_version("v4") as g:  # v3 is another group now
        g["x"][3, 0] = -4.0
    expected = DATA.copy()
    expected[2, 0], expected[3, 0] = -3.0, -4.0
    np.testing.assert_array_equal(vf["v4"]["x"][()], expected)


@pytest.mark.parametrize("rewrite", ["delete_versions", "modify_metadata"])
def test_a_version_staged_while_another_handle_rewrites_raw_data_is_refused(first, rewrite):
    """Deleting versions (raw_data compacted) or modify_metadata through another handle while a
    version is staged: its chunk map is stale, the commit raises, and nothing committed changes."""
    f, vf = first
    with vf.stage_version("v2") as g:
        g["x"][0:10, :] = -1.0  # a chunk only v2 holds: v1's goes when v1 is deleted
    with vf.stage_version("v3") as g:
        g["x"][15, 0] = -3.0
    before = {v: vf[v]["x"][()] for v in ("v2", "v3")}
    with pytest.raises(StaleVersionError, match="was replaced|was deleted|was rewritten"):
        with vf.stage_version("v4") as g:
            g["x"][25, 1] = -4.0  # staged over raw_data as it is now
            other = VersionedHDF5File(f)
            if rewrite == "delete_versions":
                other.delete_versions(["v1"])
            else:
                xarray_vhdf5.modify_metadata(f, "x", fillvalue=7.0)
    assert "v4" not in vf.versions and vf.current_version == "v3"
    for v, expected in before.items():
        np.testing.assert_array_equal(vf[v]["x"][()], expected)
    with vf.stage_version("v4") as g:  # staged again: works
        g["x"][25, 1] = -4.0
    expected = before["v3"].copy()
    expected[25, 1] = -4.0
    np.testing.assert_array_equal(vf["v4"]["x"][()], expected)


def test_a_hash_table_rebuilt_in_place_while_staged_is_refused(first):
    """A tool that rebuilds the hash table without replacing raw_data or the virtual datasets:
    the staged chunk map may point at moved rows, so the commit raises (the objects are the same)."""
    f, vf = first
    with vf.stage_version("v2") as g:
        g["x"][0, 0] = -1.0
    with pytest.raises(StaleVersionError, match=r"hash table changed: 5 rows before, 4 now"):
        with vf.stage_version("v3") as g:
            g["x"][1, 0] = -2.0
            table = f["_version_data/x/hash_table"]
            rows = table[:5]
            table[0:4] = rows[1:5]  # compacted: the first row dropped, the others moved up
            table.attrs["largest_index"] = np.int64(4)
    assert "v3" not in vf.versions


def test_a_stale_dataset_after_a_fresh_one_leaves_nothing_written(first):
    """Two staged datasets, the second's hash table rebuilt in place meanwhile: the commit is
    refused before the first one's chunks or hash rows are appended (no orphan rows)."""
    f, vf = first
    with vf.stage_version("v2") as g:
        g.create_dataset("y", data=DATA, chunks=(10, 10))  # after "x" in the version's order
    sizes = {
        n: (f[f"_version_data/{n}/raw_data"].shape, f[f"_version_data/{n}/hash_table"].attrs["largest_index"])
        for n in ("x", "y")
    }
    with pytest.raises(StaleVersionError, match=r"'y'.*hash table changed"):
        with vf.stage_version("v3") as g:
            assert list(g) == ["x", "y"]
            g["x"][0, 0] = -1.0  # a new chunk for "x", checked first
            g["y"][1, 0] = -2.0
            table = f["_version_data/y/hash_table"]
            n = int(table.attrs["largest_index"])
            table[0 : n - 1] = table[1:n]  # compacted in place: the first row dropped
            table.attrs["largest_index"] = np.int64(n - 1)
    assert "v3" not in vf.versions and vf.current_version == "v2"
    for name in ("x", "y"):  # neither raw_data grew; y's table is as the rewrite left it
        assert f[f"_version_data/{name}/raw_data"].shape == sizes[name][0]
    assert f["_version_data/x/hash_table"].attrs["largest_index"] == sizes["x"][1]
    assert f["_version_data/y/hash_table"].attrs["largest_index"] == sizes["y"][1] - 1
    np.testing.assert_array_equal(vf["v2"]["x"][()], DATA)


def test_a_version_staged_while_another_handle_commits_is_committed(first):
    """Another handle's commit only appends to raw_data: the staged rows still hold."""
    f, vf = first
    with vf.stage_version("v2") as g:
        g["x"][3, 3] = -2.0
        with VersionedHDF5File(f).stage_version("w", prev_version="v1") as h:
            h["x"][30:40, :] = 8.0  # new rows appended to raw_data and the hash table
    expected = DATA.copy()
    expected[3, 3] = -2.0
    np.testing.assert_array_equal(vf["v2"]["x"][()], expected)
