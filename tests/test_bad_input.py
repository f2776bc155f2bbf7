"""Bad input is refused, never stored changed; empty selections give empty arrays (issue 18).

Three defects, each checked against an oracle (numpy, versioned-hdf5 2.6, h5py):

- a value a dataset's dtype cannot hold (``2**40``, NaN, ``1+2j`` into int32) is
  refused with the builtin exception numpy and versioned-hdf5 raise, at the h5py
  level and through xarray; numpy's silent casts of *arrays* are refused too;
- a string longer than a fixed-width string dataset holds is refused
  (:class:`~xarray_vhdf5.errors.StringTooLongError`), and ``str`` variables
  (variable-length on disk) store any length through xarray;
- empty selections (``[3:3]``, ``[1:1:2]``, ``[5:2]``, ``[[]]``) of committed and
  staged datasets return what numpy returns, and empty assignments are no-ops
  (libhdf5 2.0 fails empty reads of a virtual dataset with many mappings).
"""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (registers the .vhdf5 accessor)
from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._staging import cast_for_storage
from xarray_vhdf5.errors import (
    StringTooLongError,
    ValueCastError,
    ValueOverflowError,
    ValueTypeError,
    VHDF5Error,
)

BUILTINS = (OverflowError, TypeError, ValueError)

# -- 1. values a dtype cannot hold -------------------------------------------------------

# Python scalars: numpy's own conversion (np.asarray(value, dtype)) is the oracle.
SCALARS = [
    2**40,
    -(2**40),
    2**31,
    2**31 - 1,
    -(2**31),
    -1,
    2**70,
    1.5,
    -1.5,
    3e9,
    float("nan"),
    float("inf"),
    -float("inf"),
    1 + 2j,
    1 + 0j,
    True,
    "3",
    "abc",
    None,
]
DTYPES = ["i1", "i4", "i8", "u1", "u8", "f4", "f8", "?"]
# Those numpy makes a numeric array of (not 2**70, strings, None).
ARRAY_SCALARS = [v for v in SCALARS if isinstance(v, (bool, float, complex)) or (isinstance(v, int) and abs(v) < 2**63)]


def _numpy_outcome(value, dtype):
    """(exception class or None, result) of numpy converting the Python scalar ``value``."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return None, np.asarray(value, dtype=dtype)
        except RuntimeWarning:  # numpy only warns (float overflow): refused here as OverflowError
            return OverflowError, None
        except BUILTINS as exc:
            return next(b for b in BUILTINS if isinstance(exc, b)), None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", SCALARS, ids=repr)
def test_cast_follows_numpy_for_python_scalars(value, dtype):
    expected, result = _numpy_outcome(value, dtype)
    if expected is None:
        got = cast_for_storage(value, dtype, "x")
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, result)
    else:
        with pytest.raises(expected) as info:
            cast_for_storage(value, dtype, "x")
        assert isinstance(info.value, ValueCastError) and isinstance(info.value, VHDF5Error)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", ARRAY_SCALARS, ids=repr)
def test_cast_of_arrays_refuses_what_numpy_refuses_for_scalars(value, dtype):
    """numpy casts arrays unchecked; a stored array must follow the scalar rules point by point."""
    expected, _ = _numpy_outcome(value, dtype)
    arr = np.array([0, value])
    assert arr.dtype.kind in "biufc"
    if expected is None:
        cast_for_storage(arr, dtype, "x")
    else:
        with pytest.raises(expected):
            cast_for_storage(arr, dtype, "x")


def test_cast_messages_name_the_dataset_dtype_and_value():
    with pytest.raises(ValueOverflowError, match=r"1099511627776.*'b' of dtype int32") as info:
        cast_for_storage(np.array([1, 2**40]), "i4", "b")
    assert (info.value.name, info.value.dtype, info.value.value) == ("b", np.dtype("i4"), 2**40)
    with pytest.raises(ValueCastError, match="NaN"):
        cast_for_storage(np.array([np.nan]), "i4", "b")
    with pytest.raises(ValueTypeError, match="complex"):
        cast_for_storage(np.array([1 + 2j]), "f8", "b")
    # int64's ends are exact: 2**63 as a float is out, the float just below is in
    with pytest.raises(ValueOverflowError):
        cast_for_storage(np.array([2.0**63]), "i8")
    assert cast_for_storage(np.array([-(2.0**63)]), "i8")[0] == -(2**63)
    with pytest.raises(ValueOverflowError):
        cast_for_storage(np.array([-1]), "u4")  # numpy's astype gives 4294967295


def _file(path, make):
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            make(g)


def _vh5_error(tmp_path, value):
    """The exception versioned-hdf5 2.6 raises for ``g["b"][0, 0] = value`` on an int32 dataset."""
    vh5 = pytest.importorskip("versioned_hdf5")
    path = tmp_path / "vh5.h5"
    with h5py.File(path, "a") as f:
        vf = vh5.VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("b", data=np.zeros((4, 4), "i4"), chunks=(2, 2))
        try:
            with vf.stage_version("v1") as g:
                g["b"][0, 0] = value
        except BUILTINS as exc:
            return next(b for b in BUILTINS if isinstance(exc, b))
    return None


@pytest.mark.parametrize("value", [2**40, float("nan"), 1 + 2j, float("inf"), -(2**31) - 1], ids=repr)
def test_staged_invalid_write_raises_what_versioned_hdf5_raises(tmp_path, value):
    expected = _vh5_error(tmp_path, value)
    assert expected is not None  # versioned-hdf5 refuses each of these
    path = tmp_path / "ours.h5"
    _file(path, lambda g: g.create_dataset("b", data=np.zeros((4, 4), "i4"), chunks=(2, 2)))
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with pytest.raises(expected) as info, vf.stage_version("v1") as g:
            g["b"][0, 0] = value
        assert isinstance(info.value, ValueCastError)
        assert "int32" in str(info.value) and "'b'" in str(info.value)
        assert vf.versions == ["v0"] or "v1" not in vf.versions
        assert vf[vf.current_version]["b"][0, 0] == 0


@pytest.mark.parametrize(
    "value, expected",
    [
        (np.array([[2**40]]), OverflowError),  # numpy's setitem / astype wrap it to 0
        (np.int64(2**40), OverflowError),
        (np.array([[np.nan, 1.0]]), ValueError),  # numpy stores -2147483648
        (np.array([[1 + 2j]]), TypeError),  # numpy drops the imaginary part
        (np.array([[-1]], dtype=np.int64), None),
        (np.array([[7.9]]), None),  # fractions truncate, as numpy does
    ],
    ids=["int64-array", "int64-scalar", "nan-array", "complex-array", "fits", "fraction"],
)
@pytest.mark.parametrize("where", ["staged-existing", "staged-new"])
def test_staged_arrays_of_another_dtype_are_checked(tmp_path, value, expected, where):
    path = tmp_path / "f.h5"
    _file(path, lambda g: g.create_dataset("b", data=np.zeros((4, 4), "i4"), chunks=(2, 2)))
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        if expected is None:
            with vf.stage_version("v1") as g:
                ds = (
                    g["b"]
                    if where == "staged-existing"
                    else g.create_dataset("c", data=np.zeros((4, 4), "i4"), chunks=(2, 2))
                )
                ds[0:1, 0 : np.shape(value)[-1] if np.ndim(value) else 1] = value
            stored = vf["v1"]["b" if where == "staged-existing" else "c"][0, 0]
            assert stored == np.asarray(value).astype("i4").flat[0]
            return
        with pytest.raises(expected), vf.stage_version("v1") as g:
            ds = (
                g["b"]
                if where == "staged-existing"
                else g.create_dataset("c", data=np.zeros((4, 4), "i4"), chunks=(2, 2))
            )
            ds[0:1, 0 : np.shape(value)[-1] if np.ndim(value) else 1] = value


def test_create_dataset_with_data_that_does_not_fit_dtype(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with pytest.raises(OverflowError), vf.stage_version("v0") as g:
            g.create_dataset("a", data=np.array([1, 2**40]), dtype="i4")  # astype would give 0
        with pytest.raises(ValueError), vf.stage_version("v0") as g:
            g.create_dataset("a", data=np.array([1.0, np.nan]), dtype="i4")
        with vf.stage_version("v0") as g:
            g.create_dataset("a", data=np.array([1, 2**20]), dtype="i4")
        assert vf["v0"]["a"][1] == 2**20


@pytest.fixture
def int_file(tmp_path):
    path = tmp_path / "x.h5"
    ds = xr.Dataset(
        {"b": (("x", "y"), np.zeros((4, 4), "i4")), "f": ("x", np.zeros(4, "f4"))},
        coords={"x": np.arange(4), "y": np.arange(4)},
    )
    ds.vhdf5.commit("v0", path=path)
    return path


@pytest.mark.parametrize(
    "value, expected",
    [(2**40, OverflowError), (float("nan"), ValueError), (1 + 2j, TypeError), (np.int64(2**40), OverflowError)],
    ids=repr,
)
@pytest.mark.parametrize("how", ["setitem", "loc"])
def test_xarray_staged_invalid_write(int_file, value, expected, how):
    staged = xr.open_dataset(int_file, engine="vhdf5").vhdf5.stage()
    with pytest.raises(expected) as info:
        if how == "setitem":
            staged["b"][0, 0] = value
        else:
            staged["b"].loc[{"x": 0, "y": 0}] = value
    assert isinstance(info.value, ValueCastError) and "'b'" in str(info.value)
    assert staged["b"].values[0, 0] == 0 and not staged["b"].variable._data.has_changes
    staged.close()


def test_xarray_staged_valid_write_still_works(int_file):
    staged = xr.open_dataset(int_file, engine="vhdf5").vhdf5.stage()
    staged["b"][0, 0] = 2**31 - 1
    staged["b"].loc[{"x": 1, "y": 1}] = 7.9  # truncated, as numpy does
    staged.vhdf5.commit("v1")
    out = xr.open_dataset(int_file, engine="vhdf5")["b"].values
    assert out[0, 0] == 2**31 - 1 and out[1, 1] == 7


def test_xarray_commit_of_another_dtype_refuses_values_that_do_not_fit(int_file):
    ds = xr.open_dataset(int_file, engine="vhdf5").load()
    wide = ds.copy(deep=True)
    wide["b"] = wide["b"].astype("i8")
    wide["b"][0, 0] = 2**40  # would be stored as 0 in the int32 dataset
    with pytest.raises(OverflowError):
        wide.vhdf5.commit("v1", path=int_file)
    wide["f"] = wide["f"].astype("f8")
    wide["b"][0, 0] = 5
    wide["f"][0] = 1e300  # would be stored as inf in the float32 dataset
    with pytest.raises(OverflowError):
        wide.vhdf5.commit("v1", path=int_file)
    wide["f"][0] = 2.5
    wide.vhdf5.commit("v1", path=int_file)  # values that fit still commit, cast to the stored dtype
    out = xr.open_dataset(int_file, engine="vhdf5", version="v1")
    assert out["b"].dtype == np.int32 and out["b"].values[0, 0] == 5 and out["f"].values[0] == 2.5


# -- 2. strings longer than a fixed width ---------------------------------------------------


@pytest.mark.parametrize("value", ["CHANGED", b"CHANGED", np.array([b"ok", b"CHANGED"])], ids=repr)
def test_fixed_width_string_dataset_refuses_longer_strings(tmp_path, value):
    path = tmp_path / "s.h5"
    _file(path, lambda g: g.create_dataset("s", data=np.array([b"abcdef", b"x"]), chunks=(2,)))
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with pytest.raises(StringTooLongError) as info, vf.stage_version("v1") as g:
            g["s"][0 : np.size(value)] = value
        assert isinstance(info.value, ValueError)
        message = str(info.value)
        assert "'s'" in message and "6 characters" in message and "CHANGED" in message
        assert info.value.width == 6
        with vf.stage_version("v1") as g:
            g["s"][0] = b"CHANGE"  # fits
        assert list(vf["v1"]["s"][:]) == [b"CHANGE", b"x"]


def test_variable_length_string_dataset_stores_any_length(tmp_path):
    path = tmp_path / "s.h5"
    _file(
        path,
        lambda g: g.create_dataset(
            "s", data=np.array(["abcdef", "x"], dtype=object), dtype=h5py.string_dtype(), chunks=(2,)
        ),
    )
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g["s"][0] = "CHANGED"
        assert vf["v1"]["s"].asstr()[0] == "CHANGED"


@pytest.fixture
def str_file(tmp_path):
    path = tmp_path / "s.h5"
    ds = xr.Dataset({"u": ("x", np.array(["abcdef"] * 4)), "b": ("x", np.array([b"abcdef"] * 4))})
    ds.vhdf5.commit("v0", path=path)
    with h5py.File(path, "r") as f:  # str as variable-length strings, bytes fixed-width
        assert f["_version_data/versions/v0/u"].dtype.kind == "O"
        assert f["_version_data/versions/v0/b"].dtype == np.dtype("S6")
    return path


def test_xarray_staged_fixed_width_bytes_refuse_longer_values(str_file):
    staged = xr.open_dataset(str_file, engine="vhdf5").vhdf5.stage()
    with pytest.raises(StringTooLongError, match="'b'.*6 characters"):
        staged["b"][0] = b"CHANGED"  # a numpy |S6 array would keep b"CHANGE"
    assert staged["b"].values[0] == b"abcdef"
    staged.close()


def test_xarray_staged_variable_length_str_keeps_every_character(str_file):
    staged = xr.open_dataset(str_file, engine="vhdf5").vhdf5.stage()
    assert staged["u"].dtype == np.dtype("<U6")
    staged["u"][0] = "CHANGED"  # a numpy <U6 array would keep "CHANGE"
    staged["u"][1:3] = ["a", "a much longer string"]
    assert list(staged["u"].values) == ["CHANGED", "a", "a much longer string", "abcdef"]
    staged.vhdf5.commit("v1")
    out = xr.open_dataset(str_file, engine="vhdf5")
    assert list(out["u"].values) == ["CHANGED", "a", "a much longer string", "abcdef"]


def test_xarray_commit_keeps_longer_str_the_opened_encoding_would_cut(str_file):
    """xarray records '<U6' in encoding['dtype'] when it decodes the strings; its encoder would cut to it."""
    ds = xr.open_dataset(str_file, engine="vhdf5").load()
    assert ds["u"].encoding.get("dtype") == np.dtype("<U6")
    new = ds.copy(deep=True)
    new["u"] = new["u"].astype(object)
    new["u"][0] = "CHANGED"
    new["u"].encoding = dict(ds["u"].encoding)
    new.vhdf5.commit("v1", path=str_file)
    assert xr.open_dataset(str_file, engine="vhdf5")["u"].values[0] == "CHANGED"
    longer = xr.open_dataset(str_file, engine="vhdf5").load()
    encoding = dict(longer["b"].encoding)  # |S6, the dataset's width
    longer["b"] = ("x", np.array([b"CHANGED"] * 4))
    longer["b"].encoding = encoding
    with pytest.raises(StringTooLongError):
        longer.vhdf5.commit("v2", path=str_file)


# -- 3. empty selections ---------------------------------------------------------------------

S = np.s_
EMPTY_1D = [S[3:3], S[1:1:2], S[5:2], np.array([], int), [], S[2000:], S[-1:-1], S[..., 3:3]]
EMPTY_2D = [
    *EMPTY_1D,
    S[:, 3:3],
    S[3:3, 1],
    S[1, 2:2],
    S[np.array([], int), 1:3],
    S[3:3, [1, 2]],
    S[:, np.array([], int)],
    S[2:2, 1:1],
]
# Many chunks, so that each version's virtual dataset has many mappings (libhdf5 2.0 fails
# an empty read of those; one with 16 mappings reads fine).
A1 = np.arange(1000.0)
A2 = np.arange(40 * 30, dtype="i4").reshape(40, 30)


@pytest.fixture
def many_chunks(tmp_path):
    path = tmp_path / "e.h5"

    def make(g):
        g.create_dataset("a", data=A1, chunks=(10,))
        g.create_dataset("b", data=A2, chunks=(4, 3))

    _file(path, make)
    return path


def _check_empty(obj, ref, sels):
    for sel in sels:
        expected = ref[sel]
        got = np.asarray(obj[sel])
        assert got.shape == expected.shape, sel
        assert got.dtype == expected.dtype, sel


@pytest.mark.parametrize("mode", ["r", "a"])
def test_empty_selections_of_committed_datasets(many_chunks, mode):
    with h5py.File(many_chunks, mode) as f:
        vf = VersionedHDF5File(f)
        _check_empty(vf["v0"]["a"], A1, EMPTY_1D)
        _check_empty(vf["v0"]["b"], A2, EMPTY_2D)
        np.testing.assert_array_equal(vf["v0"]["a"][3:5], A1[3:5])  # and the rest still reads
        with pytest.raises(IndexError):
            vf["v0"]["b"][50]  # errors that are not empty selections are h5py's


def test_empty_selections_of_staged_datasets(many_chunks):
    with h5py.File(many_chunks, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            _check_empty(g["a"], A1, EMPTY_1D)  # unchanged: read from the virtual dataset
            _check_empty(g["b"], A2, EMPTY_2D)
            g["a"][0] = -1.0
            g["b"][0, 0] = -1
            a, b = A1.copy(), A2.copy()
            a[0], b[0, 0] = -1.0, -1
            _check_empty(g["a"], a, EMPTY_1D)  # changed: read from the staged chunks
            _check_empty(g["b"], b, EMPTY_2D)
            new = g.create_dataset("c", data=A2, chunks=(4, 3))
            _check_empty(new, A2, EMPTY_2D)


def test_empty_assignment_is_a_no_op(many_chunks):
    with h5py.File(many_chunks, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            for sel in EMPTY_1D:
                ref = A1.copy()
                ref[sel] = []  # numpy accepts it
                g["a"][sel] = []
            for sel in EMPTY_2D:
                ref = A2.copy()
                ref[sel] = 7
                g["b"][sel] = 7
        np.testing.assert_array_equal(vf["v1"]["a"][:], A1)
        np.testing.assert_array_equal(vf["v1"]["b"][:], A2)


@pytest.fixture
def xr_many_chunks(tmp_path):
    """A file whose variables read through the chunk manifest and, for scaleoffset, through libhdf5."""
    path = tmp_path / "xe.h5"

    def make(g):
        g.create_dataset("a", data=A1, chunks=(10,))
        g.create_dataset("b", data=A2, chunks=(4, 3))
        g.create_dataset("c", data=A2, chunks=(4, 3), scaleoffset=0)  # no decoder here: libhdf5 reads it

    _file(path, make)
    return path


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "dask"])
def test_empty_selections_through_xarray(xr_many_chunks, chunks):
    ds = xr.open_dataset(xr_many_chunks, engine="vhdf5", chunks=chunks)
    lazy_1d = [s for s in EMPTY_1D if not (isinstance(s, tuple) and s[0] is Ellipsis)]
    for name, ref, sels in [("a", A1, lazy_1d), ("b", A2, EMPTY_2D), ("c", A2, EMPTY_2D)]:
        whole = ds[name].values  # loaded once: numpy then indexes it
        assert whole.shape == ref.shape
        for sel in sels:
            assert ds[name][sel].shape == ref[sel].shape, (name, sel)
            assert ds[name][sel].values.shape == ref[sel].shape, (name, sel)
            assert whole[sel].shape == ref[sel].shape, (name, sel)
    ds.close()


def test_empty_selections_and_assignments_of_a_staged_xarray_dataset(xr_many_chunks):
    staged = xr.open_dataset(xr_many_chunks, engine="vhdf5").vhdf5.stage()
    for sel in [S[3:3], S[5:2], np.array([], int)]:
        assert staged["a"][sel].values.shape == A1[sel].shape
        assert staged["b"][sel].values.shape == A2[sel].shape
        staged["a"][sel] = []
        staged["b"][sel] = 7
    assert not staged["a"].variable._data.has_changes
    np.testing.assert_array_equal(staged["b"].values, A2)
    staged.close()
