"""Stored chunk maps (_versions/chunkmaps.py): the same manifest as the mappings, or none at all.

A commit stores each version's chunk map and raw_data's chunk addresses, so
readers build a dataset's manifest without libhdf5 decoding its virtual
dataset. Here: the stored path gives exactly what decoding the mappings gives,
on many layouts, and every way another writer can change the objects a map
describes (versioned-hdf5's commits and in-place deletions, this package's
deletions and ``modify_metadata``, a version re-created under a deleted name,
damaged maps) makes readers fall back to the mappings, never read wrong values.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5.xr._reading as reading
from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._backend.manifest_resolve import resolve_manifest
from xarray_vhdf5._versions import chunkmaps
from xarray_vhdf5._versions.caches import forget_shared_caches
from xarray_vhdf5._versions.mutation import open_file

FIELDS = ("slots", "rows", "offsets", "nbytes", "filter_masks", "fillvalue", "raw_fillvalue")


def _same_manifest(f: h5py.File, version: str, path: str) -> bool:
    stored = chunkmaps.load(f, version, path)
    assert stored is not None, (version, path)
    name = f"/_version_data/versions/{version}/{path}"
    got, want = stored.manifest(name), resolve_manifest(f[name])
    assert got.supported == want.supported and got.filters == want.filters, (got, want)
    assert (got.shape, got.chunks, got.dtype) == (want.shape, want.chunks, want.dtype)
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)
    assert stored.attrs.keys() == f[name].attrs.keys()
    return True


def _every_version_reads_right(path) -> None:
    """Each version through the shared reader and xarray equals h5py reading its virtual dataset."""
    want: dict[str, dict] = {}
    with h5py.File(path, "r") as f:
        for v in f["_version_data/versions"]:
            if v != "__first_version__":
                found = want[v] = {}
                f[f"_version_data/versions/{v}"].visititems(
                    lambda n, o, found=found: found.update({n: o[()]}) if isinstance(o, h5py.Dataset) else None
                )
    with VersionedHDF5File.open(path) as vf:
        for v, datasets in want.items():
            for n, values in datasets.items():
                np.testing.assert_array_equal(vf[v][n][()], values, err_msg=f"{v}/{n}")
    for v, datasets in want.items():
        with xr.open_dataset(path, engine="vhdf5", version=v) as ds:
            for n, values in datasets.items():
                if "/" not in n and n in ds:
                    if values.dtype == object:  # h5py gives bytes, xarray str
                        values = np.array([b.decode() for b in values.flat], object).reshape(values.shape)
                    np.testing.assert_array_equal(ds[n].values, values, err_msg=f"xarray {v}/{n}")


LAYOUTS = {
    "2d-f4": dict(shape=(100, 80), chunks=(10, 10), dtype="f4", kwargs={}),
    "3d-gzip-shuffle": dict(
        shape=(9, 40, 30), chunks=(2, 10, 5), dtype="i2", kwargs=dict(compression="gzip", shuffle=True)
    ),
    "1d-lzf-fill": dict(shape=(1000,), chunks=(10,), dtype="f8", kwargs=dict(compression="lzf", fillvalue=-9.0)),
    "2d-edges-fletcher": dict(shape=(95, 77), chunks=(10, 8), dtype="u1", kwargs=dict(fletcher32=True)),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_stored_manifests_equal_the_decoded_mappings(tmp_path, layout):
    spec = LAYOUTS[layout]
    rng = np.random.default_rng(0)
    data = (rng.random(spec["shape"]) * 100).astype(spec["dtype"])
    fill = spec["kwargs"].get("fillvalue", 0)
    data.reshape(-1)[: data.size // 3] = fill  # leading chunks all fill value: unmapped
    path = tmp_path / "a.h5"
    with open_file(path) as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=data, chunks=spec["chunks"], **spec["kwargs"])
            g.create_group("grp").create_dataset("y", data=data, chunks=spec["chunks"], **spec["kwargs"])
        with vf.stage_version("v2") as g:  # edits, a revert to earlier data (dedup), y carried unchanged
            g["x"][(0,) * data.ndim] = data.reshape(-1)[-1]
            g["x"][tuple(slice(0, 3) for _ in data.shape)] = fill
        with vf.stage_version("v3") as g:
            g["x"][(1,) * data.ndim] = data.reshape(-1)[-2]
    with h5py.File(path, "r") as f:
        for v in ("v1", "v2", "v3"):
            assert _same_manifest(f, v, "x") and _same_manifest(f, v, "grp/y")
    _every_version_reads_right(path)


def test_small_datasets_and_strings_get_no_map(tmp_path):
    path = tmp_path / "a.h5"
    with open_file(path) as f:
        with VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("small", data=np.arange(10.0), chunks=(5,))  # 2 chunks
            g.create_dataset(
                "s", data=np.array(["a", "bc"] * 100, dtype=object), dtype=h5py.string_dtype(), chunks=(2,)
            )
            g.create_dataset("big", data=np.arange(1000.0), chunks=(10,))
    with h5py.File(path, "r") as f:
        assert chunkmaps.load(f, "v1", "small") is None
        assert chunkmaps.load(f, "v1", "s") is None
        assert _same_manifest(f, "v1", "big")
    _every_version_reads_right(path)


def _history(path, n_versions=3):
    with open_file(path) as f:
        vf = VersionedHDF5File(f)
        for i in range(n_versions):
            with vf.stage_version(f"v{i}") as g:
                if i == 0:
                    g.create_dataset("x", data=np.arange(2000.0).reshape(100, 20), chunks=(5, 4), compression="gzip")
                else:
                    g["x"][i * 7 % 100, :] = -i
                    g["x"][50 + i] = i * 1000.0


def _commit_one_point_and_check(path, version: str) -> None:
    """Commit ``version`` (one point changed) through this package: its map is stored and right."""
    with open_file(path) as f:
        with VersionedHDF5File(f).stage_version(version) as g:
            g["x"][1, 1] = 1.5
    with h5py.File(path, "r") as f:
        assert _same_manifest(f, version, "x")
    _every_version_reads_right(path)


def test_versioned_hdf5_commits_and_deletions_never_make_a_map_lie(tmp_path):
    vh = pytest.importorskip("versioned_hdf5")
    path = tmp_path / "a.h5"
    _history(path, 4)
    with h5py.File(path, "r+") as f:
        vf = vh.VersionedHDF5File(f)
        with vf.stage_version("w1") as g:  # versioned-hdf5 commits: no map for its version
            g["x"][3] = 7.0
    with h5py.File(path, "r") as f:
        assert chunkmaps.load(f, "w1", "x") is None
        assert all(_same_manifest(f, v, "x") for v in ("v0", "v1", "v2", "v3"))
    _every_version_reads_right(path)
    with h5py.File(path, "r+") as f:  # compacts raw_data in place, new virtual datasets where chunks moved
        vh.delete_versions(f, ["v1", "v2"])
    with h5py.File(path, "r") as f:
        for v in ("v0", "v3"):
            stored = chunkmaps.load(f, v, "x")
            if stored is not None:  # only while the virtual dataset is the one the map was written for
                assert _same_manifest(f, v, "x")
    _every_version_reads_right(path)
    _commit_one_point_and_check(path, "v9")  # our commit after theirs: maps again, right


def test_a_version_recommitted_under_a_deleted_name_is_not_read_with_the_old_map(tmp_path):
    vh = pytest.importorskip("versioned_hdf5")
    path = tmp_path / "a.h5"
    _history(path, 3)
    with h5py.File(path, "r+") as f:
        vh.delete_versions(f, ["v2"])
        with vh.VersionedHDF5File(f).stage_version("v2") as g:  # same name, other data, no map written
            g["x"][:] = 5.0
    with h5py.File(path, "r") as f:
        assert chunkmaps.load(f, "v2", "x") is None  # the old v2's map (its timestamp) is not this v2's
    with VersionedHDF5File.open(path) as vf:
        np.testing.assert_array_equal(vf["v2"]["x"][()], np.full((100, 20), 5.0))
    _every_version_reads_right(path)


def test_deleting_versions_forgets_every_map(tmp_path):
    path = tmp_path / "a.h5"
    _history(path, 4)
    with open_file(path) as f:
        VersionedHDF5File(f).delete_versions(["v1"])
    with h5py.File(path, "r") as f:
        assert all(chunkmaps.load(f, v, "x") is None for v in ("v0", "v2", "v3"))
        assert "chunk_addresses" not in f["__vhdf5__"] and "chunk_maps" not in f["__vhdf5__"]
    _every_version_reads_right(path)
    _commit_one_point_and_check(path, "v4")


def test_address_rows_past_the_committed_chunks_are_asked_of_libhdf5(tmp_path):
    """Rows at or past the hash table's largest_index may be overwritten by the next commit: not trusted."""
    path = tmp_path / "a.h5"
    _history(path, 2)
    with h5py.File(path, "r+") as f:
        table = f["__vhdf5__/chunk_addresses/x"]
        committed = int(f["_version_data/x/hash_table"].attrs["largest_index"])
        assert table.shape[0] <= committed
        table[table.shape[0] // 2 :] = 12345  # stale rows, as an interrupted writer could leave
        f["_version_data/x/hash_table"].attrs["largest_index"] = np.int64(table.shape[0] // 2)
    with h5py.File(path, "r") as f:
        assert _same_manifest(f, "v1", "x")


@pytest.mark.parametrize(
    "damage", ["no-timestamp", "wrong-shape", "other-raw", "other-vds", "other-hash-table", "old-format", "past-raw"]
)
def test_a_damaged_map_is_not_used(tmp_path, damage):
    path = tmp_path / "a.h5"
    _history(path, 2)
    with h5py.File(path, "r+") as f:
        mapped = f["__vhdf5__/chunk_maps/v1/x"]
        if damage == "no-timestamp":
            del mapped.attrs["timestamp"]
        elif damage == "wrong-shape":
            mapped.attrs["shape"] = np.array([50, 20], np.int64)
        elif damage == "other-raw":
            mapped.attrs["raw"] = np.int64(1)
        elif damage == "other-vds":
            mapped.attrs["vds"] = np.int64(1)
        elif damage == "old-format":  # development builds stored int64 first rows, no format
            del mapped.attrs["format"]
        elif damage == "past-raw":  # chunk numbers beyond raw_data: not its chunks
            mapped[...] = mapped[...] * 1000
        else:  # the address table was written for another hash table (a rewrite moved chunks)
            table = f["__vhdf5__/chunk_addresses/x"]
            table[:] = 12345
            table.attrs["table"] = np.int64(1)
    with h5py.File(path, "r") as f:
        if damage == "other-hash-table":  # the map stands; its addresses come from libhdf5
            assert _same_manifest(f, "v1", "x")
        else:
            assert chunkmaps.load(f, "v1", "x") is None
        assert _same_manifest(f, "v0", "x")
    _every_version_reads_right(path)


def test_xarray_opens_a_mapped_version_without_decoding_its_mappings(tmp_path, monkeypatch):
    path = tmp_path / "a.nc"
    ds = xr.Dataset({"t": (("y", "x"), np.arange(4000.0).reshape(40, 100))})
    ds["t"].encoding["chunks"] = (4, 10)
    ds.vhdf5.commit("a", path=path)
    changed = ds.copy(deep=True)
    changed["t"][3, 3] = -1.0
    changed.vhdf5.commit("b", path=path)

    def refuse(*args, **kwargs):
        raise AssertionError("decoded the virtual dataset's mappings")

    monkeypatch.setattr(reading, "resolve_manifest", refuse)
    for version, want in (("a", ds), ("b", changed)):
        with xr.open_dataset(path, engine="vhdf5", version=version) as got:
            assert got["t"].encoding["chunks"] == (4, 10)
            xr.testing.assert_identical(got, want)


def test_attributes_by_index_equal_h5py(tmp_path):
    """read_attrs_of / attrs_by_index give what ``dict(obj.attrs)`` gives, value types and dtypes included."""
    from xarray_vhdf5._backend.h5attrs import attrs_by_index, read_attrs_of

    path = tmp_path / "attrs.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=np.arange(3))
        d.attrs["s"] = "héllo"
        d.attrs["b"] = np.bytes_(b"fix")
        d.attrs["arr"] = np.arange(4.0)
        d.attrs["strs"] = ["a", "bc"]
        d.attrs["empty"] = h5py.Empty("f4")
        d.attrs["flag"] = True
        d.attrs["z"] = np.int16(1)
        d.attrs.create("ref", f.ref, dtype=h5py.ref_dtype)
    with h5py.File(path, "r") as f:
        want = dict(f["x"].attrs)
        got = read_attrs_of(f.id, b"x")
        listed = attrs_by_index(f["x"].id, len(want))
        assert list(got) == list(want) == [name for name, _, _ in listed]
        for (name, value), (_, _, dtype) in zip(got.items(), listed):
            assert type(value) is type(want[name]), name
            assert dtype == f["x"].attrs.get_id(name).dtype, name
            if isinstance(value, h5py.Empty):
                assert value == want[name]
            elif isinstance(value, h5py.Reference):
                assert f[value] == f[want[name]]
            else:
                np.testing.assert_array_equal(value, want[name], err_msg=name)
        with pytest.raises(KeyError):
            read_attrs_of(f.id, b"missing")


def _stage_one_row_and_resize(path, version: str, monkeypatch, decodes: list) -> np.ndarray:
    """Stage ``version`` from the current one as a new process would: a row changed, the array grown.

    The caches this process kept of the file since its last commit are dropped
    first (a daily job starts without them). ``decodes`` collects each decode
    of a virtual dataset's mappings the staging asked for. Returns the values
    committed, read back through libhdf5.
    """
    import xarray_vhdf5._wrappers.chunked as chunked

    forget_shared_caches()
    decode = chunked.build_slab_indices_and_offsets

    def spy(dset, *args):
        decodes.append(dset.name)
        return decode(dset, *args)

    monkeypatch.setattr(chunked, "build_slab_indices_and_offsets", spy)
    with open_file(path) as f:
        with VersionedHDF5File(f).stage_version(version) as g:
            x = g["x"]
            x[3, :] = -7.0
            x.resize((103, 20))
            x[100:, :] = 42.0
    with h5py.File(path, "r") as f:
        assert _same_manifest(f, version, "x")
        return f[f"_version_data/versions/{version}/x"][()]


def test_staging_through_a_fresh_handle_takes_the_stored_map(tmp_path, monkeypatch):
    path = tmp_path / "a.h5"
    _history(path, 3)
    with h5py.File(path, "r") as f:
        want = f["_version_data/versions/v2/x"][()]
    want[3, :] = -7.0
    want = np.concatenate([want, np.full((3, 20), 42.0)])
    decodes: list[str] = []
    got = _stage_one_row_and_resize(path, "v3", monkeypatch, decodes)
    assert decodes == []  # the map v2's commit stored, not libhdf5 decoding v2's mappings
    np.testing.assert_array_equal(got, want)
    _every_version_reads_right(path)


@pytest.mark.parametrize("damage", ["other-vds", "no-timestamp", "past-raw"])
def test_staging_from_a_map_that_does_not_hold_decodes_the_mappings(tmp_path, monkeypatch, damage):
    path = tmp_path / "a.h5"
    _history(path, 3)
    with h5py.File(path, "r+") as f:
        want = f["_version_data/versions/v2/x"][()]
        mapped = f["__vhdf5__/chunk_maps/v2/x"]
        if damage == "other-vds":
            mapped.attrs["vds"] = np.int64(1)
        elif damage == "no-timestamp":
            del mapped.attrs["timestamp"]
        else:
            mapped[...] = mapped[...] * 1000
    want[3, :] = -7.0
    want = np.concatenate([want, np.full((3, 20), 42.0)])
    decodes: list[str] = []
    got = _stage_one_row_and_resize(path, "v3", monkeypatch, decodes)
    assert decodes == ["/_version_data/versions/v2/x"]
    np.testing.assert_array_equal(got, want)
    _every_version_reads_right(path)


def test_a_mapped_dataset_is_staged_and_committed_without_opening_it(tmp_path):
    path = tmp_path / "a.h5"
    _history(path, 2)
    with h5py.File(path, "r+") as f:
        f["_version_data/versions/v1/x"].attrs["units"] = "K"  # a user attribute, carried by name
        want = f["_version_data/versions/v1/x"][()]
    for fresh in (True, False):  # a new process (no kept caches), then the handle's own caches
        if fresh:
            forget_shared_caches()
        version = f"w{int(fresh)}"
        with open_file(path) as f:
            with VersionedHDF5File(f).stage_version(version) as g:
                x = g["x"]
                n = len(want)
                assert x._source is None and x.shape == (n, 20) and x.dtype == np.float64
                assert x.attrs["units"] == "K" and x.chunks == (5, 4)
                x.resize((n + 1, 20))
                x[n] = 7.0
                x[0, 0] = -1.0
                assert x._source is None  # the virtual dataset was never opened
                np.testing.assert_array_equal(x[1:3], want[1:3])
        want = np.concatenate([want, np.full((1, 20), 7.0)])
        want[0, 0] = -1.0
        with h5py.File(path, "r") as f:
            got = f[f"_version_data/versions/{version}/x"]
            np.testing.assert_array_equal(got[()], want)
            assert got.attrs["units"] == "K"
            assert _same_manifest(f, version, "x")
    _every_version_reads_right(path)


def test_an_unopened_staged_dataset_opens_when_read_before_any_write(tmp_path):
    path = tmp_path / "a.h5"
    _history(path, 2)
    with h5py.File(path, "r") as f:
        want = f["_version_data/versions/v1/x"][()]
    with open_file(path) as f:
        with VersionedHDF5File(f).stage_version("v2") as g:
            x = g["x"]
            assert x._source is None
            np.testing.assert_array_equal(x[10:20, 3], want[10:20, 3])  # through libhdf5, as before
            assert x.source.is_virtual and x.rewritten() is None
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["_version_data/versions/v2/x"][()], want)  # carried unchanged
        assert _same_manifest(f, "v2", "x")


def test_an_unopened_staged_dataset_refuses_reads_after_the_file_closed(tmp_path):
    from xarray_vhdf5.errors import ClosedFileError

    path = tmp_path / "a.h5"
    _history(path, 2)
    f = h5py.File(path, "r+")
    with pytest.raises(ClosedFileError):
        with VersionedHDF5File(f).stage_version("v2") as g:
            x = g["x"]
            assert x._source is None
            f.close()
            for use in (lambda: x[0], lambda: x.attrs["units"], lambda: x.resize((200, 20))):
                with pytest.raises(ClosedFileError):
                    use()
    with h5py.File(path, "r") as f:
        assert VersionedHDF5File(f).versions == ["v0", "v1"]


def test_maps_of_nested_datasets_under_non_ascii_version_names(tmp_path):
    path = tmp_path / "a.h5"
    with open_file(path) as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("été-1") as g:
            g.create_group("ocean/deep").create_dataset("t", data=np.arange(800.0).reshape(80, 10), chunks=(1, 10))
        with vf.stage_version("δ") as g:
            g["ocean/deep/t"][5] = -1.0
    with h5py.File(path, "r") as f:
        for version in ("été-1", "δ"):
            assert f"__vhdf5__/chunk_maps/{version}/ocean/deep/t" in f
            assert _same_manifest(f, version, "ocean/deep/t")
    _every_version_reads_right(path)
