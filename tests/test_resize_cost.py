"""A resize costs time independent of the chunks it adds (issue 19): they are fill, never materialised."""

from __future__ import annotations

import h5py
import numpy as np

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._backend import raw_data


def test_growing_to_two_billion_points_touches_only_written_chunks(tmp_path, monkeypatch):
    calls = []
    real = raw_data.is_fill_chunk

    def counting(chunk, fillvalue):
        calls.append(chunk.shape)
        return real(chunk, fillvalue)

    monkeypatch.setattr(raw_data, "is_fill_chunk", counting)
    with h5py.File(tmp_path / "big.h5", "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.arange(10, dtype="i8"), chunks=(1000,), fillvalue=-1)
        with vf.stage_version("v1") as g:
            g["x"].resize((2**31 + 5,))  # 2,147,484 chunks of 1000 points
            g["x"][2**31 + 1] = 7
        report = vf.last_commit.datasets["x"]
        assert report.fill_chunks == 2**31 // 1000 + 1 - 2  # all but the first and the written one
        assert len(calls) <= 4, len(calls)  # before: one materialised chunk each (2 million)
        x = vf["v1"]["x"]
        assert x.shape == (2**31 + 5,)
        assert x[2**31 + 1] == 7 and x[5] == 5 and x[2**30] == -1 and x[2**31 + 4] == -1
        # v0's chunk, v1's (re-trimmed: its edge grew) and the written one
        assert f["_version_data/x/raw_data"].shape[0] == 3000


def test_a_changed_fill_value_still_stores_the_new_chunks(tmp_path):
    """Chunks on the full slab are skipped only when they are raw_data's fill value."""
    with h5py.File(tmp_path / "f.h5", "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.arange(10, dtype="i8"), chunks=(4,), fillvalue=0)
        with vf.stage_version("v1") as g:
            g["x"].resize((30,))
        np.testing.assert_array_equal(vf["v1"]["x"][:], np.r_[np.arange(10), np.zeros(20, "i8")])
