"""Staged datasets on StagedChangesArray: only touched chunks are read, held and written."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from xarray_vhdf5 import (
    IncompatibleDataError,
    InMemoryDataset,
    InMemorySparseDataset,
    ReadOnlyError,
    VersionedHDF5File,
)
from xarray_vhdf5._backend.chunkmap import build_slab_indices_and_offsets
from xarray_vhdf5._staging import StagedChangesArray
from xarray_vhdf5._versions import forget_shared_caches
from xarray_vhdf5.errors import StaleVersionError

SHAPE, CHUNKS = (100, 60), (10, 20)  # 10 x 3 = 30 chunks


@pytest.fixture
def base(tmp_path):
    path = tmp_path / "f.h5"
    data = np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE)
    with h5py.File(path, "w") as f:
        with VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("x", data=data, chunks=CHUNKS)
            g.create_dataset(
                "s",
                data=np.array([b"a", b"bb", b"ccc", b"d"], dtype=object),
                dtype=h5py.string_dtype("ascii"),
                chunks=(2,),
            )
    return path, data


def staged_chunk_count(ds: InMemoryDataset) -> int:
    arr = ds.staged_array
    return int(np.count_nonzero(arr.slab_indices > arr.n_base_slabs))


def test_one_point_edit_holds_and_writes_one_chunk(base):
    path, data = base
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            x = g["x"]
            assert isinstance(x, InMemoryDataset)
            x[55, 45] = -1.0
            assert staged_chunk_count(x) == 1
            # The other 29 chunks are still on raw_data (nothing of them read).
            assert int(np.count_nonzero(x.staged_array.slab_indices == 1)) == 29
            assert x[55, 45] == -1.0 and x[0, 0] == 0.0
        stats = vf.last_commit.datasets["x"]
        assert (stats.new_chunks, stats.reused_chunks, stats.fill_chunks) == (1, 29, 0)
        expected = data.copy()
        expected[55, 45] = -1.0
        np.testing.assert_array_equal(vf["v2"]["x"][()], expected)
        np.testing.assert_array_equal(vf["v1"]["x"][()], data)
        assert f["_version_data/x/raw_data"].shape[0] == 31 * CHUNKS[0]


def test_whole_chunk_write_is_not_read_and_partial_write_is(base):
    path, data = base
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            x = g["x"]
            x[10:20, 20:40] = 7.0  # exactly chunk (1, 1)
            x[95:, 50:] = 8.0  # part of the edge chunk (9, 2)
            assert staged_chunk_count(x) == 2
        expected = data.copy()
        expected[10:20, 20:40] = 7.0
        expected[95:, 50:] = 8.0
        np.testing.assert_array_equal(vf["v2"]["x"][()], expected)
        assert vf.last_commit.datasets["x"].new_chunks == 2


def test_resize_grow_and_shrink_commit_only_edge_chunks(base):
    path, data = base
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"].resize((105, 60))  # 3 new chunks of fill value along axis 0
        stats = vf.last_commit.datasets["x"]
        # Rows 100:105 are a new chunk row, all fill value: nothing stored.
        assert (stats.new_chunks, stats.reused_chunks, stats.fill_chunks) == (0, 30, 3)
        np.testing.assert_array_equal(vf["v2"]["x"][:100], data)
        np.testing.assert_array_equal(vf["v2"]["x"][100:], 0.0)
        with vf.stage_version("v3", prev_version="v1") as g:
            g["x"].resize((95, 50))
        # The shrunk edge chunks (9, *) and (*, 2) are stored again, trimmed (versioned-hdf5's rule).
        assert vf.last_commit.datasets["x"].new_chunks == 10 + 3 - 1
        np.testing.assert_array_equal(vf["v3"]["x"][()], data[:95, :50])


def test_strings_edit_on_raw_data(base):
    path, _ = base
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["s"][3] = "zz"
            assert g["s"][()].tolist() == [b"a", b"bb", b"ccc", "zz"]
        assert vf.last_commit.datasets["s"].new_chunks == 1
        assert vf["v2"]["s"][()].tolist() == [b"a", b"bb", b"ccc", b"zz"]


def test_staged_array_setter_validates(base):
    path, _ = base
    with h5py.File(path, "r+") as f, h5py.File(path, "r") as f2:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            x = g["x"]
            other = StagedChangesArray.full(SHAPE, (5, 5), 0.0)
            with pytest.raises(IncompatibleDataError, match="chunk_size"):
                x.staged_array = other
            with pytest.raises(IncompatibleDataError, match="dtype"):
                x.staged_array = StagedChangesArray.full(SHAPE, CHUNKS, 0, dtype="i4")
            foreign = StagedChangesArray.from_array(np.zeros(SHAPE), CHUNKS)
            with pytest.raises(IncompatibleDataError, match="base slabs"):
                x.staged_array = foreign
            with pytest.raises(TypeError, match="StagedChangesArray"):
                x.staged_array = np.zeros(SHAPE)
            # Another handle to the same raw_data, as an xarray stage() builds it.
            v1 = f2["_version_data/versions/v1/x"]
            raw = f2["_version_data/x/raw_data"]
            si, so = build_slab_indices_and_offsets(v1, v1.shape, CHUNKS, raw)
            mine = StagedChangesArray(SHAPE, CHUNKS, [raw], si, so, raw.fillvalue)
            mine[0, 0] = 123.0
            x.staged_array = mine
        assert vf["v2"]["x"][0, 0] == 123.0
        assert vf.last_commit.datasets["x"].new_chunks == 1
        assert vf.last_commit.datasets["x"].reused_chunks == 29


def test_sparse_dataset_stores_only_written_chunks(tmp_path):
    with h5py.File(tmp_path / "s.h5", "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            sp = g.create_dataset("sp", shape=(1000, 1000), dtype="i4", fillvalue=-1, chunks=(100, 100))
            assert isinstance(sp, InMemorySparseDataset)
            sp[150, 250] = 5
            sp[999, 999] = 6
            assert sp[150, 249:252].tolist() == [-1, 5, -1]
            assert int(np.count_nonzero(sp.staged_array.slab_indices)) == 2
        stats = vf.last_commit.datasets["sp"]
        assert (stats.new_chunks, stats.fill_chunks) == (2, 0)
        assert f["_version_data/sp/raw_data"].shape[0] == 200
        v1 = vf["v1"]["sp"]
        assert v1.fillvalue == -1
        assert v1[150, 250] == 5 and v1[999, 999] == 6 and v1[0, 0] == -1
        assert int((v1[()] != -1).sum()) == 2


def test_astype_view(base):
    path, data = base
    with h5py.File(path, "r+") as f:
        with VersionedHDF5File(f).stage_version("v2") as g:
            view = g["x"].astype("f4")
            out = view[:3, :3]
            assert out.dtype == np.float32
            np.testing.assert_array_equal(out, data[:3, :3].astype("f4"))
            assert len(view) == SHAPE[0]


def test_write_after_commit_refused(base):
    path, _ = base
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            x = g["x"]
        with pytest.raises(ReadOnlyError):
            x[0, 0] = 1.0
        with pytest.raises(ReadOnlyError):
            x.resize((5, 5))


def test_next_stage_reuses_the_commit_chunk_map(base, monkeypatch):
    import xarray_vhdf5._wrappers.chunked as chunked

    calls = []
    real = chunked.build_slab_indices_and_offsets

    def counting(*args):
        calls.append(args[0].name)
        return real(*args)

    monkeypatch.setattr(chunked, "build_slab_indices_and_offsets", counting)
    path, data = base
    forget_shared_caches()  # v1's chunk map, kept from the fixture's handle: read it from the file
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][0, 0] = -1.0
        assert calls == ["/_version_data/versions/v1/x"]
        with vf.stage_version("v3") as g:
            g["x"][99, 59] = -2.0  # on top of v2, committed through this handle: no mapping read
            arr = g["x"].staged_array
        assert calls == ["/_version_data/versions/v1/x"]
        v2 = f["_version_data/versions/v2/x"]
        si, so = real(v2, v2.shape, CHUNKS, f["_version_data/x/raw_data"])
        base_state = arr._changes_plan()
        assert base_state.unchanged.shape[0] == 29  # every chunk but the edited one maps as in v2
        # The edited chunk (9, 2) is the last one; every other maps exactly as v2's mappings say.
        assert arr.slab_indices.reshape(-1)[:-1].tolist() == si.reshape(-1)[:-1].tolist()
        assert arr.slab_offsets.reshape(-1)[:-1].tolist() == so.reshape(-1)[:-1].tolist()
        assert arr.slab_indices.reshape(-1)[-1] > 1
        with vf.stage_version("v4", prev_version="v1") as g:
            g["x"][1, 1] = -3.0
        assert calls[-1] == "/_version_data/versions/v1/x"
        expected = data.copy()
        expected[0, 0], expected[99, 59] = -1.0, -2.0
        np.testing.assert_array_equal(vf["v3"]["x"][()], expected)


def test_chunk_map_cache_is_not_fooled_by_a_version_made_again(base):
    path, data = base
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][0, 0] = -1.0
        other = VersionedHDF5File(f)  # another writer on the same file: vf's caches do not know
        other.delete_versions(["v2"])
        with other.stage_version("v2", prev_version="v1") as g:
            g["x"][50, 30] = -5.0
        with vf.stage_version("v3", prev_version="v2") as g:
            g["x"][99, 0] = -7.0
        expected = data.copy()
        expected[50, 30], expected[99, 0] = -5.0, -7.0
        np.testing.assert_array_equal(vf["v3"]["x"][()], expected)


def test_hdf5plugin_filters_round_trip_and_interchange(tmp_path):
    import hdf5plugin
    import versioned_hdf5

    path = tmp_path / "zstd.h5"
    data = np.arange(20000, dtype="f8").reshape(20, 1000)
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=data, chunks=(10, 100), **hdf5plugin.Zstd(clevel=5))
        with vf.stage_version("v2") as g:
            g["x"][0, 0] = -1.0
        raw = f["_version_data/x/raw_data"]
        assert str(hdf5plugin.ZSTD_ID) in raw._filters
        assert vf.last_commit.datasets["x"].new_chunks == 1
    with h5py.File(path, "r+") as f:
        theirs = versioned_hdf5.VersionedHDF5File(f)
        with theirs.stage_version("v3") as g:
            g["x"][19, 999] = -2.0
        expected = data.copy()
        expected[0, 0], expected[19, 999] = -1.0, -2.0
        np.testing.assert_array_equal(VersionedHDF5File(f)["v3"]["x"][()], expected)
        np.testing.assert_array_equal(VersionedHDF5File(f)["v1"]["x"][()], data)


def test_hash_table_cache_reloads_a_table_rebuilt_by_another_writer(tmp_path):
    import versioned_hdf5

    path = tmp_path / "ht.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=rng.standard_normal(40), chunks=(10,))
        with vf.stage_version("v2") as g:
            g["x"][0] = 1.0  # a chunk only v2 has
        with vf.stage_version("v3", prev_version="v1") as g:
            g["x"][15] = 2.0
        # versioned-hdf5 rebuilds the hash table and compacts raw_data behind vf's back.
        versioned_hdf5.delete_versions(f, ["v2"])
        with vf.stage_version("v4") as g:
            g["x"][0] = 1.0  # the chunk v2 had: its old row is gone, it must be stored anew
        expected = f["_version_data/versions/v1/x"][()]
        expected[0], expected[15] = 1.0, 2.0
        np.testing.assert_array_equal(VersionedHDF5File(f)["v4"]["x"][()], expected)


@pytest.mark.parametrize("touch_attrs", [False, True])
def test_carried_dataset_keeps_attrs_and_drops_references(base, touch_attrs):
    path, data = base
    with h5py.File(path, "r+") as f:
        v1x = f["_version_data/versions/v1/x"]
        v1x.attrs["units"] = "K"
        v1x.attrs["ref"] = f["_version_data/versions/v1"].ref  # points into v1
        v1x.attrs.create("refs", [f["_version_data/versions/v1/s"].ref], dtype=h5py.ref_dtype)
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            if touch_attrs:
                g["x"].attrs["comment"] = "new"
        v2x = f["_version_data/versions/v2/x"]
        expected = {"units", "raw_data", "chunks"} | ({"comment"} if touch_attrs else set())
        assert set(v2x.attrs) == expected
        assert v2x.attrs["units"] == "K"
        assert [vs.src_space.get_select_bounds() for vs in v2x.virtual_sources()] == [
            vs.src_space.get_select_bounds() for vs in v1x.virtual_sources()
        ]
        np.testing.assert_array_equal(vf["v2"]["x"][()], data)
        assert vf.last_commit.datasets["x"].new_chunks == 0


@pytest.mark.parametrize("name", ["versions", "__vhdf5_version_index__", "__netcdf_dimensions__"])
def test_names_the_format_uses_are_refused(tmp_path, name):
    with h5py.File(tmp_path / "r.h5", "w") as f:
        vf = VersionedHDF5File(f)
        with pytest.raises(ValueError, match="reserved"):
            with vf.stage_version("v1") as g:
                g.create_dataset(name, data=[1])
        assert vf.versions == []


def _count_wholesale_loads(monkeypatch) -> list:
    """Every load of all of an object's attributes: h5py's iteration, or by index (``attrs_by_index``)."""
    import xarray_vhdf5._wrappers.attrs as staged_attrs

    iterated: list = []
    real_iter, real_by_index = h5py.AttributeManager.__iter__, staged_attrs.attrs_by_index
    monkeypatch.setattr(h5py.AttributeManager, "__iter__", lambda self: iterated.append(self) or real_iter(self))
    monkeypatch.setattr(
        staged_attrs, "attrs_by_index", lambda *args, **kw: iterated.append(args) or real_by_index(*args, **kw)
    )
    return iterated


def test_staged_attrs_count_before_iterating(tmp_path, monkeypatch):
    """Format-only attributes are counted, not iterated; user attributes still come through."""
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("plain", data=np.arange(4.0), chunks=(2,))
            d = g.create_dataset("tagged", data=np.arange(4.0), chunks=(2,))
            d.attrs["units"] = "K"
    iterated = _count_wholesale_loads(monkeypatch)
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            assert dict(g["plain"].attrs) == {}
            assert len(iterated) == 0  # only raw_data/chunks there: not iterated
            assert dict(g["tagged"].attrs) == {"units": "K"}
            assert len(iterated) == 1
        assert vf["v2"]["tagged"].attrs["units"] == "K"


def test_staged_attrs_look_up_one_name_without_reading_the_others(tmp_path, monkeypatch):
    """``"CLASS" in attrs`` / ``attrs.get(...)`` on an untouched staged dataset read that
    attribute alone; once any attribute is set or deleted, the staged values answer."""
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        with VersionedHDF5File(f).stage_version("v1") as g:
            d = g.create_dataset("x", data=np.arange(4.0), chunks=(2,))
            d.attrs["units"] = "K"
            d.attrs["long_name"] = "temperature"
    iterated = _count_wholesale_loads(monkeypatch)
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            attrs = g["x"].attrs
            assert "CLASS" not in attrs and attrs.get("CLASS") is None
            assert "chunks" not in attrs and "raw_data" not in attrs  # the format's own: hidden
            assert "units" in attrs and attrs["units"] == "K" and attrs.get("long_name") == "temperature"
            with pytest.raises(KeyError):
                attrs["CLASS"]
            assert iterated == []  # nothing loaded wholesale
            del attrs["units"]
            attrs["CLASS"] = "set"
            assert "units" not in attrs and attrs["CLASS"] == "set" and len(iterated) == 1
            assert dict(attrs) == {"long_name": "temperature", "CLASS": "set"}
        committed = dict(vf["v2"]["x"].attrs)
        assert committed.pop("raw_data") == "/_version_data/x/raw_data"  # the format's, shown as h5py does
        assert tuple(committed.pop("chunks")) == (2,)
        assert committed == {"long_name": "temperature", "CLASS": "set"}
        with vf.stage_version("v3") as g:
            assert g["x"].attrs["CLASS"] == "set" and "units" not in g["x"].attrs


@pytest.mark.parametrize("kernels", ["cython", "python"])
def test_reference_datatypes_are_told_apart_as_h5py_dtypes_tell_them(tmp_path, kernels):
    """``reference_attribute_names`` (HDF5 datatype classes; compiled and reference paths)
    against h5py's dtype view of the same attributes: references alone, in arrays, compounds
    (netCDF's REFERENCE_LIST) and vlen sequences (DIMENSION_LIST); strings of both kinds,
    numbers, enums are not. A missing object raises KeyError."""
    from xarray_vhdf5._backend.h5attrs import reference_attribute_names
    from xarray_vhdf5._backend.transfer import kernel_backend

    with h5py.File(tmp_path / "t.h5", "w") as f:
        d = f.create_dataset("d", data=np.arange(3))
        ref = f["d"].ref
        a = d.attrs
        a["obj"] = ref
        a.create("objs", [ref, ref], dtype=h5py.ref_dtype)
        a.create("region", d.regionref[0:1], dtype=h5py.regionref_dtype)
        a.create("ref_list", np.array([(ref, 0)], dtype=[("dataset", h5py.ref_dtype), ("dimension", "<i4")]))
        dim_list = np.empty(1, dtype=h5py.vlen_dtype(h5py.ref_dtype))
        dim_list[0] = np.array([ref], dtype=h5py.ref_dtype)
        a.create("dim_list", dim_list)
        a["vlen_str"] = "text"
        a.create("fixed", np.bytes_(b"abc"))
        a["num"] = np.arange(4.0)
        ints = np.empty(1, dtype=h5py.vlen_dtype("i4"))
        ints[0] = np.array([1, 2], dtype="i4")
        a.create("ints", ints)
        a.create("enum", np.array(1, dtype="i1"), dtype=h5py.enum_dtype({"a": 0, "b": 1}, basetype="i1"))
        a.create("pair", np.zeros(1, dtype=[("x", "f8"), ("y", "S3")]))
        with kernel_backend(kernels):
            found = reference_attribute_names(f.id, b"d")
            with pytest.raises(KeyError):
                reference_attribute_names(f.id, b"missing")
        by_dtype = {name for name in a if h5py.check_ref_dtype(a.get_id(name).dtype) is not None}
    assert by_dtype == {"obj", "objs", "region"}  # h5py's dtypes tell plain references only
    assert found == sorted(n.encode() for n in ("obj", "objs", "region", "ref_list", "dim_list"))


def test_untouched_datasets_are_copied_without_being_opened(base, monkeypatch):
    """Staging opens only the datasets accessed; the others are copied as they are by the commit
    (same mappings, attributes, data). Their chunk maps: see the next-stage test below."""
    import xarray_vhdf5._wrappers.chunked as chunked
    import xarray_vhdf5._wrappers.group as group_module

    path, data = base
    with h5py.File(path, "r+") as f:
        f["_version_data/versions/v1/s"].attrs["units"] = "letters"
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][0, 0] = -1.0
        opened = []
        real_init = chunked.InMemoryDataset.__init__
        monkeypatch.setattr(
            chunked.InMemoryDataset, "__init__", lambda self, name, *a: opened.append(name) or real_init(self, name, *a)
        )
        with vf.stage_version("v3") as g:
            assert list(g) == ["x", "s"] and "x" in g and len(g) == 2
            assert isinstance(g._children["x"], group_module.UnopenedDataset)
            g["s"][0] = b"z"
        assert opened == ["s"]  # x was listed, never opened
        v2x, v3x = f["_version_data/versions/v2/x"], f["_version_data/versions/v3/x"]
        assert [vs.src_space.get_select_bounds() for vs in v3x.virtual_sources()] == [
            vs.src_space.get_select_bounds() for vs in v2x.virtual_sources()
        ]
        assert dict(v3x.attrs).keys() == dict(v2x.attrs).keys() and vf.last_commit.datasets["x"].new_chunks == 0
        assert vf["v3"]["s"].attrs["units"] == "letters" and vf["v3"]["s"][0] == b"z"
        expected = data.copy()
        expected[0, 0] = -1.0
        np.testing.assert_array_equal(v3x[()], expected)


def test_an_untouched_dataset_replaced_meanwhile_is_refused(base):
    """Another handle rebuilds a dataset of the previous version while a version that never
    opened it is staged: the copy would map rows that moved, so the commit raises."""
    path, data = base
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][0:10, :] = -1.0  # a chunk of v1 only: deleting v1 compacts x's raw_data
        with pytest.raises(StaleVersionError, match=r"'x'.*previous version's dataset.*was replaced"):
            with vf.stage_version("v3") as g:
                g["s"][0] = b"z"  # x stays unopened
                VersionedHDF5File(f).delete_versions(["v1"])
        assert "v3" not in vf.versions
        expected = data.copy()
        expected[0:10, :] = -1.0
        np.testing.assert_array_equal(vf["v2"]["x"][()], expected)


def test_moving_a_group_opens_its_datasets_where_they_were(tmp_path):
    """Datasets under a moved group keep reading (and being stored) from their raw_data."""
    with h5py.File(tmp_path / "m.h5", "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("a/b/x", data=np.arange(6.0), chunks=(2,))
        with vf.stage_version("v2") as g:
            g.move("a", "c")
            assert g["c/b/x"].origin_name == "a/b/x" and g["c/b/x"][4] == 4.0
        np.testing.assert_array_equal(vf["v2"]["c/b/x"][()], np.arange(6.0))
        np.testing.assert_array_equal(vf["v1"]["a/b/x"][()], np.arange(6.0))


def test_an_edited_dataset_keeps_its_attributes_as_stored(base):
    """Data edited, attributes untouched: the new version's attributes are the previous ones with
    the same HDF5 datatypes, dataspaces and values, references dropped; also after one is set."""
    path, data = base
    with h5py.File(path, "r+") as f:
        v1x = f["_version_data/versions/v1/x"]
        a = v1x.attrs
        a["units"] = "K"  # vlen UTF-8 string
        a.create("ascii", np.bytes_(b"abc"))  # fixed-length bytes
        a.create("names", np.array(["lat", "lon"], dtype=h5py.string_dtype("ascii")))
        a["scale"] = np.float32(0.5)
        a["valid_range"] = np.array([-1, 1], dtype="i2")
        a["flag"] = True  # h5py's enum
        a["empty"] = h5py.Empty("f8")
        a["ref"] = f["_version_data/versions/v1"].ref  # points into v1: dropped
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][0, 0] = -1.0
        with vf.stage_version("v3") as g:
            g["x"][0, 1] = -2.0
            g["x"].attrs["comment"] = "new"  # loaded and written back
        for version, extra in (("v2", set()), ("v3", {"comment"})):
            new = f[f"_version_data/versions/{version}/x"]
            assert set(new.attrs) == set(a) - {"ref"} | extra
            for name in set(a) - {"ref"}:
                old_id, new_id = a.get_id(name), new.attrs.get_id(name)
                assert new_id.get_type().dtype == old_id.get_type().dtype, name
                assert h5py.check_string_dtype(new_id.dtype) == h5py.check_string_dtype(old_id.dtype), name
                assert new_id.get_space().get_simple_extent_type() == old_id.get_space().get_simple_extent_type()
                if name != "empty":
                    np.testing.assert_array_equal(np.asarray(new.attrs[name]), np.asarray(a[name]))
            assert isinstance(new.attrs["empty"], h5py.Empty)
        assert f["_version_data/versions/v2/x"].attrs.get_id("units").get_type().get_cset() == h5py.h5t.CSET_UTF8
        expected = data.copy()
        expected[0, 0], expected[0, 1] = -1.0, -2.0
        np.testing.assert_array_equal(vf["v3"]["x"][()], expected)


def test_a_dataset_the_last_commit_made_is_not_opened_again(base, monkeypatch):
    """Staging on top of this handle's last commit takes the virtual dataset's id that commit
    made (libhdf5 decodes every mapping on open); a dataset replaced since is opened anew."""
    import xarray_vhdf5._wrappers.group as group_module

    path, data = base
    opened = []
    real_open = h5py.h5o.open

    class CountingH5O:
        TYPE_DATASET, TYPE_GROUP = h5py.h5o.TYPE_DATASET, h5py.h5o.TYPE_GROUP

        @staticmethod
        def open(*args):
            opened.append(args[1])
            return real_open(*args)

    monkeypatch.setattr(group_module, "h5o", CountingH5O)
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][0, 0] = -1.0  # v1's x: made by another handle, opened
        assert opened == [b"x"]
        with vf.stage_version("v3") as g:
            g["x"][0, 1] = -2.0  # v2's x: this handle's commit made it
        assert opened == [b"x"]
        other = VersionedHDF5File(f)
        with other.stage_version("side", prev_version="v1", make_current=False) as g:
            g["x"][5, 5] = -5.0
        other.delete_versions(["side"])  # rebuilds the surviving versions' virtual datasets
        opened.clear()
        with vf.stage_version("v4") as g:
            g["x"][0, 2] = -3.0
        assert opened == [b"x"]  # another object now: opened
        expected = data.copy()
        expected[0, 0], expected[0, 1], expected[0, 2] = -1.0, -2.0, -3.0
        np.testing.assert_array_equal(vf["v4"]["x"][()], expected)


def test_staged_attrs_answer_odd_keys_as_after_loading(base):
    """Empty names, unencodable strings and bytes keys: the same answers before anything is
    loaded as after (they are left to the loaded names)."""
    path, _ = base
    with h5py.File(path, "r+") as f:
        f["_version_data/versions/v1/x"].attrs["units"] = "K"
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            attrs = g["x"].attrs
            before = ["" in attrs, attrs.get(""), "\udc80" in attrs, b"units" in attrs, attrs.get(b"units"), 1 in attrs]
            assert attrs["units"] == "K"
            del attrs["units"]  # loads
            attrs["units"] = "K"
            after = ["" in attrs, attrs.get(""), "\udc80" in attrs, b"units" in attrs, attrs.get(b"units"), 1 in attrs]
            assert before == after == [False, None, False, False, None, False]


@pytest.mark.parametrize("rewrite", ["delete the previous version", "delete an older version"])
def test_a_dataset_first_opened_after_another_handle_rewrote_it_is_refused(base, rewrite):
    """Staged on v2 through a fresh handle, ``x`` not yet accessed; another handle deletes v2
    itself (the stage's id of v2's group outlives the unlink) or rebuilds v2's datasets: the
    first access raises instead of reading the old mappings over moved rows."""
    path, _data = base
    with h5py.File(path, "r+") as f:
        with VersionedHDF5File(f).stage_version("v2") as g:
            g["x"][0:10, :] = -1.0  # a chunk of v2 only
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with pytest.raises(StaleVersionError, match=r"'x'.*previous version's dataset"):
            with vf.stage_version("v3", prev_version="v2") as g:
                with h5py.File(path, "r+") as other:
                    VersionedHDF5File(other).delete_versions(["v2" if rewrite.endswith("previous version") else "v1"])
                g["x"][5, 5]
        assert "v3" not in vf.versions


@pytest.mark.parametrize("touch", ["nothing", "an attribute", "a read"])
def test_a_carried_dataset_keeps_its_chunk_map_for_the_next_stage(base, monkeypatch, touch):
    """Copied unchanged (never opened, only read, or with new attributes): the chunk map the
    handle's last commit kept moves to the copy, and staging on top reads no mapping."""
    import xarray_vhdf5._wrappers.chunked as chunked

    path, data = base
    maps = []
    real = chunked.build_slab_indices_and_offsets
    monkeypatch.setattr(chunked, "build_slab_indices_and_offsets", lambda *a: maps.append(a[0].name) or real(*a))
    forget_shared_caches()  # v1's map, kept from the fixture's handle: read it from the file
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][0, 0] = -1.0  # v1's map read once; v2's kept
        with vf.stage_version("v3") as g:
            if touch == "an attribute":
                g["x"].attrs["units"] = "K"
            elif touch == "a read":
                assert g["x"][0, 0] == -1.0
            g["s"][0] = b"z"
        with vf.stage_version("v4") as g:
            g["x"][1, 1] = -2.0
        assert [m for m in maps if m.endswith("/x")] == ["/_version_data/versions/v1/x"]
        expected = data.copy()
        expected[0, 0], expected[1, 1] = -1.0, -2.0
        np.testing.assert_array_equal(vf["v4"]["x"][()], expected)
        assert (vf["v4"]["x"].attrs.get("units") == "K") == (touch == "an attribute")


def _edited(data: np.ndarray, points: dict) -> np.ndarray:
    """A copy of ``data`` with ``points`` (index -> value) set."""
    out = data.copy()
    for index, value in points.items():
        out[index] = value
    return out


def _raw_rows(f: h5py.File, name: str) -> tuple[int, int]:
    return f[f"_version_data/{name}/raw_data"].shape[0], int(
        f[f"_version_data/{name}/hash_table"].attrs["largest_index"]
    )


def _mapping(f: h5py.File, version: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    vds = f[f"_version_data/versions/{version}/{name}"]
    raw = f[vds.attrs["raw_data"]]
    return build_slab_indices_and_offsets(vds, vds.shape, tuple(vds.attrs["chunks"]), raw)


@pytest.mark.parametrize("wrapped", [True, False])
def test_assigning_an_earlier_versions_dataset_reverts_it_without_writing_chunks(base, wrapped):
    """``g["x"] = vf["v1"]["x"]`` puts back v1's dataset (points and attributes) by copying its
    virtual dataset: no chunk is read, hashed or written, and the mappings are v1's."""
    path, data = base
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1b") as g:  # v1's x gains an attribute in a version of its own
            g["x"].attrs["units"] = "K"
        with vf.stage_version("v2") as g:
            g["x"][0:25, :] = -1.0
            g["x"].attrs["units"] = "C"
        rows_before = _raw_rows(f, "x")
        with vf.stage_version("v3") as g:
            g["x"] = vf["v1b"]["x"] if wrapped else f["_version_data/versions/v1b/x"]
            assert g["x"].attrs["units"] == "K"
        assert vf.last_commit.new_chunks == 0
        assert _raw_rows(f, "x") == rows_before
        for got, want in zip(_mapping(f, "v3", "x"), _mapping(f, "v1b", "x")):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(vf["v3"]["x"][()], data)
        assert dict(vf["v3"]["x"].attrs)["units"] == "K"
        with vf.stage_version("v4") as g:  # and it edits as any dataset
            g["x"][99, 59] = 7.0
        np.testing.assert_array_equal(vf["v4"]["x"][()], _edited(data, {(99, 59): 7.0}))


def test_an_assigned_earlier_dataset_edited_before_the_commit(base):
    path, data = base
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][:] = 0.0
        with vf.stage_version("v3") as g:
            g["x"] = vf["v1"]["x"]
            g["x"][5, 5] = -5.0
            assert g["x"][5, 4] == data[5, 4]
        np.testing.assert_array_equal(vf["v3"]["x"][()], _edited(data, {(5, 5): -5.0}))
        assert vf.last_commit.new_chunks == 1


def test_assigning_an_earlier_dataset_under_another_name_stores_it_there(base):
    """At another path the dataset gets that path's raw_data (the format's layout), its chunks,
    dtype and attributes kept; versioned-hdf5 reads it."""
    import versioned_hdf5

    path, data = base
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"].attrs["note"] = "n"
        with vf.stage_version("v3") as g:
            g["grp/copy"] = vf["v2"]["x"]
        copy = f["_version_data/versions/v3/grp/copy"]
        assert copy.attrs["raw_data"] == "/_version_data/grp/copy/raw_data"
        assert tuple(copy.attrs["chunks"]) == CHUNKS and copy.attrs["note"] == "n"
        assert vf.last_commit.new_chunks == 30
    with h5py.File(path, "r") as f:
        ref = versioned_hdf5.VersionedHDF5File(f)
        np.testing.assert_array_equal(ref["v3"]["grp/copy"][()], data)
        np.testing.assert_array_equal(ref["v3"]["x"][()], data)


def test_assigning_other_datasets_copies_data_and_attributes(base, tmp_path):
    """A staged dataset, or a dataset of another file, is read: its points and user attributes."""
    path, data = base
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as g2:
        d = g2.create_dataset("d", data=np.arange(6.0))
        d.attrs["origin"] = "other"
    with h5py.File(path, "a") as f, h5py.File(other, "r") as g2:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"].attrs["units"] = "K"
            g["y"] = g["x"]
            g["o"] = g2["d"]
            g["raw"] = f["_version_data/x/raw_data"]  # in the file, but not a version's dataset: read
            raw_points = f["_version_data/x/raw_data"][()]
        np.testing.assert_array_equal(vf["v2"]["y"][()], data)
        assert vf["v2"]["y"].attrs["units"] == "K"
        np.testing.assert_array_equal(vf["v2"]["o"][()], np.arange(6.0))
        assert vf["v2"]["o"].attrs["origin"] == "other"
        np.testing.assert_array_equal(vf["v2"]["raw"][()], raw_points)
        assert f["_version_data/versions/v2/raw"].attrs["raw_data"] == "/_version_data/raw/raw_data"
        with pytest.raises(TypeError, match="groups"):
            with vf.stage_version("v3") as g:
                g["z"] = f["_version_data/versions/v1"]
        assert "v3" not in vf


def test_an_assigned_earlier_dataset_whose_version_is_deleted_meanwhile_is_refused(base):
    path, _data = base
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2") as g:
            g["x"][0, 0] = 1.0
        with vf.stage_version("v3") as g:
            g["x"][0, 0] = 2.0
        with pytest.raises(StaleVersionError):
            with vf.stage_version("v4") as g:
                g["x"] = vf["v2"]["x"]
                with h5py.File(path, "a") as f2:  # the same file through another handle
                    VersionedHDF5File(f2).delete_versions(["v2"])
        assert "v4" not in vf
        assert vf["v3"]["x"][0, 0] == 2.0


def test_staged_attrs_modify_keeps_the_dtype_and_shape_as_h5py(base, tmp_path):
    """``attrs.modify`` behaves as h5py's on a plain file: dtype and shape kept, a new name
    created, another shape refused."""
    path, _ = base
    plain = h5py.File(tmp_path / "plain.h5", "w").create_group("g")
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1b") as g:
            g["x"].attrs.create("scale", data=[1, 2], dtype="i2")
        with vf.stage_version("v2") as g:
            staged = g["x"].attrs
            plain.attrs.create("scale", data=[1, 2], dtype="i2")
            for attrs in (staged, plain.attrs):
                attrs.modify("scale", [3.7, 4.2])  # cast to int16, as h5py does
                attrs.modify("fresh", 2.5)
                with pytest.raises(TypeError, match="Shape"):
                    attrs.modify("scale", [1, 2, 3])
            for name in ("scale", "fresh"):
                np.testing.assert_array_equal(staged[name], plain.attrs[name])
                assert np.asarray(staged[name]).dtype == plain.attrs[name].dtype
        got = f["_version_data/versions/v2/x"].attrs
        assert got["scale"].dtype == np.int16 and got["scale"].tolist() == [3, 4] and got["fresh"] == 2.5
        for write in (lambda a: a.modify("scale", [0, 0]), lambda a: a.create("other", 1)):
            with pytest.raises(ReadOnlyError):
                write(vf["v2"]["x"].attrs)
        assert vf["v2"]["x"].attrs["scale"].tolist() == [3, 4] and "other" not in vf["v2"]["x"].attrs
    plain.file.close()


def test_object_reference_attributes_are_read_only_when_asked_for(tmp_path, monkeypatch):
    """netCDF-4's DIMENSION_LIST / REFERENCE_LIST are listed but read on first access only.

    A commit drops them unread (``versions.commit``); asked for, a staged dataset's
    value is h5py's (the same objects referenced).
    """
    import xarray as xr

    from xarray_vhdf5._backend import h5attrs
    from xarray_vhdf5._wrappers import attrs as staged_attrs

    def names(f, listed):
        return [[f[r].name for r in np.atleast_1d(axis)] for axis in listed]

    path = tmp_path / "nc.h5"
    ds = xr.Dataset({"v": (("t", "x"), np.arange(6.0).reshape(2, 3))}, coords={"t": [1, 2], "x": [0.0, 1.0, 2.0]})
    ds.vhdf5.commit("v1", path=path)
    reads = []
    real = h5attrs.read_attr_of

    def counted(loc_id, obj_name, name):
        reads.append(name)
        return real(loc_id, obj_name, name)

    monkeypatch.setattr(staged_attrs, "read_attr_of", counted)
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        want = names(f, f["_version_data/versions/v1/v"].attrs["DIMENSION_LIST"])
        assert want == [["/_version_data/versions/v1/t"], ["/_version_data/versions/v1/x"]]
        with vf.stage_version("v2") as g:
            g["v"][0, 0] = -1.0
            assert "DIMENSION_LIST" in list(g["v"].attrs)
        assert reads == []  # committed without reading them (a commit from h5py attaches no scales)
        with vf.stage_version("v3", prev_version="v1") as g:
            assert "units" not in list(g["v"].attrs)  # loaded, references left unread
            assert reads == []
            assert names(f, g["v"].attrs["DIMENSION_LIST"]) == want
            assert reads == ["DIMENSION_LIST"]
            assert "DIMENSION_LIST" in repr(g["v"].attrs)
