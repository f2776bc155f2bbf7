"""Lazy diffs: ds.vhdf5.diff(other, lazy=True) as dask arrays, reading only the remapped chunks."""

from __future__ import annotations

import tracemalloc

import dask
import numpy as np
import pytest
import xarray as xr

from xarray_vhdf5._backend.manifest import ChunkManifest
from xarray_vhdf5.xr._diff import diff_versions

COUNTS = ("points_changed", "chunks_changed")  # counted by an eager diff only


def _count_chunk_reads(monkeypatch, raw_data: str) -> list:
    """Record every chunk of ``raw_data`` read and decoded from its bytes (ChunkManifest._chunk)."""
    reads = []
    original = ChunkManifest._chunk

    def counting(self, slot, where):
        if self.raw_data == raw_data:
            reads.append((self.name, int(self.rows[slot])))
        return original(self, slot, where)

    monkeypatch.setattr(ChunkManifest, "_chunk", counting)
    return reads


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "d.h5"
    rng = np.random.default_rng(1)
    ds = xr.Dataset(
        {
            "a": (("t", "x"), rng.normal(size=(40, 30)), {"units": "K"}),
            "i": (("t",), np.arange(40, dtype="i4")),
            "when": (("t",), np.datetime64("2001-01-01", "ns") + np.arange(40) * np.timedelta64(1, "h")),
            "label": (("t",), np.array([f"p{k}" for k in range(40)], dtype=object)),
        },
        coords={"t": np.arange(40)},
    )
    ds["a"].encoding["chunks"] = (10, 15)
    ds["i"].encoding["chunks"] = (8,)
    ds.vhdf5.commit("v1", path=path)
    v2 = ds.copy(deep=True)
    v2["a"][3, 4] = np.nan
    v2["a"][25, 20] += 2
    v2["i"][5] = 77
    v2["when"][7] = np.datetime64("2002-01-01", "ns")
    v2["label"][2] = "changed"
    v2 = xr.concat([v2, v2.isel(t=slice(0, 5)).assign_coords(t=np.arange(40, 45))], "t")
    v2["a"].encoding["chunks"] = (10, 15)
    v2["i"].encoding["chunks"] = (8,)
    v2.vhdf5.commit("v2", path=path)
    return path


def test_lazy_equals_eager(small):
    eager = diff_versions(small, "v1", "v2", lazy=False)
    lazy = diff_versions(small, "v1", "v2", lazy=True)
    assert set(eager.variables) == set(lazy.variables)
    assert eager.attrs == lazy.attrs
    for name in ("a_diff", "a_changed", "a_changes", "i_diff", "when_diff", "label_changed", "label_changes"):
        assert lazy[name].chunks is not None, name
    for name in eager.variables:
        computed = lazy[name].compute()
        xr.testing.assert_equal(computed, eager[name])
        assert {k: v for k, v in eager[name].attrs.items() if k not in COUNTS} == computed.attrs, name
    assert lazy.a_diff.chunks == ((10, 10, 10, 10, 5), (15, 15))
    assert int(lazy.a_changed.sum()) == eager.a_changed.attrs["points_changed"]
    assert int(lazy.a_changes.sum()) == eager.a_changed.attrs["points_changed"]


def test_lazy_reads_only_remapped_chunks_of_both_versions(small, monkeypatch):
    reads = _count_chunk_reads(monkeypatch, "/_version_data/a/raw_data")
    lazy = diff_versions(small, "v1", "v2", lazy=True)
    assert reads == []  # nothing read to build it
    lazy.a_changed.compute()
    # chunks (0,0) and (2,1) changed, (4,0) and (4,1) appended (B only): 2 read from A, 4 from B
    assert sorted(n.split("/")[-2] for n, _ in reads) == ["v1"] * 2 + ["v2"] * 4
    assert lazy.a_changes.attrs["chunks_read"] == 4


def test_accessor_diff_of_a_dask_dataset_is_lazy(small):
    with xr.open_dataset(small, engine="vhdf5", version="v2", chunks={}) as ds:
        lazy = ds.vhdf5.diff("v1")
        assert lazy.a_diff.chunks is not None
    with xr.open_dataset(small, engine="vhdf5", version="v2") as ds:
        eager = ds.vhdf5.diff("v1")
        assert eager.a_diff.chunks is None
        assert ds.vhdf5.diff("v1", lazy=True).a_diff.chunks is not None
    xr.testing.assert_equal(lazy.compute(), eager)


def test_larger_than_the_memory_budget(tmp_path, monkeypatch):
    """A 16 MiB variable diffed within a 4 MiB budget (10 chunks); only its 2 changed chunks read, in each version."""
    budget = 4 * 2**20
    path = tmp_path / "big.h5"
    rng = np.random.default_rng(3)
    data = rng.normal(size=(2000, 1000))  # float64: 16 MiB
    ds = xr.Dataset({"big": (("row", "col"), data)})
    ds["big"].encoding["chunks"] = (50, 1000)  # 400 KB chunks, 40 of them
    ds.vhdf5.commit("v1", path=path)
    data[150, 7] += 1.0
    data[1234, 999] = np.nan
    ds.vhdf5.commit("v2", path=path)
    del data, ds
    with dask.config.set(scheduler="synchronous"):  # first use imports modules (~10 MiB): not the diff's
        warm = diff_versions(path, "v1", "v2", lazy=True)
        int(warm.big_changed.sum()), float(np.abs(warm.big_diff).max()), warm.big_changes.values
    reads = _count_chunk_reads(monkeypatch, "/_version_data/big/raw_data")
    tracemalloc.start()
    try:
        with dask.config.set(scheduler="synchronous"):
            out = diff_versions(path, "v1", "v2", lazy=True)
            assert reads == []
            changed = int(out.big_changed.sum())
            largest = float(np.abs(out.big_diff).max())
            per_chunk = out.big_changes.values
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert changed == 2 and largest == pytest.approx(1.0)
    assert per_chunk.sum() == 2 and np.count_nonzero(per_chunk) == 2
    print(f"\nlazy diff peak {peak / 2**20:.2f} MiB", end="")
    assert peak < budget, f"peak {peak / 2**20:.1f} MiB"
    # each of big_changed, big_diff, big_changes read the 2 changed chunks of v1 and v2
    assert len(reads) == 3 * 4 and len(set(reads)) == 4
    tracemalloc.start()
    try:
        eager = diff_versions(path, "v1", "v2", lazy=False)
        _, eager_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f", eager {eager_peak / 2**20:.2f} MiB")
    assert eager_peak > budget  # the eager diff holds whole arrays: the budget tells them apart
    assert eager.big_changed.attrs["points_changed"] == 2
