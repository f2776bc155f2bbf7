"""The compiled virtual-mapping kernel (_ext/vdstools.pyx) against its reference path."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from h5py import h5d, h5p, h5s, h5t
from hypothesis import given, settings

from xarray_vhdf5._backend.transfer import kernel_backend
from xarray_vhdf5._backend.virtual import create_virtual_dataset_id, mapping_arrays, set_virtual_mappings
from xarray_vhdf5.errors import HDF5Error
from xarray_vhdf5.testing.strategies import chunked_shapes, rngs


def _mappings(dcpl) -> list:
    out = []
    for i in range(dcpl.get_virtual_count()):
        out.append(
            (
                dcpl.get_virtual_filename(i),
                dcpl.get_virtual_dsetname(i),
                dcpl.get_virtual_vspace(i).get_select_bounds(),
                dcpl.get_virtual_srcspace(i).get_select_bounds(),
            )
        )
    return out


def _build(f, name, shape, chunks, rows):
    """The reference path, by hand: a virtual dcpl filled by ``set_virtual_mappings``, then ``H5Dcreate``."""
    raw = f["raw"]
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_layout(h5d.VIRTUAL)
    vspace = h5s.create_simple(shape, shape)
    set_virtual_mappings(dcpl, vspace, raw.id.get_space(), raw.name, *mapping_arrays(shape, chunks, rows))
    vspace.select_all()
    h5d.create(f.id, name.encode(), h5t.py_create(raw.dtype), vspace, dcpl=dcpl)
    return dcpl


@settings(max_examples=20, deadline=None)
@given(
    shape_chunks=chunked_shapes(
        min_ndim=1, max_ndim=3, max_points=None, min_side=1, max_side=23, max_chunk=None, chunk_overhang=0
    ),
    rng=rngs(),
)
def test_compiled_equals_reference(tmp_path_factory, shape_chunks, rng):
    shape, chunks = shape_chunks
    grid = [-(-s // c) for s, c in zip(shape, chunks)]
    indices = [i for i in np.ndindex(*grid) if rng.random() < 0.7]
    rng.shuffle(indices)
    c0 = chunks[0]
    rows = []
    for k, index in enumerate(indices):
        n0 = min(c0, shape[0] - index[0] * c0)
        rows.append((tuple(index), k * c0, k * c0 + n0))
    path = tmp_path_factory.mktemp("vk") / "f.h5"
    data = rng.standard_normal((max(len(indices), 1) * c0, *chunks[1:]))
    with h5py.File(path, "w") as f:
        f.create_dataset("raw", data=data, chunks=chunks)
        a = _build(f, "by_hand", shape, chunks, rows)
        assert len(_mappings(a)) == len(rows)
        # The oracle: each chunk's region holds its raw_data rows.
        expected = np.zeros(shape)
        for index, start, stop in rows:
            region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, shape))
            src = (slice(start, stop), *(slice(0, r.stop - r.start) for r in region[1:]))
            expected[region] = data[src]
        np.testing.assert_array_equal(f["by_hand"][()], expected)
        # The whole creation (kernel: template copy, spaces, mappings, H5Dcreate2 in one call).
        for backend in ("cython", "python"):
            with kernel_backend(backend):
                dsid = create_virtual_dataset_id(f.id, f"whole_{backend}", f["raw"], shape, chunks, rows, fillvalue=0.0)
            assert isinstance(dsid, h5d.DatasetID) and dsid.shape == shape
        made = [f[f"whole_{b}"] for b in ("cython", "python")]
        assert _mappings(made[0].id.get_create_plist()) == _mappings(made[1].id.get_create_plist()) == _mappings(a)
        for ds in made:
            np.testing.assert_array_equal(ds[()], expected)
            assert ds.attrs["raw_data"] == "/raw" and tuple(ds.attrs["chunks"]) == chunks


def test_out_of_bounds_rejected_before_any_mapping(tmp_path):
    with h5py.File(tmp_path / "f.h5", "w") as f:
        raw = f.create_dataset("raw", shape=(10, 4), chunks=(5, 4), dtype="f8")
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_layout(h5d.VIRTUAL)
        vspace = h5s.create_simple((10, 4))
        dst = np.array([[0, 0], [5, 0]], np.uint64)
        src = np.array([[0, 0], [10, 0]], np.uint64)  # second mapping past raw's 10 rows
        cnt = np.array([[5, 4], [5, 4]], np.uint64)
        with pytest.raises(IndexError, match="mapping 1 reaches beyond the source"):
            set_virtual_mappings(dcpl, vspace, raw.id.get_space(), raw.name, dst, src, cnt)
        assert dcpl.get_virtual_count() == 0


def test_hdf5_failure_raises_not_crashes(tmp_path):
    """The compiled creation given ids libhdf5 refuses: HDF5Error naming the call, no crash."""
    from xarray_vhdf5._ext.vdstools import create_virtual_dataset as kernel

    with h5py.File(tmp_path / "f.h5", "w") as f:
        raw = f.create_dataset("raw", shape=(10, 4), chunks=(5, 4), dtype="f8")
        one = np.array([[0, 0]], np.uint64)
        cnt = np.array([[5, 4]], np.uint64)
        ftype = h5t.py_create(raw.dtype)  # kept alive: its id stays open
        tid = ftype.id
        # A dataset id where a property list id is expected: H5Pcopy fails.
        with pytest.raises(HDF5Error, match="H5Pcopy failed creating 'x'"):
            kernel(f.id.id, b"x", tid, raw.id.id, (10, 4), raw.id.id, b"/raw", one, one, cnt)
        # A closed dataset id for raw_data: its dataspace cannot be read.
        closed = f.create_dataset("gone", shape=(10, 4), dtype="f8").id.id  # its object freed: the id closed
        with pytest.raises(HDF5Error, match=r"H5Dget_space \(raw_data\) failed"):
            kernel(f.id.id, b"x", tid, raw.id.id, (10, 4), closed, b"/raw", one, one, cnt)
        with pytest.raises(ValueError, match="source has 2 axes, the virtual dataset 1"):
            kernel(
                f.id.id,
                b"x",
                tid,
                raw.id.id,
                (10,),
                raw.id.id,
                b"/raw",
                np.zeros((1, 1), np.uint64),
                np.zeros((1, 1), np.uint64),
                np.ones((1, 1), np.uint64),
            )
        assert "x" not in f


def test_cached_creation_templates_keep_each_dtype_and_fill_value(tmp_path):
    """create_virtual_dataset reuses one property list per (dtype, fill value): never the wrong one."""
    from xarray_vhdf5._backend.virtual import create_virtual_dataset

    cases = [
        ("f8-0", "f8", 0.0),
        ("f8-nan", "f8", np.nan),
        ("f8-neg0", "f8", -0.0),
        ("f8-7", "f8", 7.5),
        ("i4-3", "i4", 3),
        ("i4-0", "i4", 0),
        ("S3", "S3", b"ab"),
        ("S3-empty", "S3", b""),
        ("bool", bool, True),
        ("i1", "i1", 1),
    ]
    with h5py.File(tmp_path / "t.h5", "w") as f:
        for _ in range(2):  # the second round takes every template from the cache
            for name, dtype, fill in cases:
                raw = f.require_dataset(
                    f"raw-{name}", shape=(4,), dtype=dtype, chunks=(2,), maxshape=(None,), fillvalue=fill
                )
                if name in f:
                    del f[name]
                vds = create_virtual_dataset(f, name, raw, (4,), (2,), [((0,), 0, 2)])
                assert vds.is_virtual
                assert vds.dtype == raw.dtype and h5py.check_enum_dtype(vds.dtype) == h5py.check_enum_dtype(raw.dtype)
                got, want = np.asarray(vds.fillvalue), np.asarray(raw.fillvalue)
                assert got.tobytes() == want.tobytes(), (name, got, want)
                assert vds[2:].tobytes() == np.full(2, want, dtype=raw.dtype).tobytes()


@pytest.mark.parametrize("backend", ["cython", "python"])
def test_creation_errors_are_the_same_on_both_paths_and_create_nothing(tmp_path, backend):
    """A mapping beyond raw_data or beyond the dataset: IndexError naming it; an existing name:
    ValueError (h5py's); nothing is created in either case."""
    with h5py.File(tmp_path / "f.h5", "w") as f:
        raw = f.create_dataset("raw", shape=(10, 4), maxshape=(None, 4), chunks=(5, 4), dtype="f8")
        g = f.create_group("v")
        with kernel_backend(backend):
            with pytest.raises(IndexError, match=r"mapping 1 reaches beyond the source dataspace \(10, 4\)"):
                create_virtual_dataset_id(g.id, "x", raw, (10, 4), (5, 4), [((0, 0), 0, 5), ((1, 0), 10, 15)])
            with pytest.raises(IndexError, match=r"mapping 0 reaches beyond the virtual dataspace \(4, 4\)"):
                create_virtual_dataset_id(g.id, "y", raw, (4, 4), (5, 4), [((0, 0), 0, 5)])
            assert list(g) == []
            create_virtual_dataset_id(g.id, "x", raw, (10, 4), (5, 4), [((0, 0), 0, 5)])
            with pytest.raises(ValueError, match="already exists"):
                create_virtual_dataset_id(g.id, "x", raw, (10, 4), (5, 4), [((1, 0), 5, 10)])
        assert list(g) == ["x"] and g["x"].id.get_create_plist().get_virtual_count() == 1


def test_a_creation_libhdf5_refuses_quotes_its_error_stack(tmp_path):
    """The compiled creation in a file opened read-only: HDF5Error with libhdf5's reason."""
    with h5py.File(tmp_path / "ro.h5", "w") as f:
        f.create_dataset("raw", shape=(10,), chunks=(5,), dtype="f8")
        f.create_group("v")
    with h5py.File(tmp_path / "ro.h5", "r") as f:
        with kernel_backend("cython"):
            with pytest.raises(HDF5Error, match=r"H5Dcreate2 failed creating 'x': .*intent"):
                create_virtual_dataset_id(f["v"].id, "x", f["raw"], (10,), (5,), [((0,), 0, 5)])
