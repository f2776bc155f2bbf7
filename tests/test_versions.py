"""``VersionedHDF5File``: lookups, branches, read-only versions, errors and staged groups."""

from __future__ import annotations

import datetime
import hashlib

import h5py
import numpy as np
import pytest
from h5py._hl.filters import guess_chunk

from xarray_vhdf5 import (
    ClosedFileError,
    DatasetMismatchError,
    IncompatibleDataError,
    InMemoryDataset,
    InMemoryGroup,
    InMemorySparseDataset,
    NotVersionedError,
    ReadOnlyError,
    UnsupportedError,
    VersionDataset,
    VersionedHDF5File,
    VersionExistsError,
    VersionGroup,
    VersionNotFoundError,
    VHDF5Error,
)

UTC = datetime.UTC
T0 = datetime.datetime(2021, 3, 1, 12, 0, 0, tzinfo=UTC)


def ts(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "versions.h5"


@pytest.fixture
def history(path):
    """v1 -> v2 -> v3 (current), and a branch b2 off v1; timestamps fixed."""
    f = h5py.File(path, "w")
    vf = VersionedHDF5File(f)
    with vf.stage_version("v1", timestamp=ts(0)) as g:
        g.create_dataset("x", data=np.arange(10, dtype="i8"), chunks=(4,))
        g.create_dataset("grp/y", data=np.ones((3, 3)), chunks=(2, 2), fillvalue=-1.0)
        g["grp"].attrs["title"] = "g"
    with vf.stage_version("v2", timestamp=ts(10)) as g:
        g["x"][0] = 100
    with vf.stage_version("b2", prev_version="v1", make_current=False, timestamp=ts(15)) as g:
        g["x"][1] = -1
    with vf.stage_version("v3", timestamp=ts(20)) as g:
        g["x"][2] = 200
    yield vf
    f.close()


def file_fingerprint(path) -> str:
    """SHA-256 over the file's bytes and every object, attribute and data byte of its tree."""
    h = hashlib.sha256(path.read_bytes())
    with h5py.File(path, "r") as f:

        def visit(name, obj):
            h.update(name.encode())
            for key in sorted(obj.attrs):
                h.update(key.encode() + repr(obj.attrs[key]).encode())
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                h.update(repr(data.tolist()).encode() if data.dtype.kind == "O" else data.tobytes())
                h.update(repr((obj.shape, obj.maxshape, obj.dtype.str)).encode())
                if obj.is_virtual:
                    sources = obj.virtual_sources()
                    maps = [(s.vspace.get_select_bounds(), s.src_space.get_select_bounds()) for s in sources]
                    h.update(repr(maps).encode())

        f.visititems(visit)
        for key in sorted(f["_version_data/versions"].attrs):
            h.update(key.encode() + repr(f["_version_data/versions"].attrs[key]).encode())
    return h.hexdigest()


# -- lookups -------------------------------------------------------------------


def test_lookup_by_name(history):
    v1 = history["v1"]
    assert isinstance(v1, VersionGroup)
    assert v1.version == "v1"
    assert history["v1"]["x"][()].tolist() == list(range(10))
    assert history["v2"]["x"][0] == 100
    assert history["b2"]["x"][:3].tolist() == [0, -1, 2]
    assert history["v3"]["x"][:3].tolist() == [100, 1, 200]
    assert history.get_version_by_name("v2").version == "v2"
    assert history.get_version_by_name("").version == "v3"
    assert "v1" in history and "nope" not in history and "__first_version__" not in history


def test_lookup_current_and_ancestors(history):
    assert history.current_version == "v3"
    assert history[None].version == "v3"
    assert history[0].version == "v3"
    assert history[np.int64(0)].version == "v3"
    assert history[-1].version == "v2"
    assert history[-2].version == "v1"
    with pytest.raises(VersionNotFoundError, match="'v3' has only 2 ancestors, cannot go back 3 versions"):
        history[-3]
    with pytest.raises(IndexError):
        history[1]
    with pytest.raises(TypeError):
        history[1.5]


def test_lookup_by_timestamp(history):
    assert history[ts(10)].version == "v2"  # exact
    assert history[ts(12)].version == "v2"  # latest before
    assert history[ts(15)].version == "b2"
    assert history[ts(1000)].version == "v3"
    assert history[ts(10).replace(tzinfo=None)].version == "v2"  # naive is UTC
    paris = datetime.timezone(datetime.timedelta(hours=1))
    assert history[ts(10).astimezone(paris)].version == "v2"
    assert history[np.datetime64("2021-03-01T12:10:00")].version == "v2"
    assert history[np.datetime64("2021-03-01T12:19:59.999999")].version == "b2"
    assert history.get_version_by_timestamp(ts(20), exact=True).version == "v3"
    with pytest.raises(VersionNotFoundError):
        history.get_version_by_timestamp(ts(21), exact=True)
    with pytest.raises(VersionNotFoundError, match="before"):
        history[ts(-1)]


def test_versions_order_and_info(history, path):
    assert history.versions == ["v1", "v2", "b2", "v3"]
    assert list(history) == history.versions
    assert len(history) == 4
    info = history.version_info("b2")
    assert (info.name, info.prev_version, info.timestamp, info.committed) == ("b2", "v1", ts(15), True)
    assert history.version_info(-1).name == "v2"
    with h5py.File(path, "r") as f:  # a second handle reads the same history
        assert VersionedHDF5File(f).versions == ["v1", "v2", "b2", "v3"]


def test_versions_ordered_by_timestamp_not_name(path):
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        for name, minutes in [("c", 5), ("a", 30), ("b", 10)]:
            with vf.stage_version(name, prev_version="", timestamp=ts(minutes)) as g:
                g.create_dataset("x", data=[minutes], chunks=(1,))
        assert vf.versions == ["c", "b", "a"]
        assert vf.current_version == "b"
        assert vf[ts(20)].version == "b"


def test_timestamps_stored_in_utc(path):
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        tokyo = datetime.timezone(datetime.timedelta(hours=9))
        in_tokyo = datetime.datetime(2021, 3, 1, 21, 0, tzinfo=tokyo)
        with pytest.raises(ValueError, match="timestamp must be in UTC"):  # as versioned-hdf5
            with vf.stage_version("v1", timestamp=in_tokyo):
                pass
        with vf.stage_version("v1", timestamp=in_tokyo.astimezone(UTC)) as g:
            g.create_dataset("x", data=[1], chunks=(1,))
        with vf.stage_version("v2", timestamp=np.datetime64("2021-03-02T00:00:00.123456")) as g:
            pass
        versions = f["_version_data/versions"]
        assert versions["v1"].attrs["timestamp"] == "2021-03-01 12:00:00.000000+0000"
        assert versions["v2"].attrs["timestamp"] == "2021-03-02 00:00:00.123456+0000"
        before = datetime.datetime.now(UTC)
        with vf.stage_version("v3") as g:
            pass
        after = datetime.datetime.now(UTC)
        assert before - datetime.timedelta(seconds=1) <= vf.version_info("v3").timestamp <= after


def test_current_version_setter(history):
    history.current_version = "v1"
    assert history.current_version == "v1"
    assert history[-0].version == "v1"
    with history.stage_version("v4") as g:
        assert g["x"][:3].tolist() == [0, 1, 2]
    assert history.version_info("v4").prev_version == "v1"
    with pytest.raises(VersionNotFoundError):
        history.current_version = "nope"
    assert history.current_version == "v4"


def test_branch_without_make_current(history, path):
    assert history.current_version == "v3"
    assert history.version_info("b2").prev_version == "v1"
    with history.stage_version("b3", prev_version="b2", make_current=False) as g:
        assert g["x"][1] == -1
        g["x"][9] = 9999
    assert history.current_version == "v3"
    assert history["b3"]["x"][()].tolist() == [0, -1, 2, 3, 4, 5, 6, 7, 8, 9999]
    with h5py.File(path, "r") as f:
        assert f["_version_data/versions"].attrs["current_version"] == "v3"


def test_empty_prev_version(history):
    with history.stage_version("fresh", prev_version="") as g:
        assert len(g) == 0 and list(g) == []
        g.create_dataset("z", data=np.arange(3), chunks=(2,))
    assert history.version_info("fresh").prev_version == "__first_version__"
    assert history["fresh"].keys() == ["z"]
    assert history.current_version == "fresh"
    with pytest.raises(VersionNotFoundError, match="'fresh' has no ancestor, cannot go back 1 version$"):
        history[-1]


def test_ancestor_count_in_the_message_is_singular_for_one(history):
    """``vf[-n]`` past the first version: "1 ancestor", not "1 ancestors"."""
    with history.stage_version("c2", prev_version="v1") as g:
        g["x"][0] = 7
    assert history[-1].version == "v1"
    with pytest.raises(VersionNotFoundError, match="'c2' has only 1 ancestor, cannot go back 2 versions$"):
        history[-2]


def test_prev_version_by_name_starts_from_it(history):
    with history.stage_version("from_v1", prev_version="v1") as g:
        assert g["x"][0] == 0
        assert g["grp"].attrs["title"] == "g"
        assert sorted(g) == ["grp", "x"]
    assert history["from_v1"]["x"][()].tolist() == list(range(10))


def test_empty_file_history(path):
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        assert vf.versions == [] and len(vf) == 0
        assert vf.current_version == "__first_version__"
        with pytest.raises(VersionNotFoundError, match="no committed version"):
            vf[None]
        with pytest.raises(VersionNotFoundError):
            vf[0]
        assert "_version_data/versions/__first_version__" in f


# -- read-only committed versions ---------------------------------------------


def test_committed_versions_are_read_only(history, path):
    before = history["v2"]["x"][()].copy()
    v2 = history["v2"]
    x = v2["x"]
    assert isinstance(x, VersionDataset)
    attempts = [
        lambda: x.__setitem__(0, 5),
        lambda: x.resize((20,)),
        lambda: x.attrs.__setitem__("a", 1),
        lambda: x.attrs.__delitem__("chunks"),
        lambda: v2.attrs.__setitem__("a", 1),
        lambda: v2.create_dataset("new", data=[1]),
        lambda: v2.create_group("g"),
        lambda: v2.require_dataset("x", shape=(10,), dtype="i8"),
        lambda: v2.require_group("grp"),
        lambda: v2.__setitem__("x", np.arange(3)),
        lambda: v2.__delitem__("x"),
        lambda: v2.move("x", "x2"),
        lambda: v2["grp"].create_dataset("new", data=[1]),
        lambda: v2["grp"]["y"].__setitem__((0, 0), 5.0),
        lambda: v2["grp"].attrs.__setitem__("title", "h"),
    ]
    for attempt in attempts:
        with pytest.raises(ReadOnlyError) as info:
            attempt()
        assert isinstance(info.value, PermissionError)
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, VHDF5Error)
        assert "read-only" in str(info.value)
    np.testing.assert_array_equal(history["v2"]["x"][()], before)
    assert "new" not in history["v2"] and "a" not in history["v2"].attrs
    with h5py.File(path, "r") as f:
        assert set(f["_version_data/versions/v2"]) == {"x", "grp"}


def test_staged_group_is_closed_after_commit(history):
    with history.stage_version("v4") as g:
        x = g["x"]
    # Reads go to the committed version, read-only (as versioned-hdf5 2.6 serves them).
    assert g["x"][()].tolist() == history["v4"]["x"][()].tolist()
    with pytest.raises(ReadOnlyError):
        g["x"][0] = 5
    with pytest.raises(ReadOnlyError):
        g.create_dataset("late", data=[1])
    with pytest.raises(ReadOnlyError):
        g.create_group("late")
    for attempt in (lambda: x.__setitem__(0, 5), lambda: x.resize((3,))):
        with pytest.raises(ReadOnlyError):
            attempt()
    assert "late" not in history["v4"]
    assert history["v4"]["x"][()].tolist() == history["v3"]["x"][()].tolist()


def test_committed_tree_frees_its_staged_data_without_the_cyclic_gc(history):
    # A staged tree is a reference cycle (groups <-> datasets); the commit must break it,
    # or a loop of commits holds every version's staged slabs until the cyclic GC runs.
    import gc
    import weakref

    gc.disable()
    try:
        refs = []
        for k in range(3):
            with history.stage_version(f"loop{k}") as g:
                g["x"][0] = 100 + k
                g.create_group(f"made{k}").create_dataset("y", data=np.arange(4.0))
                refs.append(weakref.ref(g["x"].staged_array))
                refs.append(weakref.ref(g[f"made{k}/y"]))
            del g
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        gc.enable()
    assert history["loop2"]["x"][0] == 102
    assert history["loop2"]["made2/y"][()].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_staged_group_of_a_failed_block_is_closed(history):
    with pytest.raises(RuntimeError):
        with history.stage_version("v4") as g:
            x = g["x"]
            raise RuntimeError("pipeline failed")
    with pytest.raises(ReadOnlyError):
        x[0] = 1
    with pytest.raises(ReadOnlyError):
        g.create_dataset("late", data=[1])
    assert "v4" not in history


def test_dataset_held_after_commit_keeps_its_data_and_refuses_edits(history):
    with history.stage_version("v4") as g:
        x = g["x"]
        x[0] = 42
    assert x[0] == 42 and x.shape == history["v4"]["x"].shape
    with pytest.raises(ReadOnlyError):
        x[0] = 1
    assert history["v4"]["x"][0] == 42


def test_root_attrs_carried_to_next_version(history):
    """A staged version starts with its previous version's root attributes, as with subgroups.

    versioned-hdf5 2.6 starts every version's root attributes empty instead.
    """
    with history.stage_version("v4") as g:
        g.attrs["root"] = "r"
    with history.stage_version("v5") as g:
        assert dict(g.attrs) == {"root": "r"}
    assert history["v5"].attrs["root"] == "r"
    assert "root" not in history["v3"].attrs


def test_version_dataset_metadata(history):
    y = history["v1"]["grp/y"]
    assert (y.shape, y.dtype, y.ndim, y.size, len(y)) == ((3, 3), np.dtype("f8"), 2, 9, 3)
    assert y.chunks == (2, 2)
    assert y.fillvalue == -1.0
    assert y.maxshape == (3, 3)
    assert y.raw_data.name == "/_version_data/grp/y/raw_data"
    np.testing.assert_array_equal(np.asarray(y), np.ones((3, 3)))
    assert history["v1"]["grp"]["y"].name == y.name
    assert sorted(history["v1"]) == ["grp", "x"]
    seen = []
    history["v1"].visititems(lambda name, obj: seen.append((name, type(obj).__name__)))
    assert sorted(seen) == [("grp", "VersionGroup"), ("grp/y", "VersionDataset"), ("x", "VersionDataset")]
    with pytest.raises(KeyError, match="nope"):
        history["v1"]["nope"]


# -- errors ----------------------------------------------------------------------


def test_unknown_version(history):
    with pytest.raises(VersionNotFoundError) as info:
        history["nope"]
    assert isinstance(info.value, KeyError)
    message = str(info.value)
    assert "'nope'" in message
    for name in ("v1", "v2", "b2", "v3"):
        assert repr(name) in message
    with pytest.raises(KeyError):
        history.version_info("nope")


def test_unknown_version_message_is_bounded(path):
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        for i in range(15):
            with vf.stage_version(f"v{i:02d}", timestamp=ts(i)):
                pass
        with pytest.raises(VersionNotFoundError) as info:
            vf["nope"]
        message = str(info.value)
        assert "last 10 of 15" in message and "'v14'" in message and "'v04'" not in message


def test_duplicate_version_name(history, path):
    history.f.flush()
    before = file_fingerprint(path)
    with pytest.raises(VersionExistsError) as info:
        with history.stage_version("v2") as g:
            g["x"][0] = 1
    assert isinstance(info.value, ValueError)
    assert "v2" in str(info.value)
    history.f.flush()
    assert file_fingerprint(path) == before


@pytest.mark.parametrize("name", ["", "a/b", "/v", "__first_version__", ".", "..", 5, b"v5"])
def test_bad_version_names(history, name):
    with pytest.raises((ValueError, TypeError)):
        with history.stage_version(name):
            pass
    assert history.versions == ["v1", "v2", "b2", "v3"]


def test_version_name_none_is_a_uuid(history):
    # As versioned-hdf5: stage_version(None) names the version with a random UUID4.
    import uuid

    with history.stage_version(None):
        pass
    new = history.current_version
    assert str(uuid.UUID(new)) == new and history.versions[-1] == new


def test_missing_prev_version(history):
    with pytest.raises(VersionNotFoundError, match="nope"):
        with history.stage_version("v4", prev_version="nope"):
            pass
    assert "v4" not in history


def test_failed_block_commits_nothing(history, path):
    history.f.flush()
    before = file_fingerprint(path)

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with history.stage_version("v4") as g:
            g["x"][:] = 0
            g.create_dataset("new", data=np.arange(100), chunks=(10,))
            g.create_group("newgroup")
            raise Boom
    assert history.current_version == "v3"
    assert history.versions == ["v1", "v2", "b2", "v3"]
    with pytest.raises(VersionNotFoundError):
        history["v4"]
    history.f.flush()
    assert file_fingerprint(path) == before
    # the name is still free
    with history.stage_version("v4") as g:
        g["x"][3] = 3
    assert history["v4"]["x"][:4].tolist() == [100, 1, 200, 3]


def test_failure_inside_commit_removes_the_version(history):
    """An error while writing (here: an object array of ints cannot be stored as strings)
    deletes the half-made version group and leaves current_version as it was."""
    with pytest.raises(TypeError, match="str or bytes"):
        with history.stage_version("v4") as g:
            g["x"][0] = -100
            g.create_dataset("o", data=np.array([1, 2], dtype=object))
    assert history.current_version == "v3"
    assert "v4" not in history
    assert "v4" not in history.f["_version_data/versions"]
    with history.stage_version("v4") as g:
        g.create_dataset("o", data=np.array(["1", "2"], dtype=object), dtype=h5py.string_dtype())
    assert history["v4"]["o"][()].tolist() == [b"1", b"2"]
    assert history["v4"]["x"][0] == 100


@pytest.mark.parametrize(
    "name,kwargs,match",
    [
        ("x", dict(data=np.arange(10), chunks=(5,)), "chunks"),
        ("x", dict(data=np.arange(10, dtype="i4"), chunks=(4,)), "dtype"),
        ("x", dict(data=np.arange(10), chunks=(4,), fillvalue=3), "fill value"),
        ("x", dict(data=np.arange(10), chunks=(4,), compression="gzip"), "filters"),
        ("grp/y", dict(data=np.ones((3, 3)), chunks=(2, 2), fillvalue=0.0), "fill value"),
        ("x", dict(data=np.zeros((4, 10)), chunks=(2, 5)), "2 dimensions .* has 1"),
        ("grp/y", dict(data=np.arange(9.0), chunks=(3,)), "1 dimensions .* has 2"),
    ],
)
def test_incompatible_redefinition_commits_nothing(history, path, name, kwargs, match):
    """A dataset's dtype, chunks, fill value and filters are fixed by its first version."""
    history.f.flush()
    before = file_fingerprint(path)
    with pytest.raises(IncompatibleDataError, match=match) as info:
        with history.stage_version("v4") as g:
            g.create_dataset("a_new_one", data=np.arange(50), chunks=(10,))
            g["grp/y"][0, 0] = 42.0
            del g[name]
            g.create_dataset(name, **kwargs)
    assert isinstance(info.value, ValueError)
    assert history.current_version == "v3"
    assert "v4" not in history
    history.f.flush()
    assert file_fingerprint(path) == before
    assert "_version_data/a_new_one" not in history.f


def test_compatible_redefinition_keeps_first_metadata(history):
    """Chunks not given are taken from the dataset's first version; but an n-d
    ``create_dataset`` needs chunks, as in versioned-hdf5 2.6, whatever the file holds."""
    with history.stage_version("v4") as g:
        del g["x"]
        g["x"] = np.arange(20, dtype="i8")
        del g["grp/y"]
        with pytest.raises(NotImplementedError, match="chunks must be specified"):
            g.create_dataset("grp/y", data=np.zeros((4, 4)), fillvalue=-1.0)
        g["grp/y"] = np.zeros((4, 4))
    assert history["v4"]["x"].chunks == (4,)
    assert history["v4"]["grp/y"].chunks == (2, 2)
    assert history["v4"]["x"][()].tolist() == list(range(20))


@pytest.mark.parametrize(
    "make",
    [
        lambda g: g.create_dataset("s", data=1.5),
        lambda g: g.create_dataset("s", data=np.float64(1.5)),
        lambda g: g.create_dataset("s", shape=(), dtype="f8"),
        lambda g: g.__setitem__("s", 5),
        lambda g: g.create_dataset("e", data=h5py.Empty("f8")),
        lambda g: g.create_dataset("e", dtype="f8"),
    ],
)
def test_scalar_and_empty_unsupported(history, make):
    with pytest.raises(UnsupportedError) as info:
        with history.stage_version("v4") as g:
            make(g)
    assert isinstance(info.value, NotImplementedError)
    assert "v4" not in history


def test_not_versioned_read_only_file(path):
    with h5py.File(path, "w") as f:
        f["plain"] = np.arange(3)
    with h5py.File(path, "r") as f:
        with pytest.raises(NotVersionedError) as info:
            VersionedHDF5File(f)
        assert isinstance(info.value, ValueError)
        assert "_version_data" not in f
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)  # a writable file gets an empty history
        assert vf.versions == []
        assert f["_version_data/versions"].attrs["data_version"] == 4


def test_read_only_file_refuses_staging(history, path):
    history.f.close()
    with h5py.File(path, "r") as f:
        vf = VersionedHDF5File(f)
        assert vf["v2"]["x"][0] == 100
        with pytest.raises(ReadOnlyError):
            with vf.stage_version("v4"):
                pass


def test_newer_data_version_refused(history, path):
    history.f["_version_data/versions"].attrs["data_version"] = 5
    history.f.close()
    with h5py.File(path, "r") as f:
        with pytest.raises(IncompatibleDataError, match="data_version 5"):
            VersionedHDF5File(f)


def test_closed_file(history, path):
    with VersionedHDF5File(history.f) as vf:
        assert vf["v1"]["x"][0] == 0
    assert vf.closed
    assert "Closed" in repr(vf)
    for attempt in (
        lambda: vf["v1"],
        lambda: vf.current_version,
        lambda: vf.versions,
        lambda: len(vf),
        lambda: vf.stage_version("v9").__enter__(),
    ):
        with pytest.raises(ClosedFileError) as info:
            attempt()
        assert isinstance(info.value, ValueError)
    assert not history.closed
    history.f.close()
    assert history.closed
    with pytest.raises(ClosedFileError):
        history["v1"]


CLOSED_MESSAGE = "its h5py file was closed; reopen the file and get the version again"


def test_committed_objects_after_the_file_closed(history):
    """Reads of a version's datasets, groups and attributes once the h5py file was
    closed: ClosedFileError (a ValueError) as ``vf[...]`` raises, not libhdf5's
    RuntimeError / KeyError ("identifier is not of specified type")."""
    version, lazy = history["v2"], history["v3"]
    grp, x = version["grp"], version["x"]
    attrs = x.attrs
    assert x[0] == 100 and attrs["chunks"].tolist() == [4]  # open handles, as before
    history.f.close()
    reads = {
        "x[0]": lambda: x[0],
        "x[:]": lambda: x[:],
        "np.asarray": lambda: np.asarray(x),
        "shape": lambda: x.shape,
        "dtype": lambda: x.dtype,
        "len": lambda: len(x),
        "iter": lambda: list(x),
        "chunks": lambda: x.chunks,
        "fillvalue": lambda: x.fillvalue,
        "compression": lambda: x.compression,
        "read_direct": lambda: x.read_direct(np.empty(10, "i8")),
        "astype": lambda: x.astype("f4"),
        "parent": lambda: x.parent,
        "x.attrs[...]": lambda: x.attrs["chunks"],
        "held attrs": lambda: attrs["chunks"],
        "attrs iteration": lambda: list(attrs),
        "attrs in": lambda: "chunks" in attrs,
        "attrs.get": lambda: attrs.get("nope"),
        "group member": lambda: version["x"],
        "subgroup member": lambda: grp["y"],
        "group attrs": lambda: grp.attrs["title"],
        "keys": lambda: version.keys(),
        "iteration": lambda: list(version),
        "in": lambda: "x" in version,
        "len(group)": lambda: len(version),
        "name": lambda: version.name,
        "get": lambda: version.get("x"),
        "datasets": lambda: version.datasets(),
        "visititems": lambda: version.visititems(lambda *a: None),
        "unopened version member": lambda: lazy["x"],
        "unopened version attrs": lambda: lazy.attrs,
    }
    for what, read in reads.items():
        with pytest.raises(ClosedFileError, match=CLOSED_MESSAGE) as info:
            read()
        assert isinstance(info.value, ValueError), what
    with pytest.raises(ClosedFileError, match="cannot access a dataset of version 'v2'"):
        x[0]
    with pytest.raises(ClosedFileError, match="cannot access version 'v3'"):
        lazy["x"]
    with pytest.raises(ClosedFileError, match="cannot access the attributes of a committed version"):
        attrs["chunks"]
    assert repr(x) == "<Closed VersionDataset>"
    assert repr(version) == "<Closed VersionGroup of version 'v2'>"
    assert "closed" in repr(attrs)


def test_staged_objects_after_the_file_closed(path):
    """The h5py file closed inside a stage_version block: staged reads that need the
    file raise ClosedFileError, and the block's end commits nothing."""
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(10), chunks=(4,))
            g.create_dataset("y", data=np.arange(10), chunks=(4,))
            g["x"].attrs["units"] = "m"
            g.attrs["title"] = "t"
    f = h5py.File(path, "r+")
    vf = VersionedHDF5File(f)
    with pytest.raises(ClosedFileError, match=r"closed inside the stage_version\('v2'\) block: nothing was committed"):
        with vf.stage_version("v2") as g:
            x, y = g["x"], g["y"]
            f.close()
            uses = {
                "read": lambda: x[0],
                "write": lambda: x.__setitem__(0, 5),
                "resize": lambda: y.resize((20,)),
                "fillvalue": lambda: x.fillvalue,
                "dataset attrs": lambda: x.attrs["units"],
                "group attrs": lambda: g.attrs["title"],
            }
            for what, use in uses.items():
                with pytest.raises(ClosedFileError, match="closed inside the stage_version.. block") as info:
                    use()
                assert isinstance(info.value, ValueError), what
    with h5py.File(path, "r") as f:
        assert VersionedHDF5File(f).versions == ["v1"]


def test_closed_h5py_file_given(path):
    f = h5py.File(path, "w")
    f.close()
    with pytest.raises(ClosedFileError, match=r"VersionedHDF5File\(\) was given a closed h5py file"):
        VersionedHDF5File(f)


# -- staged groups -------------------------------------------------------------


def test_staged_group_navigation(history):
    with history.stage_version("v4") as g:
        assert isinstance(g, InMemoryGroup)
        assert sorted(g) == ["grp", "x"] and len(g) == 2
        assert sorted(g.keys()) == ["grp", "x"]
        assert isinstance(g["x"], InMemoryDataset)
        assert isinstance(g["grp"], InMemoryGroup)
        assert g["grp/y"] is g["grp"]["y"]
        assert g["/grp/y"] is g["grp/y"]
        assert "grp/y" in g and "grp/nope" not in g and "x/y" not in g
        assert g.get("nope") is None and g.get("nope", 3) == 3
        assert g["x"].shape == (10,) and g["x"].dtype == np.dtype("i8") and g["x"].chunks == (4,)
        assert g["grp/y"].fillvalue == -1.0
        assert g["x"][:3].tolist() == [100, 1, 200]
        assert not g["x"].has_changes
        with pytest.raises(KeyError):
            g["nope"]


def test_staged_create_group_and_datasets(history):
    with history.stage_version("v4") as g:
        c = g.create_group("a/b/c")
        assert c.name == "a/b/c"
        assert isinstance(g["a/b"], InMemoryGroup)
        with pytest.raises(ValueError, match="exists"):
            g.create_group("a/b")
        assert g.require_group("a/b") is g["a/b"]
        c.create_dataset("d", data=np.arange(6).reshape(2, 3), chunks=(1, 3))
        g["a"].attrs["level"] = 1
        c.attrs["level"] = 3
        g["a/b/c/d"].attrs["units"] = "s"
        ds = g.create_dataset("made/by/path", shape=(5,), dtype="i2", fillvalue=4, chunks=(2,))
        assert isinstance(ds, InMemorySparseDataset)  # no data: only written chunks are kept
        assert ds[()].tolist() == [4] * 5
        assert ds.staged_array.slab_indices.tolist() == [0, 0, 0]
        with pytest.raises(ValueError, match="exists"):  # made in this version (the previous version's are replaced)
            g.create_dataset("made/by/path", data=[1])
        with pytest.raises(ValueError, match="reserved"):
            g.create_dataset("versions", data=[1])
        with pytest.raises(ValueError, match="reserved"):
            g.attrs["committed"] = False
    v4 = history["v4"]
    assert v4["a/b/c/d"][()].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert v4["a"].attrs["level"] == 1 and v4["a/b/c"].attrs["level"] == 3
    assert v4["a/b/c/d"].attrs["units"] == "s"
    assert v4["made/by/path"][()].tolist() == [4] * 5
    assert v4["made/by/path"].fillvalue == 4
    with h5py.File(history.f.filename, "r") as f:
        assert "_version_data/a/b/c/d/raw_data" in f
        assert "_version_data/made/by/path/raw_data" in f


def test_staged_setitem_guesses_chunks_like_h5py(history):
    """1-d arrays get h5py's guess, as versioned-hdf5's commit gives them (n-d ones need
    chunks: test_peer_parity.py::test_nd_array_assigned_without_chunks_is_refused_at_commit)."""
    data = np.arange(300 * 200, dtype="f4")
    line = np.arange(100_000, dtype="i8")
    with history.stage_version("v4") as g:
        g["m"] = data
        g["sub/line"] = line
        g["strings"] = np.array(["a", "bc"])
        # An existing dataset is replaced, as versioned-hdf5 does (h5py would refuse).
        g["x"] = np.arange(3)
        with pytest.raises(ValueError, match="exists"):
            g["sub"] = np.arange(3)  # a group is never replaced
    np.testing.assert_array_equal(history["v4"]["x"][()], np.arange(3))
    assert history["v4"]["m"].chunks == guess_chunk(data.shape, None, 4)
    assert history["v4"]["sub/line"].chunks == guess_chunk(line.shape, None, 8)
    np.testing.assert_array_equal(history["v4"]["m"][()], data)
    assert history["v4"]["strings"][()].tolist() == [b"a", b"bc"]
    assert h5py.check_string_dtype(history["v4"]["strings"].dtype) is not None


def test_staged_delete(history):
    with history.stage_version("v4") as g:
        del g["x"]
        del g["grp/y"]
        assert "x" not in g and "grp/y" not in g and "grp" in g
        with pytest.raises(KeyError):
            del g["nope"]
    assert history["v4"].keys() == ["grp"]
    assert len(history["v4"]["grp"]) == 0
    assert history["v4"]["grp"].attrs["title"] == "g"
    with history.stage_version("v5") as g:
        del g["grp"]
    assert history["v5"].keys() == []
    assert history["v3"]["x"][0] == 100  # older versions keep them


def test_staged_move(history):
    with history.stage_version("v4") as g:
        g.move("x", "moved/x2")
        g.move("grp", "grp2")
        assert sorted(g) == ["grp2", "moved"]
        assert g["grp2/y"].name == "grp2/y"
        assert g["moved/x2"][:3].tolist() == [100, 1, 200]
        with pytest.raises(KeyError):
            g.move("nope", "elsewhere")
        with pytest.raises(ValueError, match="exists"):
            g.move("moved", "grp2")
    v4 = history["v4"]
    assert sorted(v4) == ["grp2", "moved"]
    assert v4["moved/x2"][()].tolist() == history["v3"]["x"][()].tolist()
    assert v4["moved/x2"].chunks == (4,)
    assert v4["grp2/y"].fillvalue == -1.0
    assert v4["grp2"].attrs["title"] == "g"
    assert v4["moved/x2"].raw_data.name == "/_version_data/moved/x2/raw_data"


def test_staged_require_dataset(history):
    with history.stage_version("v4") as g:
        assert g.require_dataset("x", shape=(10,), dtype="i8") is g["x"]
        assert g.require_dataset("x", shape=10, dtype="i4") is g["x"]  # i4 casts to i8
        with pytest.raises(DatasetMismatchError, match="shape") as info:
            g.require_dataset("x", shape=(11,), dtype="i8")
        # h5py raises TypeError (versioned-hdf5 2.6's staged require_dataset raises KeyError
        # for any dataset of the previous version)
        assert isinstance(info.value, TypeError) and isinstance(info.value, IncompatibleDataError)
        with pytest.raises(DatasetMismatchError, match="dtype"):
            g.require_dataset("x", shape=(10,), dtype="i4", exact=True)
        with pytest.raises(TypeError):
            g.require_dataset("grp", shape=(1,), dtype="i8")
        new = g.require_dataset("r", shape=(4,), dtype="f8", chunks=(2,), fillvalue=2.5)
        assert new[()].tolist() == [2.5] * 4
    assert history["v4"]["r"][()].tolist() == [2.5] * 4


def test_staged_attrs(history):
    with history.stage_version("v4") as g:
        assert dict(g["grp"].attrs) == {"title": "g"}
        assert "raw_data" not in g["x"].attrs and "chunks" not in g["x"].attrs
        g["grp"].attrs["title"] = "changed"
        g["grp"].attrs.create("typed", [1, 2], dtype="i2")
        g["x"].attrs["note"] = "n"
        del g["grp"].attrs["title"]
        g.attrs["root"] = "r"
        assert len(g["grp"].attrs) == 1
    v4 = history["v4"]
    assert list(v4["grp"].attrs) == ["typed"]
    assert v4["grp"].attrs["typed"].tolist() == [1, 2]
    assert v4["grp"].attrs["typed"].dtype == np.dtype("i2")
    assert v4["x"].attrs["note"] == "n"
    assert v4.attrs["root"] == "r"
    assert v4["x"][0] == 100
    assert history["v3"]["grp"].attrs["title"] == "g"


def test_staged_visititems(history):
    with history.stage_version("v4") as g:
        g.create_dataset("grp/sub/z", data=[1, 2], chunks=(1,))
        seen = []
        g.visititems(lambda name, obj: seen.append((name, type(obj).__name__)))
        assert sorted(seen) == [
            ("grp", "InMemoryGroup"),
            ("grp/sub", "InMemoryGroup"),
            ("grp/sub/z", "InMemoryArrayDataset"),
            ("grp/y", "InMemoryDataset"),
            ("x", "InMemoryDataset"),
        ]
        names = []
        g["grp"].visit(names.append)
        assert sorted(names) == ["sub", "sub/z", "y"]
        assert g.visititems(lambda name, obj: name if name.endswith("z") else None) == "grp/sub/z"


def test_staged_edits_read_back_before_commit(history):
    with history.stage_version("v4") as g:
        x = g["x"]
        x[5:7] = [50, 60]
        assert x.has_changes
        assert x[4:8].tolist() == [4, 50, 60, 7]
        x.resize((12,))
        assert x.shape == (12,) and x[10:].tolist() == [0, 0]
        x.resize(6, axis=0)
        assert x.shape == (6,)
        with pytest.raises(IncompatibleDataError):
            x.resize((3, 3))
        with pytest.raises(IncompatibleDataError):
            x.resize((-1,))
        y = g["grp/y"]
        y.resize((4, 4))
        assert y[3, 3] == -1.0
        assert np.asarray(y).shape == (4, 4)
    assert history["v4"]["x"][()].tolist() == [100, 1, 200, 3, 4, 50]
    assert history["v4"]["grp/y"][3].tolist() == [-1.0] * 4


def test_staged_strings(history):
    with history.stage_version("v4") as g:
        strings = np.array(["a", "b", "c"], dtype=object)
        g.create_dataset("s", data=strings, dtype=h5py.string_dtype(), chunks=(2,))
    with history.stage_version("v5") as g:
        g["s"][1] = "bee"
        g["s"][2] = b"sea"
        g["s"].resize((4,))
    assert history["v5"]["s"][()].tolist() == [b"a", b"bee", b"sea", b""]
    assert history["v4"]["s"][()].tolist() == [b"a", b"b", b"c"]
    assert history["v5"]["s"].fillvalue == b""  # as h5py reports it; raw_data stores none


def test_maxshape(history):
    with history.stage_version("v4") as g:
        with pytest.warns(UserWarning, match="maxshape"):  # not stored (versioned-hdf5 warns so too)
            ds = g.create_dataset("limited", data=np.arange(4), chunks=(2,), maxshape=(6,))
        ds.resize((6,))
        with pytest.raises(IncompatibleDataError, match="maxshape"):
            ds.resize((7,))
        with pytest.raises(IncompatibleDataError, match="maxshape"), pytest.warns(UserWarning, match="maxshape"):
            g.create_dataset("bad", data=np.arange(4), chunks=(2,), maxshape=(3,))
    assert history["v4"]["limited"].shape == (6,)
