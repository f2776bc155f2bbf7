"""``read_many_slices``: compiled kernel == reference implementation == numpy indexing.

The oracle is plain numpy indexing of the source (an h5py source read whole
with ``dset[()]``), applied slice pair by slice pair.  Random slice sets (1-d to
4-d, steps > 1, zero counts, overlapping destinations) are drawn with
hypothesis for numpy sources (contiguous, non-contiguous and negative-stride
views, zero-stride broadcast fill views) and h5py sources (chunked,
gzip-compressed, virtual), over several dtypes.  Compiled runs are made with
the reference loop patched to fail, so a silent fallback cannot pass for the C
path.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from xarray_vhdf5._backend import transfer
from xarray_vhdf5._backend.transfer import (
    get_kernel_backend,
    kernel_backend,
    read_many_slices,
    read_many_slices_reference,
    set_kernel_backend,
)
from xarray_vhdf5._ext import slicetools
from xarray_vhdf5.errors import ClosedFileError, HDF5Error, UnsupportedError
from xarray_vhdf5.testing.strategies import data_for, rngs

DTYPES = [
    np.dtype("f8"),
    np.dtype("f4"),
    np.dtype("i2"),
    np.dtype("u1"),
    np.dtype(bool),
    np.dtype("S5"),
    np.dtype(">i4"),
    np.dtype([("a", "<i4"), ("b", "<f8"), ("c", "S3")]),
]
SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# ---------------------------------------------------------------------------
# Helpers and strategies
# ---------------------------------------------------------------------------


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Random data of any of DTYPES: every byte exercised (whole integer range, random letters)."""
    return data_for(rng, shape, dtype, full_range=True)


def shapes(ndim: int, max_side: int = 7) -> st.SearchStrategy[tuple[int, ...]]:
    return hnp.array_shapes(min_dims=ndim, max_dims=ndim, min_side=1, max_side=max_side)


@st.composite
def slice_sets(draw, src_shape: tuple[int, ...], dst_shape: tuple[int, ...], max_slices: int = 6):
    """(src_start, dst_start, count, src_stride, dst_stride), each (nslices, ndim) int64."""
    ndim = len(src_shape)
    nslices = draw(st.integers(0, max_slices))
    rows = []
    for _ in range(nslices):
        row = []
        for d in range(ndim):
            s_stride = draw(st.integers(1, 3))
            d_stride = draw(st.integers(1, 3))
            max_count = min((src_shape[d] - 1) // s_stride + 1, (dst_shape[d] - 1) // d_stride + 1)
            # 0 now and then: the pair is skipped entirely.
            n = draw(st.integers(0, max_count)) if draw(st.integers(0, 9)) == 0 else draw(st.integers(1, max_count))
            s0 = draw(st.integers(0, src_shape[d] - 1 - max(n - 1, 0) * s_stride))
            d0 = draw(st.integers(0, dst_shape[d] - 1 - max(n - 1, 0) * d_stride))
            row.append((s0, d0, n, s_stride, d_stride))
        rows.append(row)
    arr = np.array(rows, dtype=np.int64).reshape(nslices, ndim, 5)
    return tuple(np.ascontiguousarray(arr[:, :, k]) for k in range(5))


def oracle(src: np.ndarray, dst: np.ndarray, s0, d0, n, ss, ds) -> np.ndarray:
    """Numpy indexing, one slice pair at a time, on a copy of dst."""
    out = dst.copy()
    for i in range(len(n)):
        if (n[i] == 0).any():
            continue
        src_idx = tuple(slice(a, a + c * s, s) for a, c, s in zip(s0[i], n[i], ss[i]))
        dst_idx = tuple(slice(a, a + c * s, s) for a, c, s in zip(d0[i], n[i], ds[i]))
        out[dst_idx] = src[src_idx]
    return out


@pytest.fixture(autouse=True)
def _compiled_backend():
    """These tests compare the backends explicitly: start from the compiled one even when
    the suite runs with XARRAY_VHDF5_KERNELS=python."""
    with kernel_backend("cython"):
        yield


@pytest.fixture
def compiled_only(monkeypatch):
    """``read_many_slices`` that fails if it falls back to the reference loop."""

    def fail(*args, **kwargs):
        raise AssertionError("expected the compiled kernel, got the reference loop")

    def run(*args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(transfer, "_reference_loop", fail)
            read_many_slices(*args, **kwargs)

    return run


@pytest.fixture
def reference_calls(monkeypatch):
    """Count calls of the reference loop (still executing it)."""
    calls = []
    original = transfer._reference_loop

    def spy(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(transfer, "_reference_loop", spy)
    return calls


@pytest.fixture(scope="module")
def h5file(tmp_path_factory):
    """One file for the whole module; every example creates uniquely named datasets."""
    path = tmp_path_factory.mktemp("kernels") / "kernels.h5"
    with h5py.File(path, "w") as f:
        yield f


_names = itertools.count()


def make_h5_source(f: h5py.File, data: np.ndarray, kind: str, rng: np.random.Generator) -> h5py.Dataset:
    """A chunked, gzip-compressed or virtual dataset holding ``data``."""
    name = f"d{next(_names)}"
    chunks = tuple(int(rng.integers(1, n + 1)) for n in data.shape)
    if kind == "chunked":
        return f.create_dataset(name, data=data, chunks=chunks)
    if kind == "gzip":
        return f.create_dataset(name, data=data, chunks=chunks, compression="gzip", shuffle=True)
    assert kind == "virtual"
    # Two sources split along axis 0 (the second one chunked+gzip); rows the
    # split leaves unmapped read as the fill value (the default, zeros), so
    # write that into data.  (No explicit fillvalue=: h5py 3.16's
    # create_virtual_dataset stores garbage for fixed-length string fills.)
    fill = np.zeros((), data.dtype)
    cut = data.shape[0] // 2
    gap = 1 if data.shape[0] > 2 else 0
    data[cut : cut + gap] = fill
    layout = h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)
    first = f.create_dataset(name + "_a", data=data[:cut])
    second = f.create_dataset(name + "_b", data=data[cut + gap :], chunks=True, compression="gzip")
    layout[:cut] = h5py.VirtualSource(first)
    layout[cut + gap :] = h5py.VirtualSource(second)
    return f.create_virtual_dataset(name, layout)


def run_all(compiled, src, src_np, dst_init, idx):
    """Run compiled and reference; check both against the oracle."""
    expected = oracle(src_np, dst_init, *idx)
    ref = dst_init.copy()
    read_many_slices_reference(src, ref, *idx)
    np.testing.assert_array_equal(ref, expected)
    out = dst_init.copy()
    compiled(src, out, *idx)
    np.testing.assert_array_equal(out, expected)


# ---------------------------------------------------------------------------
# Equivalence on random slice sets
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@SETTINGS
@given(data=st.data())
def test_numpy_source(compiled_only, dtype, data):
    ndim = data.draw(st.integers(1, 4), label="ndim")
    src_shape = data.draw(shapes(ndim), label="src_shape")
    dst_shape = data.draw(shapes(ndim), label="dst_shape")
    rng = data.draw(rngs(), label="rng")
    layout = data.draw(st.sampled_from(["contiguous", "view", "reversed", "broadcast"]))
    if layout == "contiguous":
        src = random_array(rng, src_shape, dtype)
    elif layout == "view":  # every other point of a bigger array, Fortran order
        big = np.asfortranarray(random_array(rng, tuple(2 * n for n in src_shape), dtype))
        src = big[tuple(slice(1, None, 2) for _ in src_shape)]
    elif layout == "reversed":  # negative strides
        src = random_array(rng, src_shape, dtype)[tuple(slice(None, None, -1) for _ in src_shape)]
    else:  # the "full slab": one fill value broadcast with zero strides (read-only)
        src = np.broadcast_to(random_array(rng, (), dtype), src_shape)
        assert not src.flags.writeable
    assert src.shape == src_shape
    dst = random_array(rng, dst_shape, dtype)
    if data.draw(st.booleans(), label="strided dst"):
        dst = np.asfortranarray(random_array(rng, tuple(n + 1 for n in dst_shape), dtype))
        dst = dst[tuple(slice(0, n) for n in dst_shape)]
    idx = data.draw(slice_sets(src_shape, dst_shape))

    # Destination views are updated in place: work on copies of the view's base.
    expected = oracle(src, dst, *idx)
    ref = dst.copy()
    read_many_slices_reference(src, ref, *idx)
    np.testing.assert_array_equal(ref, expected)
    compiled_only(src, dst, *idx)
    np.testing.assert_array_equal(dst, expected)


@pytest.mark.parametrize("kind", ["chunked", "gzip", "virtual"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@settings(SETTINGS, max_examples=12)
@given(data=st.data())
def test_h5py_source(compiled_only, h5file, kind, dtype, data):
    ndim = data.draw(st.integers(1, 4), label="ndim")
    src_shape = data.draw(shapes(ndim), label="src_shape")
    dst_shape = data.draw(shapes(ndim), label="dst_shape")
    rng = data.draw(rngs(), label="rng")
    src_np = random_array(rng, src_shape, dtype)
    dset = make_h5_source(h5file, src_np, kind, rng)
    np.testing.assert_array_equal(dset[()], src_np)  # virtual: the gap is filled
    dst = random_array(rng, dst_shape, dtype)
    idx = data.draw(slice_sets(src_shape, dst_shape))
    run_all(compiled_only, dset, src_np, dst, idx)


def test_h5py_source_into_strided_dst_uses_reference(reference_calls, h5file):
    """HDF5 memory spaces describe C-contiguous buffers: other layouts take the reference path."""
    rng = np.random.default_rng(3)
    src_np = rng.standard_normal((9, 8))
    dset = make_h5_source(h5file, src_np, "chunked", rng)
    base = rng.standard_normal((12, 14))
    dst = base[::2, 1::2]  # (6, 7), not contiguous
    idx = tuple(
        map(np.array, ([[0, 0], [3, 1]], [[0, 0], [1, 3]], [[3, 4], [3, 2]], [[2, 2], [1, 3]], [[1, 1], [2, 2]]))
    )
    expected = oracle(src_np, dst, *idx)
    read_many_slices(dset, dst, *idx)
    np.testing.assert_array_equal(dst, expected)
    np.testing.assert_array_equal(base[::2, 1::2], expected)  # written through the view
    assert len(reference_calls) == 1


def test_hdf5_type_conversion(compiled_only, h5file):
    """An h5py source may differ in dtype from dst: libhdf5 converts, like dset[...]."""
    src_np = np.arange(60, dtype="i2").reshape(6, 10)
    dset = h5file.create_dataset(f"conv{next(_names)}", data=src_np, chunks=(4, 4))
    dst = np.zeros((3, 5), "f8")
    idx = ([[1, 2]], [[0, 0]], [[3, 4]], [[2, 2]], [[1, 1]])
    compiled_only(dset, dst, *idx)
    expected = oracle(src_np.astype("f8"), np.zeros((3, 5)), *map(np.array, idx))
    np.testing.assert_array_equal(dst, expected)


@pytest.mark.parametrize("source", ["numpy", "h5py"])
def test_vlen_strings_take_reference_path(reference_calls, h5file, source):
    rng = np.random.default_rng(0)
    words = np.array(["".join(rng.choice(list("abcdé"), rng.integers(0, 9))) for _ in range(48)], dtype=object).reshape(
        6, 8
    )
    if source == "h5py":
        src = h5file.create_dataset(f"vlen{next(_names)}", data=words, dtype=h5py.string_dtype(), chunks=(4, 4))
        src_np = src[()]  # h5py returns bytes: the oracle is what h5py reads
    else:
        src = src_np = words
    dst = np.full((4, 5), "x", dtype=object)
    idx = tuple(
        np.array(a)
        for a in (
            [[0, 1], [5, 7], [2, 0]],
            [[0, 0], [3, 4], [1, 1]],
            [[2, 3], [1, 1], [3, 1]],
            [[3, 2], [1, 1], [1, 1]],
            [[1, 1], [1, 1], [1, 2]],
        )
    )
    expected = oracle(src_np, dst, *idx)
    read_many_slices(src, dst, *idx)
    np.testing.assert_array_equal(dst, expected)
    assert reference_calls


def test_overlapping_src_and_dst_take_reference_path(reference_calls):
    a = np.arange(20.0)
    expected = a.copy()
    expected[2:12] = a[0:10].copy()
    read_many_slices(a[0:18], a[2:20], [[0]], [[0]], [[10]])
    np.testing.assert_array_equal(a, expected)
    assert reference_calls


def test_mixed_cases_match_and_strides_default_to_one(compiled_only):
    src = np.arange(100, dtype="i8").reshape(10, 10)
    dst = np.zeros((10, 10), "i8")
    compiled_only(src, dst, [[0, 0], [5, 5]], [[5, 5], [0, 0]], [[5, 5], [5, 5]])
    np.testing.assert_array_equal(dst[5:, 5:], src[:5, :5])
    np.testing.assert_array_equal(dst[:5, :5], src[5:, 5:])
    assert not dst[:5, 5:].any() and not dst[5:, :5].any()


def test_no_slices_is_a_no_op(h5file):
    dst = np.ones(3)
    read_many_slices(np.zeros(3), dst, [], [], [])
    read_many_slices(
        h5file.create_dataset(f"e{next(_names)}", data=np.zeros(3)),
        dst,
        np.empty((0, 1), int),
        np.empty((0, 1), int),
        np.empty((0, 1), int),
    )
    np.testing.assert_array_equal(dst, 1)


def test_concurrent_reads_from_threads(h5file):
    """The kernels release the GIL while holding h5py's lock: no deadlock, right results."""
    rng = np.random.default_rng(1)
    src_np = rng.standard_normal((200, 200))
    dset = h5file.create_dataset(f"t{next(_names)}", data=src_np, chunks=(20, 20), compression="gzip")
    starts = rng.integers(0, 190, size=(200, 2))
    idx = (starts, np.zeros((200, 2), int), np.full((200, 2), 10))

    def work(k):
        dst = np.zeros((10, 10))
        read_many_slices(dset if k % 2 else src_np, dst, *idx)
        r, c = starts[-1]
        np.testing.assert_array_equal(dst, src_np[r : r + 10, c : c + 10])
        assert dset[0, 0] == src_np[0, 0]  # h5py itself keeps working meanwhile
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(16)))


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def test_closed_dataset(tmp_path):
    with h5py.File(tmp_path / "closed.h5", "w") as f:
        dset = f.create_dataset("x", data=np.arange(10.0))
    with pytest.raises(ClosedFileError, match="closed"):
        read_many_slices(dset, np.zeros(3), [[0]], [[0]], [[3]])


def test_empty_dataset(h5file):
    dset = h5file.create_dataset(f"empty{next(_names)}", data=h5py.Empty("f8"))
    with pytest.raises(UnsupportedError):
        read_many_slices(dset, np.zeros(3), [[0]], [[0]], [[3]])


@pytest.mark.parametrize("source", ["numpy", "h5py"])
@pytest.mark.parametrize(
    ("src_start", "dst_start", "count", "src_stride", "side", "row"),
    [
        ([[0, 0], [8, 0]], [[0, 0], [0, 0]], [[2, 2], [3, 2]], [[1, 1], [1, 1]], "src", 1),
        ([[0, 0], [0, 0]], [[0, 0], [0, 3]], [[2, 2], [2, 2]], [[1, 1], [1, 1]], "dst", 1),
        ([[0, 0]], [[0, 0]], [[3, 1]], [[5, 1]], "src", 0),  # the stride reaches row 10
        ([[10, 0]], [[0, 0]], [[1, 1]], [[1, 1]], "src", 0),
        ([[2**63, 0]], [[0, 0]], [[1, 1]], [[1, 1]], "src", 0),  # would wrap if signed
        ([[0, 0]], [[0, 0]], [[2, 2**40]], [[1, 2**40]], "src", 0),  # overflow-free check
    ],
)
def test_out_of_bounds_raises_before_any_transfer(
    monkeypatch, h5file, source, src_start, dst_start, count, src_stride, side, row
):
    def never(*args, **kwargs):
        raise AssertionError("a kernel ran")

    monkeypatch.setattr(transfer._slicetools, "read_many_slices", never)
    monkeypatch.setattr(transfer, "_reference_loop", never)
    src = np.zeros((10, 10))
    if source == "h5py":
        src = h5file.create_dataset(f"oob{next(_names)}", data=src)
    dst = np.zeros((4, 4))
    src_start = np.array(src_start, dtype=np.uint64)
    with pytest.raises(IndexError, match=f"slice pair {row} is out of bounds for the {side}"):
        read_many_slices(src, dst, src_start, dst_start, count, src_stride)
    with pytest.raises(IndexError, match=f"slice pair {row}"):
        read_many_slices_reference(src, dst, src_start, dst_start, count, src_stride)


def test_empty_pairs_are_not_bounds_checked(compiled_only):
    dst = np.zeros(3)
    compiled_only(np.ones(3), dst, [[100], [0]], [[100], [1]], [[0], [2]])
    np.testing.assert_array_equal(dst, [0, 1, 1])


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"src": np.zeros(4, "f4")}, TypeError, "same dtype"),
        ({"dst": [0.0, 0.0]}, TypeError, "numpy.ndarray"),
        ({"dst": np.broadcast_to(0.0, (4,))}, ValueError, "read-only"),
        ({"src": np.zeros((4, 1))}, ValueError, "number of dimensions"),
        ({"src_start": [[-1]]}, ValueError, "negative"),
        ({"count": [[1.0]]}, TypeError, "integers"),
        ({"count": [[1], [1]]}, ValueError, "slice pairs"),
        ({"dst_start": [0]}, ValueError, "shape"),
        ({"src_stride": [[0]]}, ValueError, "zero stride"),
    ],
)
def test_validation_errors(kwargs, exc, match):
    args = dict(src=np.zeros(4), dst=np.zeros(4), src_start=[[0]], dst_start=[[0]], count=[[1]])
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        read_many_slices(**args)
    with pytest.raises(exc, match=match):
        read_many_slices_reference(**args)


def _u64(rows):
    return np.ascontiguousarray(np.array(rows, dtype=np.uint64))


def test_hdf5_failure_out_of_range_selection(h5file):
    """Bypassing the wrapper's bounds check: libhdf5's error becomes HDF5Error, not a crash."""
    src_np = np.arange(100.0).reshape(10, 10)
    dset = h5file.create_dataset(f"f{next(_names)}", data=src_np, chunks=(3, 3))
    dst = np.zeros((4, 4))
    mem_type = h5py.h5t.py_create(dst.dtype)
    message = r"H5Dread failed on slice pair 1: dst\[0:2:1, 0:2:1\] = src\[9:11:1, 0:2:1\]"
    with pytest.raises(HDF5Error, match=message):
        slicetools.read_many_slices(
            dset,
            dst,
            _u64([[0, 0], [9, 0]]),
            _u64([[0, 0], [0, 0]]),
            _u64([[2, 2], [2, 2]]),
            _u64([[1, 1], [1, 1]]),
            _u64([[1, 1], [1, 1]]),
            mem_type.id,
        )
    # The first pair was transferred before the failure; the file still works.
    np.testing.assert_array_equal(dst[:2, :2], [[0, 1], [10, 11]])
    assert dset[9, 9] == 99


@pytest.mark.parametrize("bad_type", ["dataspace", "garbage"])
def test_hdf5_failure_bad_memory_type(h5file, bad_type):
    dset = h5file.create_dataset(f"f{next(_names)}", data=np.arange(10.0))
    dst = np.zeros(4)
    space = h5py.h5s.create_simple((4,))  # a valid id, but not a datatype
    type_id = space.id if bad_type == "dataspace" else 2**40
    with pytest.raises(HDF5Error, match=r"H5Dread failed on slice pair 0.*H5Dread"):
        slicetools.read_many_slices(dset, dst, _u64([[0]]), _u64([[0]]), _u64([[4]]), _u64([[1]]), _u64([[1]]), type_id)


def test_hdf5_failure_closed_dataset(tmp_path):
    """A dataset whose file was closed, given to the kernel directly: HDF5Error, not a rank mismatch."""
    with h5py.File(tmp_path / "closed.h5", "w") as f:
        dset = f.create_dataset("x", data=np.arange(10.0))
    dst = np.zeros(4)
    with pytest.raises(HDF5Error, match="could not open src's dataspace"):
        slicetools.read_many_slices(
            dset, dst, _u64([[0]]), _u64([[0]]), _u64([[4]]), _u64([[1]]), _u64([[1]]), h5py.h5t.py_create(dst.dtype).id
        )


def test_private_kernel_checks_shapes(h5file):
    dst = np.zeros(4)
    with pytest.raises(ValueError, match="shape"):
        slicetools.read_many_slices(
            np.zeros(4), dst, _u64([[0]]), _u64([[0]]), _u64([[1, 1]]), _u64([[1]]), _u64([[1]])
        )
    with pytest.raises(ValueError, match="mem_type_id"):
        slicetools.read_many_slices(h5file.create_dataset(f"k{next(_names)}", data=dst), dst, *[_u64([[1]])] * 5)
    with pytest.raises(ValueError, match="item size"):
        slicetools.read_many_slices(np.zeros(4, "f4"), dst, *[_u64([[1]])] * 5)
    two_d = h5file.create_dataset(f"k{next(_names)}", data=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="src has 2 dimensions, dst has 1"):  # asked of libhdf5
        slicetools.read_many_slices(two_d, dst, *[_u64([[1]])] * 5, h5py.h5t.py_create(dst.dtype).id)


# ---------------------------------------------------------------------------
# Backend selection
# ---------------------------------------------------------------------------


def test_backend_switching(reference_calls):
    assert get_kernel_backend() == "cython"
    src, dst = np.arange(4.0), np.zeros(4)
    with kernel_backend("python"):
        assert get_kernel_backend() == "python"
        read_many_slices(src, dst, [[0]], [[0]], [[4]])
    assert get_kernel_backend() == "cython"
    assert len(reference_calls) == 1
    np.testing.assert_array_equal(dst, src)
    previous = set_kernel_backend("python")
    try:
        assert previous == "cython"
    finally:
        set_kernel_backend(previous)
    with pytest.raises(ValueError, match="one of"):
        set_kernel_backend("numba")
    with pytest.raises(RuntimeError), kernel_backend("python"):
        raise RuntimeError
    assert get_kernel_backend() == "cython"


@pytest.mark.parametrize(("value", "expected"), [("python", "python"), ("Cython", "cython"), ("fortran", "ValueError")])
def test_environment_variable(value, expected, tmp_path):
    code = textwrap.dedent(
        """
        try:
            from xarray_vhdf5._backend.transfer import get_kernel_backend
            print(get_kernel_backend())
        except ValueError as exc:
            assert "XARRAY_VHDF5_KERNELS" in str(exc), exc
            print("ValueError")
        """
    )
    env = {**os.environ, "XARRAY_VHDF5_KERNELS": value}
    out = subprocess.run(
        # cwd outside the checkout: "python -c" puts cwd on sys.path, which would
        # import the source tree (no compiled kernels) instead of the installed package.
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert out.stdout.strip().splitlines()[-1] == expected


def test_symbols_come_from_h5py():
    import h5py.defs

    from xarray_vhdf5._ext import _hdf5api

    assert _hdf5api.HDF5_LIBRARY_SOURCE == h5py.defs.__file__
    # The table is exported to the kernels through Cython's C-API dict, once.
    assert set(_hdf5api.__pyx_capi__) == {"H5"}


def _import_copy_of_package(root, cwd):
    """Import ``xarray_vhdf5.VersionedHDF5File`` from ``cwd`` on a copy of the package's sources in ``root``.

    The copy holds no compiled kernels, as a checkout does before it is built;
    the editable-install finders of this environment are removed first, so the
    import finds the copy as it finds a checkout that shadows a non-editable install.
    """
    import shutil

    package = os.path.dirname(os.path.dirname(transfer.__file__))
    shutil.copytree(package, root / "xarray_vhdf5", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
    code = textwrap.dedent(
        """
        import sys
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
        try:
            import xarray_vhdf5
            # the package imports its modules on first use (xarray_vhdf5/__init__.py)
            from xarray_vhdf5 import VersionedHDF5File
        except ImportError as exc:
            print(exc)
        else:
            print("imported", xarray_vhdf5.__file__)
        """
    )
    # PYTHONSAFEPATH (conftest) dropped: here the copy in cwd is what must be imported.
    env = {k: v for k, v in os.environ.items() if k not in ("XARRAY_VHDF5_KERNELS", "PYTHONSAFEPATH")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=cwd)
    return out.stdout.strip()


def test_import_from_source_checkout_says_so(tmp_path):
    """A checkout (build files beside the package) imported without its kernels, as
    ``python`` run inside it after a non-editable install does: the message names the
    checkout and the fixes instead of asking to rebuild."""
    for name in ("meson.build", "pyproject.toml"):
        (tmp_path / name).write_text("")
    (tmp_path / "_ext").mkdir()
    message = _import_copy_of_package(tmp_path, tmp_path)
    assert "compiled kernels" in message and "are unavailable" in message
    assert f"imported from the source checkout {tmp_path.resolve()}" in message
    assert "Run Python from another directory" in message
    assert f"pip install --no-build-isolation -e {tmp_path.resolve()}" in message
    assert "Rebuild the package" not in message


def test_missing_kernels_outside_a_checkout_asks_to_rebuild(tmp_path):
    """Kernels missing from a copy that is not a checkout (no build files): a broken install."""
    message = _import_copy_of_package(tmp_path, tmp_path)
    assert "are unavailable" in message and "Rebuild the package" in message
    assert "XARRAY_VHDF5_KERNELS=python" in message and "source checkout" not in message


def test_one_door_to_libhdf5():
    """Symbols resolved in one module, compiled kernels imported in one module.

    Only ``_ext/_hdf5api.pyx`` cimports ``dlsym``; every other kernel that calls
    libhdf5 cimports its table; and only ``_backend/_kernels.py`` imports
    ``xarray_vhdf5._ext`` (the other modules take the kernels from it); only
    ``_backend/_libhdf5.py`` declares ctypes functions and structs.
    """
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]  # the checkout: an installed package holds no _ext sources
    sources = sorted((root / "_ext").glob("*.p*"))
    assert sources, "no kernel sources found beside the package"
    for path in sources:
        text = path.read_text()
        if path.name != "_hdf5api.pyx":
            assert "posix.dlfcn" not in text and "PyCapsule" not in text, path.name
        if re.search(r"\bH5\.H5", text) and path.name != "_hdf5api.pyx":
            assert "from xarray_vhdf5._ext._hdf5api cimport H5" in text, path.name
    importers = [
        path.relative_to(root).as_posix()
        for path in sorted((root / "xarray_vhdf5").rglob("*.py"))
        if re.search(r"^\s*(from|import)\s+(\.\.|xarray_vhdf5\.)_ext\b", path.read_text(), re.MULTILINE)
    ]
    assert importers == ["xarray_vhdf5/_backend/_kernels.py"]
    # The ctypes side: libhdf5 functions and their structs declared in one module.
    ctypes_declarers = [
        path.relative_to(root).as_posix()
        for path in sorted((root / "xarray_vhdf5").rglob("*.py"))
        if re.search(r"ctypes\.(CDLL|Structure)\b", path.read_text())
    ]
    assert ctypes_declarers == ["xarray_vhdf5/_backend/_libhdf5.py"]
