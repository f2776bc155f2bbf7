"""zarr-python's store conformance kit (``zarr.testing.store.StoreTests``) for the read store.

:class:`~xarray_vhdf5.store.VersionStore` presents one committed version, so its
keys are fixed by the version's datasets: the kit's ``set`` helper, which places
arbitrary bytes at arbitrary keys behind the store's back, has no equivalent
(a new key needs a new commit, which makes a new version, not a change of this
one). Every kit test that only *reads* is therefore run again here on the
version's real keys, with the expected bytes read independently of the store:
a chunk key's value is the raw_data chunk h5py's ``read_direct_chunk`` returns
at the offset the version's virtual dataset maps (:func:`raw_chunk`), and the
listing is derived from h5py's ``virtual_sources()``. The tests that need
writing are skipped one by one, each saying why.

The kit's tests are coroutines written for pytest-asyncio, which this project
does not use: each is run here through zarr's own ``zarr.core.sync.sync``
(the event loop zarr's synchronous API runs on).
"""

from __future__ import annotations

import json
import pickle

import h5py
import numpy as np
import pytest
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import Buffer
from zarr.core.sync import _collect_aiterator, sync
from zarr.testing.store import StoreTests

import xarray_vhdf5
from xarray_vhdf5.store import VersionStore

VERSIONS = "_version_data/versions"
PROTO = default_buffer_prototype()
NO_ARBITRARY_KEYS = (
    "a committed version's keys are its datasets' zarr.json and mapped chunks; "
    "arbitrary bytes cannot be placed at arbitrary keys (that would be a new commit, "
    "i.e. another version), so this kit test is run below on the version's real keys"
)


def make_file(path) -> None:
    """Two versions: ``v1`` (the store's) and ``v2`` (current, editing one chunk of ``a``).

    ``a`` is deflate-compressed (10, 7) float64 in (4, 3) chunks with one chunk
    entirely fill value (unmapped: no key), edge chunks on both axes; ``u`` is
    an unfiltered big-endian int16; ``grp/b`` a deflate uint8 in a subgroup.
    """
    a = np.arange(70.0).reshape(10, 7) + 1
    a[4:8, 3:6] = 0.0  # chunk (1, 1): all fill value, never stored
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("a", data=a, chunks=(4, 3), compression="gzip", fillvalue=0.0)
            g.create_dataset("u", data=(np.arange(9) - 4).astype(">i2"), chunks=(4,))
            g.create_group("grp").create_dataset("b", data=np.arange(5, dtype="u1"), chunks=(5,), compression="gzip")
            g["a"].attrs["units"] = "K"
        with vf.stage_version("v2") as g:
            g["a"][0, 0] = -1.0


def _mappings(vds) -> dict[tuple[int, ...], tuple[str, tuple[int, ...]]]:
    """Chunk index -> (raw_data path, chunk offset in raw_data), from the virtual dataset's sources."""
    chunks = vds.attrs["chunks"] if vds.chunks is None else vds.chunks
    out = {}
    for m in vds.virtual_sources():
        (vstart, vend), (sstart, _) = m.vspace.get_select_bounds(), m.src_space.get_select_bounds()
        for index in np.ndindex(*(-(-(e + 1 - s) // c) for s, e, c in zip(vstart, vend, chunks))):
            start = tuple(s + i * c for s, i, c in zip(vstart, index, chunks))
            out[tuple(p // c for p, c in zip(start, chunks))] = (
                m.dset_name,
                tuple(ss + (p - s) for ss, p, s in zip(sstart, start, vstart)),
            )
    return out


def raw_chunk(path, version: str, key: str) -> bytes | None:
    """The stored bytes of a chunk key, read with h5py's ``read_direct_chunk`` (not the store)."""
    name, _, index = key.partition("/c/")
    with h5py.File(path, "r") as f:
        vds = f[f"{VERSIONS}/{version}/{name}"]
        found = _mappings(vds).get(tuple(int(i) for i in index.split("/")))
        if found is None:
            return None
        mask, data = f[found[0]].id.read_direct_chunk(found[1])
        assert mask == 0
        return bytes(data)


def expected_keys(path, version: str) -> set[str]:
    """Every key the version should list: a ``zarr.json`` per node and each mapped chunk."""
    keys = {"zarr.json"}
    with h5py.File(path, "r") as f:
        root = f[f"{VERSIONS}/{version}"]

        def visit(name, obj):
            keys.add(f"{name}/zarr.json")
            if isinstance(obj, h5py.Dataset):
                keys.update(f"{name}/c/" + "/".join(map(str, i)) for i in _mappings(obj))

        root.visititems(visit)
    return keys


def _bytes(buf) -> bytes | None:
    return None if buf is None else buf.to_bytes()


class TestVersionStoreKit(StoreTests[VersionStore, Buffer]):
    store_cls = VersionStore
    buffer_cls = Buffer
    VERSION = "v1"  # the version the store presents (resolved)

    # -- fixtures and the kit's helpers --------------------------------------------------------
    @pytest.fixture
    def store_kwargs(self, tmp_path) -> dict:
        path = tmp_path / "kit.h5"
        make_file(path)
        return {"path": str(path), "version": "v1", "numcodecs": True}

    @pytest.fixture
    def store(self, open_kwargs) -> VersionStore:  # the kit's fixture is async (pytest-asyncio)
        return sync(self.store_cls.open(**open_kwargs))

    @pytest.fixture
    def store_not_open(self, store_kwargs) -> VersionStore:
        return self.store_cls(**store_kwargs)

    async def set(self, store, key, value) -> None:
        pytest.skip(NO_ARBITRARY_KEYS)

    async def get(self, store, key) -> Buffer:
        data = raw_chunk(store.path, store.version, key) if "/c/" in key else None
        if data is None:
            pytest.skip(f"{key!r}: no independent oracle for it ({NO_ARBITRARY_KEYS})")
        return self.buffer_cls.from_bytes(data)

    # -- what the store is ---------------------------------------------------------------------
    def test_store_repr(self, store) -> None:
        assert repr(store) == f"VersionStore({store.path!r}, version={self.VERSION!r})"

    def test_store_supports_writes(self, store) -> None:
        assert not store.supports_writes and not store.supports_deletes

    def test_store_supports_listing(self, store) -> None:
        assert store.supports_listing

    def test_store_read_only(self, store) -> None:  # the kit expects a writable store
        assert store.read_only
        with pytest.raises(AttributeError):
            store.read_only = False

    @pytest.mark.parametrize("read_only", [True, False])
    def test_store_open_read_only(self, open_kwargs, read_only) -> None:
        sync(super().test_store_open_read_only(open_kwargs, read_only))

    def test_store_context_manager(self, open_kwargs) -> None:
        sync(super().test_store_context_manager(open_kwargs))

    def test_read_only_store_raises(self, open_kwargs) -> None:
        sync(super().test_read_only_store_raises(open_kwargs))

    def test_with_read_only_store(self, open_kwargs) -> None:
        """A writable copy (an overlay over the version) takes writes; this store still refuses them."""
        sync(super().test_with_read_only_store(open_kwargs))

    def test_with_read_only_true_reads_same(self, store) -> None:
        copy = store.with_read_only(read_only=True)
        assert copy == store and copy.read_only and not copy._is_open
        assert _bytes(sync(copy.get("a/c/0/0", PROTO))) == raw_chunk(store.path, self.VERSION, "a/c/0/0")

    def test_serializable_store(self, store) -> None:
        copy = pickle.loads(pickle.dumps(store))
        assert copy == store and copy.read_only == store.read_only
        assert _bytes(sync(copy.get("u/c/1", PROTO))) == raw_chunk(store.path, self.VERSION, "u/c/1")

    # -- get -----------------------------------------------------------------------------------
    @pytest.mark.parametrize("key", ["a/c/0/0", "a/c/2/2", "a/c/1/2", "u/c/2", "grp/b/c/0"])
    @pytest.mark.parametrize(
        "byte_range",
        [
            None,
            RangeByteRequest(1, 4),
            RangeByteRequest(3, 10**6),
            OffsetByteRequest(1),
            SuffixByteRequest(1),
            SuffixByteRequest(10**6),
            RangeByteRequest(2, 2),
        ],
    )
    def test_get(self, store, key, byte_range) -> None:
        data = raw_chunk(store.path, self.VERSION, key)
        assert data
        if byte_range is None:
            expected = data
        elif isinstance(byte_range, RangeByteRequest):
            expected = data[byte_range.start : byte_range.end]
        elif isinstance(byte_range, OffsetByteRequest):
            expected = data[byte_range.offset :]
        else:
            expected = data[max(len(data) - byte_range.suffix, 0) :]
        assert _bytes(sync(store.get(key, PROTO, byte_range=byte_range))) == expected

    def test_get_document_byte_ranges(self, store) -> None:
        whole = _bytes(sync(store.get("a/zarr.json", PROTO)))
        meta = json.loads(whole)
        assert meta["shape"] == [10, 7] and meta["chunk_grid"]["configuration"]["chunk_shape"] == [4, 3]
        assert meta["attributes"] == {"units": "K"}
        assert _bytes(sync(store.get("a/zarr.json", PROTO, RangeByteRequest(5, 25)))) == whole[5:25]
        assert _bytes(sync(store.get("a/zarr.json", PROTO, SuffixByteRequest(7)))) == whole[-7:]

    @pytest.mark.parametrize(
        "key",
        [
            "a/c/1/1",
            "a/c/3/0",
            "a/c/0",
            "a/c/0/0/0",
            "nope/zarr.json",
            "a",
            "a/c",
            "grp/zarr.jso",
            "u/c/-1",
            "c/0",
            "foo/0/0",
        ],
    )
    def test_get_missing(self, store, key) -> None:
        """Unmapped chunks, chunks off the grid, wrong ranks and non-keys read as None."""
        assert sync(store.get(key, PROTO)) is None
        assert not sync(store.exists(key))

    @pytest.mark.parametrize("key", ["u/c/01", "grp/b/c/00", "u/c/\u0661"])
    def test_non_canonical_chunk_keys_are_absent(self, store, key) -> None:
        assert key not in sync(_collect_aiterator(store.list()))
        assert not sync(store.exists(key)) and sync(store.get(key, PROTO)) is None

    def test_get_not_open(self, store_not_open) -> None:
        assert not store_not_open._is_open
        got = sync(store_not_open.get("grp/b/c/0", PROTO))
        assert _bytes(got) == raw_chunk(store_not_open.path, self.VERSION, "grp/b/c/0")

    def test_get_raises(self, store) -> None:
        with pytest.raises((ValueError, TypeError), match=r"Unexpected byte_range, got.*"):
            sync(store.get("u/c/0", PROTO, byte_range=(0, 2)))

    def test_get_raises_type(self, store) -> None:
        """A byte range of another type is refused (whatever the message's case)."""
        with pytest.raises(TypeError, match="(?i)unexpected byte_range, got"):
            sync(store.get("u/c/0", PROTO, byte_range=(0, 2)))

    def test_get_many(self, store) -> None:
        keys = sorted(expected_keys(store.path, self.VERSION))
        got = sync(_collect_aiterator(store._get_many((k, PROTO, None) for k in keys)))
        got = {k: _bytes(b) for k, b in got}
        assert sorted(got) == keys
        for key in keys:
            if "/c/" in key:
                assert got[key] == raw_chunk(store.path, self.VERSION, key)
            else:
                assert json.loads(got[key])["zarr_format"] == 3

    def test_get_partial_values(self, store) -> None:
        requests = [
            ("a/c/0/1", RangeByteRequest(0, 2)),
            ("zarr.json", None),
            ("u/c/0", SuffixByteRequest(2)),
            ("grp/b/c/0", OffsetByteRequest(2)),
            ("a/c/1/1", None),
        ]
        got = sync(store.get_partial_values(PROTO, requests))
        assert _bytes(got[0]) == raw_chunk(store.path, self.VERSION, "a/c/0/1")[:2]
        assert json.loads(_bytes(got[1]))["node_type"] == "group"
        assert _bytes(got[2]) == raw_chunk(store.path, self.VERSION, "u/c/0")[-2:]
        assert _bytes(got[3]) == raw_chunk(store.path, self.VERSION, "grp/b/c/0")[2:]
        assert got[4] is None  # unmapped

    def test_get_bytes(self, store) -> None:
        assert json.loads(sync(store._get_bytes("grp/zarr.json", prototype=PROTO)))["node_type"] == "group"
        with pytest.raises(FileNotFoundError):
            sync(store._get_bytes("nonexistent_key", prototype=PROTO))

    def test_get_bytes_sync(self, store) -> None:
        assert store._get_bytes_sync("u/c/1", prototype=PROTO) == raw_chunk(store.path, self.VERSION, "u/c/1")

    def test_get_json(self, store) -> None:
        meta = sync(store._get_json("zarr.json", prototype=PROTO))
        inline = meta["consolidated_metadata"]["metadata"]
        assert sorted(inline) == ["a", "grp", "grp/b", "u"]
        assert inline["u"]["data_type"] == "int16" and inline["u"]["codecs"][0]["configuration"] == {"endian": "big"}
        assert [c["name"] for c in inline["a"]["codecs"]] == ["bytes", "numcodecs.zlib"]

    def test_get_json_sync(self, store) -> None:
        assert store._get_json_sync("u/zarr.json", prototype=PROTO)["shape"] == [9]

    # -- sizes, existence, listing ------------------------------------------------------------
    @pytest.mark.parametrize("key", ["a/c/0/0", "a/c/2/2", "u/c/2", "grp/b/c/0"])
    def test_getsize(self, store, key) -> None:
        assert sync(store.getsize(key)) == len(raw_chunk(store.path, self.VERSION, key))

    def test_getsize_prefix(self, store) -> None:
        keys = [k for k in expected_keys(store.path, self.VERSION) if k.startswith("a/c/")]
        expected = sum(len(raw_chunk(store.path, self.VERSION, k)) for k in keys)
        expected += len(_bytes(sync(store.get("a/zarr.json", PROTO))))
        assert sync(store.getsize_prefix("a")) == expected

    def test_getsize_raises(self, store) -> None:
        sync(super().test_getsize_raises(store))

    def test_exists(self, store) -> None:
        for key in expected_keys(store.path, self.VERSION):
            assert sync(store.exists(key)), key
        assert not sync(store.exists("foo"))
        assert not sync(store.exists("a/c/1/1"))  # all fill value in v1: not stored

    def test_is_empty(self, store) -> None:
        assert not sync(store.is_empty(""))
        assert not sync(store.is_empty("grp"))
        assert not sync(store.is_empty("grp/"))
        assert sync(store.is_empty("gr"))  # a prefix of a name is not a directory
        assert sync(store.is_empty("spam/"))

    def test_list(self, store) -> None:
        observed = sync(_collect_aiterator(store.list()))
        assert len(observed) == len(set(observed))
        assert set(observed) == expected_keys(store.path, self.VERSION)
        assert "a/c/1/1" not in observed

    @pytest.mark.parametrize("prefix", ["", "a/", "a/c/", "a/c/2/", "grp/", "grp/b/", "u/c/1", "zzz/"])
    def test_list_prefix(self, store, prefix) -> None:
        observed = sorted(sync(_collect_aiterator(store.list_prefix(prefix))))
        assert observed == sorted(k for k in expected_keys(store.path, self.VERSION) if k.startswith(prefix))

    def test_list_empty_path(self, store) -> None:
        assert sorted(sync(_collect_aiterator(store.list()))) == sorted(sync(_collect_aiterator(store.list_prefix(""))))

    @pytest.mark.parametrize(
        ("prefix", "expected"),
        [
            ("", {"zarr.json", "a", "u", "grp"}),
            ("a", {"zarr.json", "c"}),
            ("a/c", {"0", "1", "2"}),
            ("a/c/1", {"0", "2"}),
            ("grp", {"zarr.json", "b"}),
            ("grp/b/c", {"0"}),
            ("spam", frozenset()),
        ],
    )
    def test_list_dir(self, store, prefix, expected) -> None:
        for p in {prefix, prefix + "/"}:
            observed = sync(_collect_aiterator(store.list_dir(p)))
            assert len(observed) == len(set(observed)) and set(observed) == expected

    # -- writing: refused ----------------------------------------------------------------------
    def test_set(self, store) -> None:
        pytest.skip("needs a writable store: the refusal is test_read_only_store_raises")

    def test_set_not_open(self, store_not_open) -> None:
        pytest.skip("needs a writable store: the refusal is test_set_refused_not_open")

    def test_set_refused_not_open(self, store_not_open) -> None:
        with pytest.raises(ValueError, match="read-only mode"):
            sync(store_not_open.set("u/c/0", Buffer.from_bytes(b"\x01\x02")))
        assert _bytes(sync(store_not_open.get("u/c/0", PROTO))) == raw_chunk(store_not_open.path, self.VERSION, "u/c/0")

    def test_set_many(self, store) -> None:
        with pytest.raises(ValueError, match="read-only mode"):
            sync(store._set_many([("zarr.json", Buffer.from_bytes(b"{}")), ("u/c/0", Buffer.from_bytes(b""))]))
        assert json.loads(_bytes(sync(store.get("zarr.json", PROTO))))["node_type"] == "group"

    def test_set_if_not_exists(self, store) -> None:
        sync(store.set_if_not_exists("u/c/0", Buffer.from_bytes(b"1111")))  # exists: nothing to write
        assert _bytes(sync(store.get("u/c/0", PROTO))) == raw_chunk(store.path, self.VERSION, "u/c/0")
        with pytest.raises(ValueError, match="read-only mode"):
            sync(store.set_if_not_exists("k2", Buffer.from_bytes(b"1111")))
        assert sync(store.get("k2", PROTO)) is None

    def test_clear(self, store) -> None:
        with pytest.raises(NotImplementedError):  # zarr's Store.clear without supports_deletes
            sync(store.clear())
        assert set(sync(_collect_aiterator(store.list()))) == expected_keys(store.path, self.VERSION)

    def test_delete(self, store) -> None:
        pytest.skip(
            "supports_deletes is False: a committed version never changes (the refusal is test_read_only_store_raises)"
        )

    def test_delete_dir(self, store) -> None:
        pytest.skip("supports_deletes is False: a committed version never changes")

    def test_delete_nonexistent_key_does_not_raise(self, store) -> None:
        pytest.skip("supports_deletes is False: delete() of any key refuses, as zarr's read-only stores")

    def test_list_dir_after_set(self, store) -> None:
        """The kit's test_list_dir writes first; the listing of the real version is test_list_dir."""
        assert sync(_collect_aiterator(store.list_dir("a/c/1/0"))) == ()


class TestCurrentVersionStoreKit(TestVersionStoreKit):
    """The same with ``version=None``: the current version (``v2``), resolved when the store opens."""

    VERSION = "v2"

    @pytest.fixture
    def store_kwargs(self, tmp_path) -> dict:
        path = tmp_path / "kit.h5"
        make_file(path)
        return {"path": str(path), "numcodecs": True}

    def test_store_eq(self, store, store_kwargs) -> None:
        super().test_store_eq(store, store_kwargs)
