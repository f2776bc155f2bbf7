"""Attributes written and read by the compiled kernel (_ext/attrtools.pyx) against the h5py paths."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from h5py import h5a

from xarray_vhdf5._backend import h5attrs
from xarray_vhdf5._backend.h5attrs import read_attr, write_attr
from xarray_vhdf5._backend.transfer import kernel_backend

pytestmark = pytest.mark.skipif(h5attrs._kernel() is None, reason="compiled kernels not built or not selected")

VALUES = {
    "str": "v1",
    "empty_str": "",
    "unicode": "Ünïcode ✓ 時刻",
    "timestamp": "2024-06-01 00:00:00.000000+0000",
    "true": True,
    "false": False,
    "np_bool": np.bool_(True),
    "i8": np.int64(-5),
    "i4": np.int32(7),
    "u1": np.uint8(200),
    "f8": np.float64(1.5),
    "f4": np.float32(-0.25),
    "int": 12,
    "float": 2.5,
    "chunks": np.array([8, 180, 360], dtype=np.int64),
    "matrix": np.array([[1.0, 2.0], [3.0, 4.0]]),
    "empty": np.array([], dtype=np.int64),
    "bools": np.array([True, False]),
}


def _describe(obj, name):
    attr = h5a.open(obj.id, name.encode())
    return attr.get_type(), attr.shape, obj.attrs[name]


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


@pytest.fixture
def f(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as f:
        yield f


def test_kernel_writes_what_h5py_writes(f):
    compiled, reference, high = (f.create_group(n, track_order=True) for n in ("compiled", "reference", "high"))
    for name, value in VALUES.items():
        write_attr(compiled.id, name, value)
        with kernel_backend("python"):
            write_attr(reference.id, name, value)
        high.attrs[name] = value
    for name in VALUES:
        c_type, c_shape, c_value = _describe(compiled, name)
        for other in (reference, high):
            o_type, o_shape, o_value = _describe(other, name)
            assert c_type == o_type, name
            assert c_shape == o_shape, name
            assert _same(c_value, o_value), (name, c_value, o_value)
    assert list(compiled.attrs) == list(VALUES)  # creation order kept


def test_overwrite_in_place_and_replace_with_another_type(f):
    g = f.create_group("g", track_order=True)  # attributes listed in creation order
    write_attr(g.id, "committed", False)
    write_attr(g.id, "timestamp", "t0")
    write_attr(g.id, "committed", True)  # same type and extent: rewritten in place, keeps its rank
    write_attr(g.id, "timestamp", "t1")
    assert list(g.attrs) == ["committed", "timestamp"]
    assert bool(g.attrs["committed"]) is True and g.attrs["timestamp"] == "t1"
    write_attr(g.id, "committed", np.int64(1))  # another type: deleted and created again, last
    assert list(g.attrs) == ["timestamp", "committed"]
    write_attr(g.id, "x", np.array([1, 2, 3]))
    write_attr(g.id, "x", np.array([4, 5]))  # another extent: deleted and created again
    np.testing.assert_array_equal(g.attrs["x"], [4, 5])
    assert h5a.open(g.id, b"x").shape == (2,)


def test_the_compiled_path_makes_no_h5py_attribute_call(f, monkeypatch):
    """Strings, bools and numbers never reach ``h5py.h5a`` (the reference path) when compiled."""
    g = f.create_group("g")
    g.attrs["given"] = np.array([8, 9])

    def refuse(*args, **kwargs):
        raise AssertionError("h5py.h5a was called")

    for fn in ("open", "create", "exists", "delete"):
        monkeypatch.setattr(h5attrs.h5a, fn, refuse)
    for name, value in VALUES.items():
        write_attr(g.id, name, value)
    write_attr(g.id, "str", "again")  # in place
    assert read_attr(g.id, "str", expect="str") == "again"
    assert read_attr(g.id, "unicode", expect="str") == VALUES["unicode"]
    np.testing.assert_array_equal(read_attr(g.id, "given", expect="int"), [8, 9])
    assert read_attr(g.id, "i4", expect="int") == 7
    with pytest.raises(KeyError):
        read_attr(g.id, "missing", expect="str")
    monkeypatch.undo()
    assert g.attrs["unicode"] == VALUES["unicode"] and g.attrs["str"] == "again"


@pytest.mark.parametrize("expect", [None, "str", "int"])
def test_reads_agree_with_the_reference(f, expect):
    g = f.create_group("g")
    for name, value in VALUES.items():
        g.attrs[name] = value
    g.attrs.create("ascii", "plain", dtype=h5py.string_dtype("ascii"))
    g.attrs["fixed"] = np.bytes_(b"fixed")
    g.attrs["names"] = np.array(["a", "b"], dtype=h5py.string_dtype())
    for name in [*VALUES, "ascii", "fixed", "names"]:
        got = read_attr(g.id, name, expect=expect)
        with kernel_backend("python"):
            want = read_attr(g.id, name, expect=expect)
        assert _same(got, want), (name, got, want)
    for path in (None, "python"):
        with kernel_backend(path or "cython"), pytest.raises(KeyError, match="missing"):
            read_attr(g.id, "missing", expect=expect)


def test_expected_kinds_come_back_as_documented(f):
    g = f.create_group("g")
    g.attrs["i4"] = np.int32(7)
    g.attrs["chunks"] = np.array([8, 9], dtype=np.int32)
    g.attrs["s"] = "ü"
    assert read_attr(g.id, "i4", expect="int") == 7 and read_attr(g.id, "i4", expect="int").dtype == np.int64
    assert read_attr(g.id, "chunks", expect="int").dtype == np.int64
    assert read_attr(g.id, "s", expect="str") == "ü"
    assert read_attr(g.id, "i4").dtype == np.int32  # without expect: the attribute's own dtype


def test_embedded_nul_is_refused_as_h5py_refuses_it(f):
    g = f.create_group("g")
    for path in ("cython", "python"):
        with kernel_backend(path), pytest.raises(ValueError, match="NULL"):
            write_attr(g.id, "nul", "a\0b")


@pytest.mark.parametrize("backend", ["cython", "python"])
def test_datatypes_that_share_a_dtype_str_are_not_confused(f, backend):
    """A plain int8 and h5py's enum on int8, or ASCII and UTF-8 variable-length strings, have the
    same ``dtype.str``: each attribute gets the HDF5 type h5py's ``attrs[...] = ...`` gives it."""
    enum = h5py.enum_dtype({"RED": 0, "GREEN": 1}, basetype="i1")
    values = {
        "plain": np.array([0, 1], dtype="i1"),
        "enum": np.array([0, 1], dtype=enum),
        "utf8": np.array(["a", "b"], dtype=h5py.string_dtype("utf-8")),
        "ascii": np.array([b"a", b"b"], dtype=h5py.string_dtype("ascii")),
    }
    ours, theirs = f.create_group("ours"), f.create_group("theirs")
    with kernel_backend(backend):
        for name, value in values.items():
            write_attr(ours.id, name, value)
            theirs.attrs[name] = value
    for name in values:
        assert _describe(ours, name)[0] == _describe(theirs, name)[0], name
    assert h5py.check_enum_dtype(ours.attrs.get_id("enum").dtype) == {"RED": 0, "GREEN": 1}
    assert h5py.check_string_dtype(ours.attrs.get_id("ascii").dtype).encoding == "ascii"


def test_reference_dtypes_get_their_own_datatypes():
    """h5py's object and region reference dtypes are object dtypes without ``vlen`` metadata:
    neither may take the other's (or a string's) cached HDF5 type."""
    for dtype in (h5py.string_dtype(), h5py.ref_dtype, h5py.regionref_dtype, h5py.ref_dtype):
        assert h5attrs._h5type(dtype, logical=True) == h5py.h5t.py_create(dtype, logical=True), dtype.metadata


def _every_kind(g) -> None:
    """Attributes of every kind the by-index reader meets: read by it, or left to h5py."""
    for name, value in VALUES.items():
        g.attrs[name] = value
    g.attrs.create("ascii", "plain", dtype=h5py.string_dtype("ascii"))
    g.attrs["fixed"] = np.bytes_(b"fixed")
    g.attrs["names"] = np.array(["a", "b"], dtype=h5py.string_dtype())
    g.attrs["big_endian"] = np.array([1, 2, 3], dtype=">i4")
    g.attrs["big_f8"] = np.array(2.5, dtype=">f8")
    g.attrs["f2"] = np.float16(0.5)
    g.attrs["u8_matrix"] = np.arange(6, dtype=np.uint64).reshape(2, 3)
    g.attrs["null"] = h5py.Empty("f4")
    g.attrs["compound"] = np.array((1, 2.0), dtype=[("a", "i4"), ("b", "f8")])
    g.attrs["ref"] = g.ref
    g.attrs["DIMENSION_LIST"] = np.int32(1)  # a deferred name (its value is not read)
    g.attrs.create("fixed_array", np.array([b"ab", b"c"], dtype="S2"))
    g.attrs.create("enum", np.int8(1), dtype=h5py.enum_dtype({"A": 0, "B": 1}, basetype="i1"))
    g.attrs["snow"] = "snow ❄"


@pytest.mark.parametrize("where", ["member", "self"])
def test_by_index_reader_agrees_with_the_reference(f, where):
    """The compiled attrs_by_index and its Python twin: same names, values (and their types), dtypes."""
    g = f.create_group("g")
    _every_kind(g)
    loc, obj_name = (f.id, b"g") if where == "member" else (g.id, b".")
    count = h5py.h5o.get_info(g.id).num_attrs
    kwargs = {"skip": frozenset({"f4"}), "defer": frozenset({"DIMENSION_LIST"})}
    got = h5attrs.attrs_by_index(loc, count, obj_name, **kwargs)
    with kernel_backend("python"):
        want = h5attrs.attrs_by_index(loc, count, obj_name, **kwargs)
    assert [n for n, _, _ in got] == [n for n, _, _ in want] and "f4" not in [n for n, _, _ in got]
    assert len(got) == count - 1
    for (name, value, dtype), (_, value_ref, dtype_ref) in zip(got, want):
        assert dtype == dtype_ref and h5py.check_string_dtype(dtype) == h5py.check_string_dtype(dtype_ref), name
        if isinstance(value_ref, h5py.Empty):
            assert isinstance(value, h5py.Empty) and value.dtype == value_ref.dtype
        elif value_ref is h5attrs.UNREAD:
            assert value is h5attrs.UNREAD, name
        elif isinstance(value_ref, np.ndarray) and value_ref.dtype.kind in "OV":
            assert value.dtype == value_ref.dtype and value.tolist() == value_ref.tolist(), name
        elif isinstance(value_ref, h5py.h5r.Reference):
            assert type(value) is type(value_ref), name
        else:
            assert _same(value, value_ref), (name, value, value_ref)
            assert not isinstance(value, np.ndarray) or value.flags.writeable, name  # as h5py's arrays


def test_by_index_reader_reads_the_common_kinds_itself(f):
    """Numbers and scalar variable-length strings come from the kernel, not h5py (one h5a.open per other kind)."""
    g = f.create_group("g")
    _every_kind(g)
    opened = []
    real_open = h5attrs.h5a.open

    def spy(*args, **kwargs):
        opened.append(kwargs.get("index"))
        return real_open(*args, **kwargs)

    count = h5py.h5o.get_info(g.id).num_attrs
    names = sorted(g.attrs.keys(), key=lambda n: n.encode("utf-8", "surrogateescape"))
    try:
        h5attrs.h5a.open = spy
        h5attrs.attrs_by_index(g.id, count, defer=frozenset({"DIMENSION_LIST"}))
    finally:
        h5attrs.h5a.open = real_open
    by_h5py = sorted(names[i] for i in opened)
    assert by_h5py == sorted(["DIMENSION_LIST", "compound", "enum", "fixed", "fixed_array", "null", "ref"])


def _assert_h5pys(got: dict, want: dict) -> None:
    """``got`` holds h5py's values of ``want`` (``dict(obj.attrs)``), kind by kind."""
    for name, value in want.items():
        if isinstance(value, h5py.Empty):
            assert isinstance(got[name], h5py.Empty)
        elif isinstance(value, h5py.h5r.Reference):
            assert type(got[name]) is type(value)
        elif isinstance(value, np.ndarray) and value.dtype.kind in "OV":
            assert got[name].tolist() == value.tolist(), name
        else:
            assert _same(got[name], value), (name, got[name], value)


@pytest.mark.parametrize("track_order", [False, True])
def test_version_tree_attributes_are_h5pys(f, track_order):
    """The reader's tree reads a group's attributes by index: h5py's values, in h5py's order."""
    from xarray_vhdf5._versions.reader_tree import _group_attrs

    g = f.create_group("g", track_order=track_order)
    _every_kind(g)
    got = _group_attrs(g)
    want = dict(g.attrs)
    assert list(got) == list(want)
    _assert_h5pys(got, want)


@pytest.mark.parametrize("kind", ["dataset", "group"])
@pytest.mark.parametrize("track_order", [False, True])
def test_object_attrs_are_h5pys_in_h5pys_order(f, kind, track_order):
    """object_attrs of an open dataset or group: dict(obj.attrs), order included; deferred names unread."""
    if kind == "group":
        obj = f.create_group("g", track_order=track_order)
    else:
        obj = f.create_dataset("d", data=np.arange(3.0), track_order=track_order)
    _every_kind(obj)
    got = h5attrs.object_attrs(obj)
    want = dict(obj.attrs)
    assert list(got) == list(want)
    assert (list(want) == sorted(want)) != track_order  # the orders differ: the test tells them apart
    _assert_h5pys(got, want)
    deferred = h5attrs.object_attrs(obj, defer=frozenset({"ref", "i8"}))
    assert list(deferred) == list(want)
    assert [k for k, v in deferred.items() if v is h5attrs.UNREAD] == [k for k in want if k in ("ref", "i8")]


@pytest.mark.parametrize("where", ["member", "self"])
def test_by_name_reader_agrees_with_the_reference(f, where):
    """read_attr_of, compiled and its Python twin: the same value for every kind, the same KeyError."""
    g = f.create_group("g")
    _every_kind(g)
    g.attrs["dims"] = np.array(["time", "lat", "lon"], dtype=h5py.string_dtype())
    g.attrs.create("dims2d", np.array([["a", "bb"], ["", "ccc"]], dtype=object), dtype=h5py.string_dtype())
    loc, obj_name = (f.id, b"g") if where == "member" else (g.id, b".")
    for name in g.attrs:
        got = h5attrs.read_attr_of(loc, obj_name, name)
        with kernel_backend("python"):
            want = h5attrs.read_attr_of(loc, obj_name, name)
        if isinstance(want, h5py.Empty):
            assert isinstance(got, h5py.Empty), name
        elif isinstance(want, h5py.h5r.Reference):
            assert type(got) is type(want), name
        elif isinstance(want, np.ndarray) and want.dtype.kind in "OV":
            assert got.dtype == want.dtype and got.shape == want.shape and got.tolist() == want.tolist(), name
        else:
            assert _same(got, want), (name, got, want)
    for backend in ("cython", "python"):
        with kernel_backend(backend):
            with pytest.raises(KeyError, match="no attribute 'missing'"):
                h5attrs.read_attr_of(loc, obj_name, "missing")
            if where == "member":
                with pytest.raises(KeyError):
                    h5attrs.read_attr_of(f.id, b"nothing", "dims")


def test_simple_attrs_and_its_twin_read_the_same(f):
    """simple_attrs: the compiled reader and the Python twin list every name and read the same ones, alike."""
    g = f.create_group("g")
    _every_kind(g)
    count = h5py.h5o.get_info(g.id).num_attrs
    got = h5attrs.simple_attrs(g.id, count)
    with kernel_backend("python"):
        want = h5attrs.simple_attrs(g.id, count)
    assert list(got) == list(want) == sorted(g.attrs.keys(), key=lambda n: n.encode("utf-8", "surrogateescape"))
    unread = {name for name, value in want.items() if value is h5attrs.UNREAD}
    assert unread == {name for name, value in got.items() if value is h5attrs.UNREAD}
    assert {"fixed", "fixed_array", "compound", "ref", "null", "enum"} <= unread  # fixed-length strings and the rest
    assert {"names", "snow", "big_endian", "u8_matrix", "ascii"}.isdisjoint(unread)
    for name in set(want) - unread:
        value, value_ref = got[name], want[name]
        if isinstance(value_ref, np.ndarray) and value_ref.dtype.kind == "O":
            assert value.tolist() == value_ref.tolist(), name
        else:
            assert _same(value, value_ref), (name, value, value_ref)
