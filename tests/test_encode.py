"""Chunks encoded outside libhdf5 (_backend/encode.py) read back through libhdf5 and versioned-hdf5 as written."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import versioned_hdf5

import xarray_vhdf5
from xarray_vhdf5._backend.encode import DIRECT_MIN_BYTES, ChunkEncoder

FILTERS = [
    {"compression": "gzip", "compression_opts": 1},
    {"compression": "gzip", "shuffle": True},
    {"compression": "gzip", "compression_opts": 9, "shuffle": True, "fletcher32": True},
    {"fletcher32": True},
    {"shuffle": True},
]


@pytest.mark.parametrize("dtype", ["f4", "<i2", ">f8", "u1", "c8", "?"])
@pytest.mark.parametrize("filters", FILTERS)
def test_encoded_chunks_decode_in_libhdf5(tmp_path, dtype, filters):
    rng = np.random.default_rng(0)
    a = (rng.random((6, 5, 7)) * 100).astype(dtype)
    with h5py.File(tmp_path / "e.h5", "w") as f:
        ds = f.create_dataset("x", shape=a.shape, chunks=(3, 5, 7), dtype=dtype, **filters)
        encoder = ChunkEncoder.of(ds)
        assert encoder is not None
        for k in range(2):
            ds.id.write_direct_chunk((3 * k, 0, 0), encoder.encode(a[3 * k : 3 * k + 3]), 0)
    with h5py.File(tmp_path / "e.h5", "r") as f:
        np.testing.assert_array_equal(f["x"][()], a)


def test_no_encoder_for_what_libhdf5_must_write(tmp_path):
    with h5py.File(tmp_path / "n.h5", "w") as f:
        assert ChunkEncoder.of(f.create_dataset("plain", shape=(4,), chunks=(2,), dtype="f4")) is None
        assert ChunkEncoder.of(f.create_dataset("lzf", shape=(4,), chunks=(2,), dtype="f4", compression="lzf")) is None
        s = f.create_dataset("s", shape=(4,), chunks=(2,), dtype=h5py.string_dtype(), compression="gzip")
        assert ChunkEncoder.of(s) is None
        enc = ChunkEncoder.of(f.create_dataset("g", shape=(4,), chunks=(2,), dtype="f4", compression="gzip"))
        with pytest.raises(ValueError, match=r"at most \(2,\) points of float32"):
            enc.encode(np.zeros(3, "f4"))
        with pytest.raises(ValueError, match="got shape"):
            enc.encode(np.zeros(2, "f8"))


def test_compressed_commits_through_the_encoder_read_everywhere(tmp_path):
    """Edge chunks padded with the fill value, many chunks queued: both libraries read every version."""
    path = tmp_path / "c.h5"
    rng = np.random.default_rng(1)
    data = rng.random((45, 30)).astype("f4")
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=data, chunks=(4, 7), compression="gzip", shuffle=True, fillvalue=-3.0)
        with vf.stage_version("v2") as g:
            g["x"][40:, :] = 1.5
    with h5py.File(path, "r") as f:
        raw = f["_version_data/x/raw_data"]
        edge = raw[raw.shape[0] - 4 :, :]  # a padded edge chunk's rows: the fill value beyond the data
        assert (edge[~np.isin(edge, data) & (edge != 1.5)] == -3.0).all()
        want2 = data.copy()
        want2[40:, :] = 1.5
        for vf in (xarray_vhdf5.VersionedHDF5File(f), versioned_hdf5.VersionedHDF5File(f)):
            np.testing.assert_array_equal(vf["v1"]["x"][()], data)
            np.testing.assert_array_equal(vf["v2"]["x"][()], want2)


def test_unfiltered_large_chunks_are_written_as_stored(tmp_path):
    """No filter and chunks of at least DIRECT_MIN_BYTES: the chunk's own bytes, padded at the edges."""
    with h5py.File(tmp_path / "f.h5", "w") as f:
        small = f.create_dataset("small", shape=(10, 8), chunks=(2, 8), dtype="f8")
        assert ChunkEncoder.of(small) is None  # slabs: one H5Dwrite for many small chunks
        rows = DIRECT_MIN_BYTES // (8 * 4)
        big = f.create_dataset("big", shape=(3 * rows, 8), chunks=(rows, 8), dtype="<f4", fillvalue=-9.0)
        enc = ChunkEncoder.of(big)
        assert enc is not None and enc.filters == ()
        whole = np.arange(rows * 8, dtype="<f4").reshape(rows, 8)
        data = enc.encode(whole)
        assert np.shares_memory(data, whole)  # not copied
        assert bytes(data) == whole.tobytes()
        edge = whole[: rows // 2, :5]
        big.id.write_direct_chunk((0, 0), data, 0)
        big.id.write_direct_chunk((rows, 0), enc.encode(edge), 0)
        np.testing.assert_array_equal(big[:rows], whole)
        got = big[rows : 2 * rows]
        np.testing.assert_array_equal(got[: rows // 2, :5], edge)
        assert (got[rows // 2 :] == -9.0).all() and (got[:, 5:] == -9.0).all()
