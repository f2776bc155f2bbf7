"""Chunk hashing, fill-chunk detection and chunk-shape choice against versioned-hdf5 2.6.0.

Two libraries writing the same file must agree on the SHA-256 of every chunk, or
deduplication silently stops across them (``docs/format.md``, "Chunk hash"). The references
are versioned-hdf5's legacy ``Hashtable.hash`` (built on a real file) and
``versioned_hdf5.hash.hash_slab``, the hasher its 2.6 commits actually use.
"""

from __future__ import annotations

import hashlib
import struct

import h5py
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from h5py._hl.filters import guess_chunk
from hypothesis import given, settings
from hypothesis import strategies as st
from versioned_hdf5.hash import hash_slab
from versioned_hdf5.hashtable import Hashtable

from xarray_vhdf5._backend import chunk_hash, guess_chunks_h5py, is_fill_chunk, normalize_chunks
from xarray_vhdf5._backend.layout import DEFAULT_CHUNKS_1D
from xarray_vhdf5.errors import IncompatibleDataError, UnsupportedError

StringDType = np.dtypes.StringDType


@pytest.fixture(scope="module")
def legacy_table(tmp_path_factory):
    """versioned-hdf5's ``Hashtable`` of a dataset in a real (otherwise empty) file."""
    path = tmp_path_factory.mktemp("hashing") / "legacy.h5"
    with h5py.File(path, "w") as f:
        f.create_group("_version_data/x")
        yield Hashtable(f, "x")


def slab_hash(chunk: np.ndarray, padded_shape: tuple[int, ...] | None = None) -> bytes:
    """Digest by versioned-hdf5's commit hasher, the chunk lying in a (padded) slab."""
    chunk_size = padded_shape or chunk.shape
    if chunk.dtype.kind == "O":
        src = np.full(chunk_size, b"", dtype=object)
    elif chunk.dtype.kind == "T":
        src = np.full(chunk_size, "", dtype=chunk.dtype)
    else:
        src = np.zeros(chunk_size, dtype=chunk.dtype)
    src[tuple(slice(0, n) for n in chunk.shape)] = chunk
    out = np.zeros((1, 4), np.uint64)
    hash_slab(
        src,
        out,
        np.array([0], np.uint64),
        np.array([0], np.uint64),
        np.array([chunk.shape], np.uint64),
        tuple(chunk_size),
    )
    return out.tobytes()


def independent_hash(chunk: np.ndarray) -> bytes:
    """The data_version 4 rule, written out from ``docs/format.md``."""
    h = hashlib.sha256()
    if chunk.dtype.kind in "OT":
        for value in chunk.astype(object).flat:
            raw = value.encode("utf-8") if isinstance(value, str) else value
            h.update(struct.pack("<Q", len(raw)) + raw)
    else:
        h.update(np.ascontiguousarray(chunk).tobytes())
    h.update(str(chunk.shape).encode("ascii"))
    return h.digest()


def assert_same_hash(legacy_table, chunk: np.ndarray) -> bytes:
    ours = chunk_hash(chunk)
    assert len(ours) == 32
    assert ours == legacy_table.hash(chunk)
    assert ours == slab_hash(chunk)
    assert ours == independent_hash(chunk)
    return ours


NUMERIC_DTYPES = [
    "i1",
    "i2",
    "i4",
    "i8",
    "u1",
    "u2",
    "u4",
    "u8",
    "f2",
    "f4",
    "f8",
    "c8",
    "c16",
    ">i4",
    ">f8",
    "?",
]


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_numeric_and_bool(legacy_table, dtype, shape):
    rng = np.random.default_rng(0)
    chunk = (rng.integers(0, 100, size=shape) % (2 if dtype == "?" else 100)).astype(dtype)
    assert_same_hash(legacy_table, chunk)


@pytest.mark.parametrize("dtype", ["S1", "S5", "S16"])
def test_fixed_bytes(legacy_table, dtype):
    chunk = np.array([[b"", b"a"], [b"abcde", b"xyz"]], dtype=dtype)
    assert_same_hash(legacy_table, chunk)


def test_compound_dtype(legacy_table):
    chunk = np.zeros(4, dtype=[("a", "<i4"), ("b", "<f8")])
    chunk["a"] = [1, 2, 3, 4]
    chunk["b"] = [0.5, -1, np.inf, np.nan]
    assert_same_hash(legacy_table, chunk)


def test_shape_is_part_of_the_digest(legacy_table):
    data = np.arange(12, dtype="i4")
    shapes = [(12,), (3, 4), (4, 3), (2, 6)]
    digests = {assert_same_hash(legacy_table, data.reshape(shape)) for shape in shapes}
    assert len(digests) == 4
    assert chunk_hash(data) != hashlib.sha256(data.tobytes()).digest()


def test_edge_trimmed_chunk(legacy_table):
    """An edge chunk is hashed trimmed, exactly as versioned-hdf5 hashes it inside its padded slab."""
    data = np.arange(10 * 7, dtype="f8").reshape(10, 7)
    edge = data[8:10, 4:7]  # a (2, 3) edge chunk of chunk shape (4, 4)
    assert not edge.flags.c_contiguous
    ours = assert_same_hash(legacy_table, edge)
    assert ours == slab_hash(edge, padded_shape=(4, 4))
    assert ours == chunk_hash(np.ascontiguousarray(edge))
    assert ours != chunk_hash(np.pad(edge, ((0, 2), (0, 1))))


def test_non_contiguous_views_hash_their_values(legacy_table):
    base = np.arange(40, dtype="i8").reshape(5, 8)
    view = base[::2, 1::3]
    assert chunk_hash(view) == chunk_hash(view.copy())
    assert_same_hash(legacy_table, view)
    assert chunk_hash(base.T) == legacy_table.hash(base.T)


@pytest.mark.parametrize(
    "values",
    [
        ["a", "bb", "", "ccc"],
        ["é", "日本語", "\x00", "a" * 300],
        [b"a", b"bb", b"", b"\xff\x00"],
    ],
)
def test_object_strings(legacy_table, values):
    chunk = np.array(values, dtype=object)
    assert_same_hash(legacy_table, chunk)
    assert_same_hash(legacy_table, chunk.reshape(2, 2))


def test_str_and_bytes_elements_hash_alike():
    """An object array of str hashes as the same array of UTF-8 bytes (what h5py reads back)."""
    text = ["x", "é", "ab"]
    assert chunk_hash(np.array(text, dtype=object)) == chunk_hash(np.array([t.encode() for t in text], dtype=object))


def test_no_concatenation_collisions():
    """Lengths are hashed, so ["ab", "c"] and ["a", "bc"] differ (data_version 3's bug)."""
    assert chunk_hash(np.array(["ab", "c"], dtype=object)) != chunk_hash(np.array(["a", "bc"], dtype=object))


def test_string_dtype(legacy_table):
    values = ["a", "bb", "", "a much longer string than sixteen bytes", "é"]
    chunk = np.array(values, dtype=StringDType())
    ours = assert_same_hash(legacy_table, chunk)
    assert ours == chunk_hash(np.array(values, dtype=object))


def test_object_array_of_other_objects_is_refused():
    with pytest.raises(TypeError, match="str or bytes"):
        chunk_hash(np.array([1, 2], dtype=object))


@settings(max_examples=60, deadline=None)
@given(
    chunk=hnp.arrays(
        dtype=st.one_of(
            hnp.integer_dtypes(endianness="="),
            hnp.unsigned_integer_dtypes(endianness="="),
            hnp.floating_dtypes(endianness="="),
            hnp.complex_number_dtypes(endianness="="),
            hnp.boolean_dtypes(),
            hnp.byte_string_dtypes(max_len=8),
        ),
        shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6),
    )
)
def test_property_fixed_size(legacy_table, chunk):
    assert_same_hash(legacy_table, chunk)


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.one_of(st.text(max_size=20), st.binary(max_size=20)), min_size=1, max_size=12),
    as_string_dtype=st.booleans(),
)
def test_property_strings(legacy_table, values, as_string_dtype):
    if as_string_dtype:
        values = [v.decode("latin-1") if isinstance(v, bytes) else v for v in values]
        chunk = np.array(values, dtype=StringDType())
    else:
        chunk = np.empty(len(values), dtype=object)
        chunk[:] = values
    assert_same_hash(legacy_table, chunk)


# -- is_fill_chunk -------------------------------------------------------------


def test_fill_chunk_basic():
    assert is_fill_chunk(np.zeros((3, 4)), 0.0)
    assert is_fill_chunk(np.full(5, 7, "i4"), 7)
    assert not is_fill_chunk(np.array([7, 7, 8], "i4"), 7)
    assert is_fill_chunk(np.ones(3, bool), True)
    assert not is_fill_chunk(np.ones(3, bool), False)


def test_fill_chunk_nan_equals_nan():
    assert is_fill_chunk(np.full((2, 2), np.nan), np.nan)
    assert is_fill_chunk(np.full(3, np.nan, "f4"), np.float32("nan"))
    assert not is_fill_chunk(np.array([np.nan, 1.0]), np.nan)
    assert not is_fill_chunk(np.full(3, np.nan), 0.0)
    assert is_fill_chunk(np.full(2, complex(np.nan, np.nan)), complex(np.nan, np.nan))


def test_fill_chunk_is_bitwise():
    """-0.0 is not 0.0, and a NaN of another sign is not the fill NaN: storing them keeps the bits.

    versioned-hdf5 2.6 decides the same way (checked end to end in test_format).
    """
    assert not is_fill_chunk(np.full(3, -0.0), 0.0)
    assert not is_fill_chunk(np.full(3, 0.0), -0.0)
    assert is_fill_chunk(np.full(3, -0.0), -0.0)
    assert not is_fill_chunk(-np.full(3, np.nan), np.nan)
    assert not is_fill_chunk(np.full(2, complex(0, -0.0)), 0j)


def test_fill_chunk_other_kinds():
    rec = np.zeros(3, dtype=[("a", "i4"), ("b", "f8")])
    assert is_fill_chunk(rec, np.zeros((), rec.dtype)[()])
    rec["a"][1] = 1
    assert not is_fill_chunk(rec, np.zeros((), rec.dtype)[()])
    assert is_fill_chunk(np.array([b"", b""], "S3"), b"")
    assert not is_fill_chunk(np.array([b"", b"a"], "S3"), b"")
    assert is_fill_chunk(np.full(2, b"ab", "S3"), b"ab")


def test_fill_chunk_strings_are_empty_strings_and_no_fill_is_never():
    # versioned-hdf5 2.6 does not store chunks of only empty vlen strings.
    assert is_fill_chunk(np.array([b"", ""], dtype=object), None)
    assert is_fill_chunk(np.array(["", ""], dtype=StringDType()), None)
    assert not is_fill_chunk(np.array([b"", b"a"], dtype=object), None)
    assert not is_fill_chunk(np.array(["", "a"], dtype=StringDType()), None)
    assert not is_fill_chunk(np.array([], dtype=object), None)
    assert not is_fill_chunk(np.zeros(3), None)


def test_fill_chunk_on_strided_view():
    base = np.zeros((6, 6))
    base[::2, ::2] = 1
    assert is_fill_chunk(base[1::2, :], 0.0)
    assert not is_fill_chunk(base[:, ::2], 0.0)


# -- chunk shapes --------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,itemsize",
    [
        ((10,), 8),
        ((10000,), 8),
        ((10**7,), 1),
        ((100, 100), 8),
        ((1000, 1000), 4),
        ((0,), 8),
        ((0, 10), 4),
        ((3, 4, 5), 2),
        ((1,), 10**7),
        ((500, 3, 7, 11), 16),
    ],
)
def test_guess_chunks_matches_h5py(shape, itemsize):
    assert guess_chunks_h5py(shape, itemsize) == guess_chunk(shape, None, itemsize)


@settings(max_examples=80, deadline=None)
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5000),
    itemsize=st.sampled_from([1, 2, 4, 8, 16, 24, 1000]),
)
def test_property_guess_chunks_matches_h5py(shape, itemsize):
    assert guess_chunks_h5py(shape, itemsize) == guess_chunk(shape, None, itemsize)


def test_normalize_chunks_defaults():
    assert normalize_chunks(None, (10,), np.dtype("f8")) == DEFAULT_CHUNKS_1D == (4096,)
    assert normalize_chunks(True, (10,), np.dtype("f8")) == (4096,)
    # versioned-hdf5 2.6 refuses n-d data without chunks; we guess like h5py instead.
    assert normalize_chunks(None, (300, 400), np.dtype("f8")) == guess_chunk((300, 400), None, 8)
    assert normalize_chunks(5, (10,), np.dtype("f8")) == (5,)
    assert normalize_chunks(np.int64(5), (10,), np.dtype("f8")) == (5,)
    assert normalize_chunks([2, 3], (10, 10), np.dtype("f8")) == (2, 3)
    # chunks larger than the data are allowed, as in HDF5
    assert normalize_chunks((100,), (10,), np.dtype("f8")) == (100,)


@pytest.mark.parametrize(
    "chunks,shape,error,match",
    [
        ((4,), (), UnsupportedError, "Scalar"),
        (None, (), UnsupportedError, "Scalar"),
        (False, (10,), UnsupportedError, "chunked"),
        ((4, 4), (10,), IncompatibleDataError, "axes"),
        ((4,), (10, 10), IncompatibleDataError, "axes"),
        ((0,), (10,), IncompatibleDataError, "positive"),
        ((4, -1), (10, 10), IncompatibleDataError, "positive"),
    ],
)
def test_normalize_chunks_errors(chunks, shape, error, match):
    with pytest.raises(error, match=match):
        normalize_chunks(chunks, shape, np.dtype("f8"))


def test_normalize_chunks_error_classes():
    """The errors are also the builtins h5py users catch."""
    with pytest.raises(NotImplementedError):
        normalize_chunks(None, (), np.dtype("f8"))
    with pytest.raises(ValueError):
        normalize_chunks((0,), (10,), np.dtype("f8"))
