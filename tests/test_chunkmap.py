"""``build_slab_indices_and_offsets``: compiled == reference, on real versioned-hdf5 files.

Files written by versioned-hdf5 2.6.0 (1-d with an edge chunk, 2-d with
unmapped all-fill chunks, 3-d with edge chunks on every axis, and a second
version after resizes) are read with both backends; the slab arrays must
agree, mark exactly the all-fill chunks as unmapped, and reading every chunk
from raw_data at the given offsets must reproduce ``vds[()]``.  Hand-made
virtual datasets cover multi-chunk mappings (runs along axis 0) and every
rejected layout.
"""

from __future__ import annotations

import itertools
import warnings

import h5py
import numpy as np
import pytest

from xarray_vhdf5._backend.chunkmap import (
    build_slab_indices_and_offsets,
    build_slab_indices_and_offsets_reference,
)
from xarray_vhdf5._backend.transfer import kernel_backend, read_many_slices
from xarray_vhdf5._ext import slicetools
from xarray_vhdf5.errors import ClosedFileError, HDF5Error, UnsupportedError

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from versioned_hdf5 import VersionedHDF5File

BUILDERS = {
    "compiled": build_slab_indices_and_offsets,
    "reference": build_slab_indices_and_offsets_reference,
}


@pytest.fixture(autouse=True)
def _compiled_backend():
    """These tests compare the backends explicitly: start from the compiled one even when
    the suite runs with XARRAY_VHDF5_KERNELS=python."""
    with kernel_backend("cython"):
        yield


# ---------------------------------------------------------------------------
# Files written by versioned-hdf5 2.6.0
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vfile(tmp_path_factory):
    path = tmp_path_factory.mktemp("chunkmap") / "versioned.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as sv:
            sv.create_dataset("y", data=np.arange(25.0) + 1, chunks=(10,), fillvalue=0.0)
            x = np.zeros((30, 50))
            x[0:10, 0:10] = 1  # chunk (0, 0); (0, 1)...(1, 1) stay all fill
            x[12:, 25:] = rng.integers(1, 9, (18, 25))
            x[25, 5] = 3
            sv.create_dataset("x", data=x, chunks=(10, 10), fillvalue=0.0)
            w = rng.integers(-5, 5, (6, 7, 8)).astype("i4")
            w[:4, :3, :5] = -1  # the fill value: chunk (0, 0, 0) unmapped
            sv.create_dataset("w", data=w, chunks=(4, 3, 5), fillvalue=-1)
            sv.create_dataset("z", data=np.zeros((20, 20)), chunks=(10, 10), fillvalue=0.0)
            sv.create_dataset("e", data=np.zeros((0,)), chunks=(10,), fillvalue=0.0)
        with vf.stage_version("v2") as sv:
            sv["x"].resize((35, 45))  # grow along axis 0, shrink along axis 1
            sv["x"][30:35, :] = 7
            sv["x"][0, 0] = 2
            sv["y"].resize((37,))
            sv["y"][30:] = 5
    with h5py.File(path, "r") as f:
        yield f


def version_datasets(f):
    for version in ("v1", "v2"):
        for name in ("x", "y", "w", "z", "e"):
            yield f"_version_data/versions/{version}/{name}"


def reconstruct(vds, raw_data, chunks, slab_indices, slab_offsets):
    """Every chunk read from raw_data at its offset, or the fill value; one point at a time
    per chunk with plain h5py slicing (independent of the kernels)."""
    out = np.empty(vds.shape, vds.dtype)
    for chunk in itertools.product(*map(range, slab_indices.shape)):
        region = tuple(slice(c * n, min((c + 1) * n, size)) for c, n, size in zip(chunk, chunks, vds.shape))
        counts = [r.stop - r.start for r in region]
        if slab_indices[chunk] == 0:
            out[region] = vds.fillvalue
        else:
            off = int(slab_offsets[chunk])
            rows = slice(off, off + counts[0])
            out[region] = raw_data[(rows, *(slice(0, n) for n in counts[1:]))]
    return out


@pytest.mark.parametrize("path", list(version_datasets(None)))
def test_versioned_hdf5_files(vfile, path):
    vds = vfile[path]
    chunks = tuple(int(c) for c in vds.attrs["chunks"])
    raw_data = vfile[vds.attrs["raw_data"]]
    indices, offsets = build_slab_indices_and_offsets(vds, vds.shape, chunks, raw_data)
    ref_indices, ref_offsets = build_slab_indices_and_offsets_reference(vds, vds.shape, chunks, raw_data.name)
    grid = tuple(-(-n // c) for n, c in zip(vds.shape, chunks))
    assert indices.shape == offsets.shape == grid
    assert indices.dtype == np.intp and offsets.dtype == np.uint64
    np.testing.assert_array_equal(indices, ref_indices)
    np.testing.assert_array_equal(offsets, ref_offsets)
    assert set(np.unique(indices)) <= {0, 1}
    assert not offsets[indices == 0].any()
    assert (offsets % chunks[0] == 0).all()  # whole chunks[0] slabs of rows

    data = vds[()]
    np.testing.assert_array_equal(reconstruct(vds, raw_data, chunks, indices, offsets), data)
    # Unmapped exactly where a chunk is entirely fill value (versioned-hdf5 never stores those).
    for chunk in itertools.product(*map(range, grid)):
        region = tuple(slice(c * n, (c + 1) * n) for c, n in zip(chunk, chunks))
        assert (indices[chunk] == 0) == bool((data[region] == vds.fillvalue).all())


def test_expected_maps(vfile):
    for name, grid in (("z", (2, 2)), ("e", (0,))):  # all fill, empty: no mappings at all
        vds = vfile[f"_version_data/versions/v1/{name}"]
        assert vds.is_virtual and not vds.virtual_sources()
        indices, offsets = build_slab_indices_and_offsets(vds, vds.shape, vds.attrs["chunks"], vds.attrs["raw_data"])
        assert indices.shape == offsets.shape == grid and not indices.any()
    v1x = vfile["_version_data/versions/v1/x"]
    indices, _ = build_slab_indices_and_offsets(v1x, (30, 50), (10, 10), v1x.attrs["raw_data"])
    np.testing.assert_array_equal(indices, [[1, 0, 0, 0, 0], [0, 0, 1, 1, 1], [1, 0, 1, 1, 1]])
    v2y = vfile["_version_data/versions/v2/y"]
    indices, offsets = build_slab_indices_and_offsets(v2y, (37,), (10,), v2y.attrs["raw_data"])
    assert indices.tolist() == [1, 1, 1, 1]
    assert len(set(offsets.tolist())) == 4


def test_slab_arrays_drive_read_many_slices(vfile):
    """The intended use: one read_many_slices call per slab (raw_data, the fill "full slab")."""
    vds = vfile["_version_data/versions/v2/x"]
    chunks = (10, 10)
    raw_data = vfile[vds.attrs["raw_data"]]
    indices, offsets = build_slab_indices_and_offsets(vds, vds.shape, chunks, raw_data)
    grid = np.stack(np.meshgrid(*map(np.arange, indices.shape), indexing="ij"), -1).reshape(-1, 2)
    origin = grid * chunks
    count = np.minimum(origin + chunks, vds.shape) - origin
    stored = indices.ravel() == 1
    src_start = np.zeros_like(origin)
    src_start[:, 0] = offsets.ravel()
    out = np.full(vds.shape, np.nan)
    read_many_slices(raw_data, out, src_start[stored], origin[stored], count[stored])
    full_slab = np.broadcast_to(np.asarray(vds.fillvalue, vds.dtype), chunks)
    fill_start = np.zeros_like(origin[~stored])
    read_many_slices(full_slab, out, fill_start, origin[~stored], count[~stored])
    np.testing.assert_array_equal(out, vds[()])


def test_python_backend_uses_reference(vfile, monkeypatch):
    vds = vfile["_version_data/versions/v1/y"]

    def never(*args, **kwargs):
        raise AssertionError("compiled kernel called")

    monkeypatch.setattr(slicetools, "build_slab_indices_and_offsets", never)
    with kernel_backend("python"):
        indices, _ = build_slab_indices_and_offsets(vds, (25,), (10,), vds.attrs["raw_data"])
    assert indices.tolist() == [1, 1, 1]


# ---------------------------------------------------------------------------
# Hand-made virtual datasets
# ---------------------------------------------------------------------------


def make_vds(f, name, shape, mappings, raw="/raw", dtype="f8", fill=0.0):
    """A virtual dataset from (vstart, count, sstart[, dset_name, file_name]) blocks,
    built with h5py's low-level API for full control of every mapping."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.VIRTUAL)  # also with no mapping, like versioned-hdf5
    dcpl.set_fill_value(np.array(fill, dtype))
    for vstart, count, sstart, *names in mappings:
        dset_name = names[0] if names else raw
        file_name = names[1] if len(names) > 1 else "."
        vspace = h5py.h5s.create_simple(shape, shape)
        vspace.select_hyperslab(vstart, count)
        src_shape = f[raw].shape if raw in f else tuple(a + n for a, n in zip(sstart, count))
        sspace = h5py.h5s.create_simple(src_shape, src_shape)
        sspace.select_hyperslab(sstart, count)
        dcpl.set_virtual(vspace, file_name.encode(), dset_name.encode(), sspace)
    return create_from_dcpl(f, name, shape, dcpl, dtype)


def create_from_dcpl(f, name, shape, dcpl, dtype="f8"):
    space = h5py.h5s.create_simple(shape, shape)
    h5py.h5d.create(f.id, name.encode(), h5py.h5t.py_create(np.dtype(dtype)), space, dcpl=dcpl)
    return f[name]


@pytest.fixture
def hfile(tmp_path):
    with h5py.File(tmp_path / "handmade.h5", "w") as f:
        f.create_dataset("raw", data=np.arange(60 * 20.0).reshape(60, 20), chunks=(10, 10))
        f.create_dataset("other", data=np.zeros((60, 20)))
        yield f


@pytest.mark.parametrize("builder", BUILDERS)
def test_multi_chunk_run_along_axis_0(hfile, builder):
    # 1-d view of raw's first column is not possible (rank), so use 2-d with one column of chunks.
    vds = make_vds(hfile, "run", (35, 10), [((0, 0), (35, 10), (10, 0))])
    indices, offsets = BUILDERS[builder](vds, (35, 10), (10, 10), "/raw")
    assert indices.ravel().tolist() == [1, 1, 1, 1]
    assert offsets.ravel().tolist() == [10, 20, 30, 40]
    rebuilt = reconstruct(vds, hfile["raw"], (10, 10), indices, offsets)
    np.testing.assert_array_equal(rebuilt, vds[()])


@pytest.mark.parametrize("builder", BUILDERS)
def test_mixed_runs_edges_and_gaps(hfile, builder):
    vds = make_vds(
        hfile,
        "mixed",
        (20, 25),
        [
            ((0, 10), (20, 10), (30, 0)),  # a run of two chunks in chunk column 1
            ((0, 20), (10, 5), (50, 0)),  # edge chunk (0, 2)
            ((10, 0), (10, 10), (0, 0)),  # chunk (1, 0); (0, 0) and (1, 2) unmapped
        ],
        fill=-3.0,
    )
    indices, offsets = BUILDERS[builder](vds, (20, 25), (10, 10), hfile["raw"])
    np.testing.assert_array_equal(indices, [[0, 1, 1], [1, 1, 0]])
    np.testing.assert_array_equal(offsets, [[0, 30, 50], [0, 40, 0]])
    rebuilt = reconstruct(vds, hfile["raw"], (10, 10), indices, offsets)
    np.testing.assert_array_equal(rebuilt, vds[()])


@pytest.mark.parametrize("builder", BUILDERS)
def test_no_mappings(hfile, builder):
    vds = make_vds(hfile, "none", (7, 3), [])
    indices, offsets = BUILDERS[builder](vds, (7, 3), (2, 2), "/raw")
    assert indices.shape == (4, 2) and not indices.any() and not offsets.any()


REJECTED = {
    "several chunks on axis 1": ([((0, 0), (10, 20), (0, 0))], "spans several chunks along axis 1"),
    "unaligned": ([((5, 0), (10, 10), (0, 0))], "does not start on a chunk boundary along axis 0"),
    "partial chunk": ([((0, 0), (5, 10), (0, 0))], "ends inside a chunk along axis 0"),
    "partial run": ([((0, 0), (15, 10), (0, 0))], "ends inside a chunk along axis 0"),
    "source not at column 0": ([((0, 0), (10, 10), (0, 10))], "does not start at 0 along axis 1"),
    "overlap": (
        [((0, 0), (10, 10), (0, 0)), ((0, 0), (20, 10), (20, 0))],
        "virtual mapping 1 .*chunk 0 of the block is already mapped",
    ),
    "other dataset": (
        [((0, 0), (10, 10), (0, 0), "/other")],
        "source dataset is '/other', expected '/raw'",
    ),
    "other file": (
        [((0, 0), (10, 10), (0, 0), "/raw", "elsewhere.h5")],
        "source file is 'elsewhere.h5'",
    ),
    "block shapes differ": ([((0, 0), (10, 10), (0, 0))], "differ in shape along axis 0"),
}


@pytest.mark.parametrize("builder", BUILDERS)
@pytest.mark.parametrize("case", REJECTED)
def test_rejected_layouts(hfile, builder, case):
    mappings, match = REJECTED[case]
    if case == "block shapes differ":  # same number of points, other shape
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        vspace = h5py.h5s.create_simple((30, 30))
        vspace.select_hyperslab((0, 0), (10, 10))
        sspace = h5py.h5s.create_simple((60, 20))
        sspace.select_hyperslab((0, 0), (20, 5))
        dcpl.set_virtual(vspace, b".", b"/raw", sspace)
        vds = create_from_dcpl(hfile, "bad", (30, 30), dcpl)
    else:
        vds = make_vds(hfile, "bad", (30, 30), mappings)
    with pytest.raises(ValueError, match=match):
        BUILDERS[builder](vds, (30, 30), (10, 10), "/raw")


@pytest.mark.parametrize("builder", BUILDERS)
def test_rejected_non_block_selection(hfile, builder):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    vspace = h5py.h5s.create_simple((30, 10))
    vspace.select_hyperslab((0, 0), (10, 10))
    vspace.select_hyperslab((20, 0), (10, 10), op=h5py.h5s.SELECT_OR)
    sspace = h5py.h5s.create_simple((60, 20))
    sspace.select_hyperslab((0, 0), (20, 10))
    dcpl.set_virtual(vspace, b".", b"/raw", sspace)
    vds = create_from_dcpl(hfile, "holes", (30, 10), dcpl)
    with pytest.raises(ValueError, match="not a single rectangular block"):
        BUILDERS[builder](vds, (30, 10), (10, 10), "/raw")


# ---------------------------------------------------------------------------
# Argument validation and HDF5 failures
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("builder", BUILDERS)
def test_validation(hfile, tmp_path, builder):
    build = BUILDERS[builder]
    vds = make_vds(hfile, "ok", (20, 10), [((0, 0), (10, 10), (0, 0))])
    with pytest.raises(ValueError, match="does not match the shape"):
        build(vds, (20, 11), (10, 10), "/raw")
    with pytest.raises(ValueError, match="positive"):
        build(vds, (20, 10), (10, 0), "/raw")
    with pytest.raises(ValueError, match="positive"):
        build(vds, (20, 10), (10,), "/raw")
    with pytest.raises(TypeError, match="integers"):
        build(vds, (20, 10), (10.0, 10), "/raw")
    with pytest.raises(ValueError, match="not a virtual dataset"):
        build(hfile["raw"], (60, 20), (10, 10), "/raw")
    with pytest.raises(ValueError, match="absolute"):
        build(vds, (20, 10), (10, 10), "raw")
    with pytest.raises(TypeError):
        build(np.zeros((20, 10)), (20, 10), (10, 10), "/raw")
    with h5py.File(tmp_path / "elsewhere.h5", "w") as g:
        with pytest.raises(ValueError, match="not in the file"):
            build(vds, (20, 10), (10, 10), g.create_dataset("raw", data=np.zeros((1, 10))))
    scalar = hfile.create_dataset("scalar", data=1.0)
    with pytest.raises(UnsupportedError):
        build(scalar, (), (), "/raw")


@pytest.mark.parametrize("builder", BUILDERS)
def test_closed_file(tmp_path, builder):
    with h5py.File(tmp_path / "closed.h5", "w") as f:
        f.create_dataset("raw", data=np.zeros((10, 10)), chunks=(10, 10))
        vds = make_vds(f, "v", (10, 10), [((0, 0), (10, 10), (0, 0))])
    with pytest.raises(ClosedFileError):
        BUILDERS[builder](vds, (10, 10), (10, 10), "/raw")


def test_hdf5_failure_becomes_hdf5error(hfile):
    """Bypassing the wrapper: the kernel on a non-virtual dataset fails in libhdf5, cleanly."""
    with pytest.raises(HDF5Error, match="H5Pget_virtual_count failed on '/raw'.*not a virtual"):
        slicetools.build_slab_indices_and_offsets(hfile["raw"], (60, 20), (10, 10), "/raw")
    assert hfile["raw"][1, 1] == 21.0  # the file is still usable
