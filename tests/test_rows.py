"""Whole-row transfers (backend.rows): the compiled kernel _ext/rowtools.pyx against h5py's calls."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from xarray_vhdf5._backend import rows
from xarray_vhdf5._backend.layout import HASH_TABLE_DTYPE
from xarray_vhdf5._backend.rows import read_rows, write_rows
from xarray_vhdf5._backend.transfer import kernel_backend
from xarray_vhdf5.errors import HDF5Error

try:
    from xarray_vhdf5._ext import rowtools as _rowtools
except ImportError:  # built without the kernels
    _rowtools = None
needs_kernel = pytest.mark.skipif(_rowtools is None, reason="compiled kernels not built")
#: The kernel paths: the compiled one is skipped when the kernels are not built.
PATHS = [pytest.param("cython", marks=needs_kernel), "python"]

CASES = {
    "f8_2d": (np.dtype("f8"), (7, 3)),
    "i2_3d": (np.dtype("<i2"), (5, 2, 4)),
    "bool": (np.dtype(bool), (9,)),
    "u1": (np.dtype("u1"), (33,)),
    "bytes": (np.dtype("S5"), (6,)),
    "c16": (np.dtype("c16"), (4, 2)),
    "hash_table": (HASH_TABLE_DTYPE, (8,)),
}


def _data(dtype: np.dtype, shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    out = raw.view(dtype).reshape(shape).copy()
    if dtype.kind == "f":
        out[~np.isfinite(out)] = 0
    if dtype.kind == "b":
        out = (raw[: out.size] % 2 == 1).reshape(shape)
    return out


@pytest.fixture
def f(tmp_path):
    with h5py.File(tmp_path / "rows.h5", "w") as f:
        yield f


@needs_kernel  # compares the two paths
@pytest.mark.parametrize("case", list(CASES))
def test_kernel_and_reference_write_and_read_the_same_points(f, case):
    dtype, shape = CASES[case]
    full = (shape[0] * 3, *shape[1:])
    data = _data(dtype, shape, 1)
    part = data[:2, ...][(slice(None), *(slice(0, max(1, n - 1)) for n in shape[1:]))].copy()
    stored = {}
    for path in ("cython", "python"):
        ds = f.create_dataset(path + case, shape=full, dtype=dtype, chunks=True, maxshape=(None, *shape[1:]))
        with kernel_backend(path):
            write_rows(ds.id, 1, data)
            write_rows(ds.id, shape[0] + 3, part)  # from the origin on the other axes
            got = read_rows(ds.id, 1, np.empty_like(data))
        np.testing.assert_array_equal(got, data)
        stored[path] = ds[...]
    np.testing.assert_array_equal(stored["cython"], stored["python"])
    expected = np.zeros(full, dtype=dtype)
    expected[1 : 1 + shape[0]] = data
    expected[(slice(shape[0] + 3, shape[0] + 5), *(slice(0, s) for s in part.shape[1:]))] = part
    np.testing.assert_array_equal(stored["cython"], expected)


@pytest.mark.parametrize("path", PATHS)
def test_rows_that_do_not_fit_raise_and_write_nothing(f, path):
    ds = f.create_dataset("d", shape=(6, 3), dtype="f8", chunks=(2, 3), maxshape=(None, 3))
    with kernel_backend(path):
        with pytest.raises(IndexError, match=r"rows 5 to 7 of shape \(2, 3\) in a dataset of shape \(6, 3\)"):
            write_rows(ds.id, 5, np.ones((2, 3)))
        with pytest.raises(IndexError, match="rows -1 to 0"):
            write_rows(ds.id, -1, np.ones((1, 3)))
        with pytest.raises(IndexError):
            write_rows(ds.id, 0, np.ones((1, 4)))  # wider than the dataset
        with pytest.raises(ValueError, match="rank differs"):
            write_rows(ds.id, 0, np.ones(3))
        with pytest.raises(TypeError, match="fixed-size"):
            write_rows(ds.id, 0, np.array([["a", "b", "c"]], dtype=object))
        with pytest.raises(ValueError, match="C-contiguous"):
            read_rows(ds.id, 0, np.empty((3, 2)).T)
        with pytest.raises(IndexError):
            read_rows(ds.id, 5, np.empty((2, 3)))
    assert not ds[...].any()


@pytest.mark.parametrize("path", PATHS)
def test_read_converts_to_the_buffer_dtype(f, path):
    ds = f.create_dataset("d", data=np.arange(10, dtype="<i2"))
    with kernel_backend(path):
        got = read_rows(ds.id, 2, np.empty(3, dtype=">f8"))
    np.testing.assert_array_equal(got, [2.0, 3.0, 4.0])


@needs_kernel
def test_the_compiled_path_makes_no_h5py_dataspace(f, monkeypatch):
    """With the kernel the transfer never builds h5py dataspaces (the reference path's cost)."""
    ds = f.create_dataset("d", shape=(4, 2), dtype="i8", chunks=(2, 2))

    def refuse(*args, **kwargs):
        raise AssertionError("h5py.h5s was called")

    monkeypatch.setattr(rows.h5s, "create_simple", refuse)
    with kernel_backend("cython"):
        write_rows(ds.id, 1, np.array([[5, 6]], dtype="i8"))
        np.testing.assert_array_equal(read_rows(ds.id, 1, np.empty((1, 2), dtype="i8")), [[5, 6]])
    monkeypatch.undo()
    np.testing.assert_array_equal(ds[1], [5, 6])


@pytest.mark.parametrize("path", PATHS)
def test_dataset_shape_is_h5py_s(f, path):
    for name, kwargs in {
        "nd": {"shape": (5, 0, 3)},
        "scalar": {"data": 1.5},
        "grown": {"shape": (2,), "maxshape": (None,)},
    }.items():
        ds = f.create_dataset(name, dtype="f8", **kwargs)
        if name == "grown":
            ds.resize((7,))
        with kernel_backend(path):
            assert rows.dataset_shape(ds.id) == ds.shape


@needs_kernel
def test_the_kernel_refuses_a_buffer_of_another_size_and_rows_past_the_end(f):
    """Its own memory: the buffer must hold exactly the rows asked for; a start near 2**64
    cannot wrap the extent check around."""
    from xarray_vhdf5._backend.h5objects import memory_type
    from xarray_vhdf5._ext import rowtools

    ds = f.create_dataset("k", shape=(4, 3), dtype="f8")
    mtype = memory_type(np.dtype("f8")).id
    with pytest.raises(ValueError, match="buffer of 8 bytes for 6 points of 8 bytes"):
        rowtools.write_rows(ds.id.id, 0, (2, 3), mtype, 8, np.ones(1).view(np.uint8))
    with pytest.raises(ValueError, match="buffer of 96 bytes for 6 points"):
        rowtools.read_rows(ds.id.id, 0, (2, 3), mtype, 8, np.empty((4, 3)).reshape(-1).view(np.uint8))
    assert (
        rowtools.write_rows(ds.id.id, 2**64 - 1, (1, 3), mtype, 8, np.ones(3).view(np.uint8)) == 2
    )  # beyond the extent: refused
    # The point size is checked against the memory type itself: 6 float32 points
    # (24 bytes) said to be 4-byte points of a float64 memory type would read 48 bytes.
    with pytest.raises(ValueError, match="points of 4 bytes for a memory type of 8 bytes"):
        rowtools.write_rows(ds.id.id, 0, (2, 3), mtype, 4, np.ones(6, dtype="f4").view(np.uint8))
    with pytest.raises(HDF5Error, match="H5Tget_size failed"):
        rowtools.read_rows(ds.id.id, 0, (2, 3), -1, 8, np.empty(6).view(np.uint8))
    with kernel_backend("cython"):
        with pytest.raises(IndexError, match="cannot write rows"):
            write_rows(ds.id, 2**64 - 1, np.ones((1, 3)))
    np.testing.assert_array_equal(ds[()], np.zeros((4, 3)))


@pytest.mark.parametrize("path", PATHS)
def test_a_write_libhdf5_refuses_raises_with_its_error_stack(tmp_path, path):
    """A row write to a file opened read-only: libhdf5's H5Dwrite fails; the compiled path
    raises HDF5Error quoting libhdf5's error stack, the reference path h5py's error."""
    with h5py.File(tmp_path / "ro.h5", "w") as f:
        f.create_dataset("k", data=np.zeros((4, 3)))
    with h5py.File(tmp_path / "ro.h5", "r") as f:
        ds = f["k"]
        with kernel_backend(path):
            expected = (
                (HDF5Error, r"H5Dwrite failed for rows 1 to 2 of shape \(1, 3\): H5Dwrite.*intent")
                if path == "cython"
                else (OSError, "intent")
            )
            with pytest.raises(expected[0], match=expected[1]):
                write_rows(ds.id, 1, np.ones((1, 3)))
        np.testing.assert_array_equal(ds[()], np.zeros((4, 3)))
