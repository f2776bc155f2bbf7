"""The compiled chunk reader (``_ext/preadtools.pyx``) against numpy and its pure-Python twin.

- ``read_chunks_into`` puts each box of each stored chunk where it belongs in
  the result, for random shapes, dtypes, boxes and gaps between the chunks in
  the file; with more rows than one ``preadv`` takes, gaps larger than its
  scratch buffer, and a file that ends inside a chunk;
- ``ChunkManifest.read`` gives the same bytes with the compiled kernel and
  with its pure-Python twin (``_read_unfiltered_reference``), and libhdf5's.
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xarray_vhdf5 import VersionedHDF5File, open_file
from xarray_vhdf5._backend._kernels import preadtools
from xarray_vhdf5._backend.manifest_resolve import resolve_manifest
from xarray_vhdf5._backend.transfer import kernel_backend

pytestmark = pytest.mark.skipif(preadtools is None, reason="the compiled kernels are not built")

DTYPES = [np.dtype("i1"), np.dtype("<f4"), np.dtype(">f8"), np.dtype([("a", "<i2"), ("b", "<f8")])]


def _write_chunks(path, chunks_data: list[np.ndarray], gaps: list[int]) -> np.ndarray:
    """Write each chunk's bytes after its gap; return their offsets (uint64)."""
    offsets = []
    with open(path, "wb") as fh:
        for chunk, gap in zip(chunks_data, gaps, strict=True):
            fh.write(b"\xa5" * gap)
            offsets.append(fh.tell())
            fh.write(np.ascontiguousarray(chunk).tobytes())
    return np.array(offsets, np.uint64)


@st.composite
def problems(draw):
    ndim = draw(st.integers(1, 4))
    chunks = tuple(draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim)))
    n = draw(st.integers(1, 6))
    dtype = draw(st.sampled_from(DTYPES))
    boxes = []
    for _ in range(n):
        start = [draw(st.integers(0, c - 1)) for c in chunks]
        count = [draw(st.integers(1, c - s)) for c, s in zip(chunks, start)]
        boxes.append((start, count))
    gaps = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    return chunks, dtype, boxes, gaps


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problem=problems(), seed=st.integers(0, 2**16))
def test_read_chunks_into_equals_numpy(tmp_path, problem, seed):
    """Box k of chunk k lands at the same place in block k of the result (blocks stacked on axis 0)."""
    chunks, dtype, boxes, gaps = problem
    rng = np.random.default_rng(seed)
    data = [np.frombuffer(rng.bytes(int(np.prod(chunks)) * dtype.itemsize), dtype).reshape(chunks) for _ in boxes]
    path = tmp_path / f"chunks{seed}.bin"
    offsets = _write_chunks(path, data, gaps)
    n = len(boxes)
    out = np.zeros((n * chunks[0], *chunks[1:]), dtype)
    expected = out.copy()
    in_start = np.array([s for s, _ in boxes], np.intp)
    counts = np.array([c for _, c in boxes], np.intp)
    out_start = in_start.copy()
    out_start[:, 0] += np.arange(n) * chunks[0]
    for k, (start, count) in enumerate(boxes):
        box = tuple(slice(s, s + c) for s, c in zip(start, count))
        placed = (slice(k * chunks[0] + start[0], k * chunks[0] + start[0] + count[0]), *box[1:])
        expected[placed] = data[k][box]
    fd = os.open(path, os.O_RDONLY)
    try:
        assert preadtools.read_chunks_into(fd, out, chunks, offsets, in_start, out_start, counts) == -1
    finally:
        os.close(fd)
    assert out.tobytes() == expected.tobytes()


def _one_chunk_case(tmp_path, chunks, start, count) -> None:
    data = np.arange(np.prod(chunks), dtype="<f8").reshape(chunks)
    path = tmp_path / "big.bin"
    offsets = _write_chunks(path, [data], [123])
    out = np.full(chunks, -1.0)
    expected = out.copy()
    box = tuple(slice(s, s + c) for s, c in zip(start, count))
    expected[box] = data[box]
    fd = os.open(path, os.O_RDONLY)
    try:
        arrays = [np.array([v], np.intp) for v in (start, start, count)]
        assert preadtools.read_chunks_into(fd, out, chunks, offsets, *arrays) == -1
    finally:
        os.close(fd)
    np.testing.assert_array_equal(out, expected)


def test_more_rows_than_one_preadv_takes(tmp_path):
    """3000 rows of 2 points, one column selected: 6000 vectors, several preadv calls."""
    _one_chunk_case(tmp_path, (3000, 2), (10, 1), (2980, 1))


def test_gaps_larger_than_the_scratch_buffer(tmp_path):
    """A 2.9 MB chunk (the scratch holds 1 MiB), a small box in its middle."""
    _one_chunk_case(tmp_path, (600, 600), (300, 250), (2, 7))


def test_a_chunk_the_file_ends_inside_is_named(tmp_path):
    chunks = (4, 5)
    data = [np.ones(chunks, "<f4") * k for k in range(3)]
    path = tmp_path / "short.bin"
    offsets = _write_chunks(path, data, [0, 0, 0])
    os.truncate(path, int(offsets[2]) + 7)
    out = np.zeros((12, 5), "<f4")
    in_start = np.zeros((3, 2), np.intp)
    out_start = np.array([[0, 0], [4, 0], [8, 0]], np.intp)
    counts = np.tile(np.array([4, 5], np.intp), (3, 1))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert preadtools.read_chunks_into(fd, out, chunks, offsets, in_start, out_start, counts) == 2
    finally:
        os.close(fd)
    np.testing.assert_array_equal(out[:8], np.repeat([0.0, 1.0], 4)[:, None] * np.ones((8, 5)))


def test_bad_arguments_raise(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"\0" * 64)
    one = np.zeros((1, 2), np.intp)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="last axis contiguous"):
            preadtools.read_chunks_into(fd, np.zeros((4, 4))[:, ::2], (2, 2), np.zeros(1, np.uint64), one, one, one)
        with pytest.raises(ValueError, match="negative stride"):
            preadtools.read_chunks_into(fd, np.zeros((4, 4))[::-1], (2, 2), np.zeros(1, np.uint64), one, one, one)
        with pytest.raises(ValueError, match="axes"):
            preadtools.read_chunks_into(fd, np.zeros((4, 4)), (2,), np.zeros(1, np.uint64), one, one, one)
        with pytest.raises(ValueError, match="lengths"):
            preadtools.read_chunks_into(fd, np.zeros((4, 4)), (2, 2), np.zeros(2, np.uint64), one, one, one)
        with pytest.raises(OSError):
            preadtools.read_chunks_into(-1, np.zeros((4, 4)), (2, 2), np.zeros(1, np.uint64), one, one, one + 1)
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def unfiltered(tmp_path_factory):
    """A version of a (37, 23, 11) '>f8' dataset in (8, 5, 4) chunks, unfiltered, with unmapped chunks."""
    path = str(tmp_path_factory.mktemp("preadtools") / "u.h5")
    data = np.random.default_rng(3).standard_normal((37, 23, 11)).astype(">f8")
    with open_file(path) as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=data, chunks=(8, 5, 4), fillvalue=-7.0)
        with vf.stage_version("v2") as g:
            g["x"][:8, :5, :4] = -7.0  # a chunk of fill value: not stored, read as the fill value
            g["x"].resize((40, 23, 11))
    f = h5py.File(path, "r")
    yield f["_version_data/versions/v2/x"]
    f.close()


@st.composite
def keys(draw, shape):
    """One entry per axis: a slice (step 1 to 3), an int, or (on one axis at most) a sorted integer array."""
    key, array_axis = [], draw(st.integers(-1, len(shape) - 1))
    for axis, n in enumerate(shape):
        kind = "array" if axis == array_axis else draw(st.sampled_from(["slice", "step", "int"]))
        if kind == "int":
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "array":
            key.append(np.array(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=5))), np.intp))
        else:
            a, b = sorted(draw(st.lists(st.integers(0, n), min_size=2, max_size=2)))
            key.append(slice(a, b, draw(st.integers(2, 3)) if kind == "step" else None))
    return tuple(key)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_compiled_and_python_reads_agree(unfiltered, data):
    manifest = resolve_manifest(unfiltered)
    assert manifest.filters == () and np.count_nonzero(manifest.slots < 0) > 0
    key = data.draw(keys(unfiltered.shape))
    with kernel_backend("python"):
        python = manifest.read(key, verify=False)
    with kernel_backend("cython"):
        compiled = manifest.read(key, verify=False)
    assert python.dtype == compiled.dtype == np.dtype(">f8")
    assert python.shape == compiled.shape and python.tobytes() == compiled.tobytes()
    np.testing.assert_array_equal(compiled, _outer(np.asarray(unfiltered[()]), key))


def _outer(full: np.ndarray, key: tuple) -> np.ndarray:
    """``full`` indexed axis by axis, as h5py does (an int drops its axis)."""
    index = [np.arange(n)[k] if not isinstance(k, int) else np.arange(n)[[k]] for k, n in zip(key, full.shape)]
    return full[np.ix_(*index)].reshape([len(i) for i, k in zip(index, key) if not isinstance(k, int)])
