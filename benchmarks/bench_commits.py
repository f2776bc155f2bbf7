"""Commit workloads side by side: xarray_vhdf5, versioned-hdf5 2.6, the format floor, plain h5py.

Run: ``pytest benchmarks/bench_commits.py --benchmark-only --benchmark-group-by=group``
(add ``--benchmark-json=out.json`` and ``python benchmarks/report.py out.json`` for ratios).
Each benchmark checks its final data against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from workloads import IMPLEMENTATIONS, append_steps, appends, expected_sparse, sparse_edits, sparse_plan

N_APPENDS = 200
N_SPARSE = 100


@pytest.fixture(scope="module")
def steps():
    return append_steps(N_APPENDS)


@pytest.fixture(scope="module")
def sparse():
    return sparse_plan(N_SPARSE)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_appends(benchmark, tmp_path, steps, impl):
    """(a) 200 versions, each appending one (180, 360) float32 step; chunks (8, 180, 360)."""
    benchmark.group = "appends: 200 versions x 1 step of (t,180,360) f4"
    counter = iter(range(10**6))
    result = benchmark.pedantic(
        lambda: appends(impl, str(tmp_path / f"a{next(counter)}.h5"), steps), rounds=1, iterations=1
    )
    np.testing.assert_array_equal(result, steps)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_sparse_edits(benchmark, tmp_path, sparse, impl):
    """(b) 100 versions, each changing 10 random points of a (2000, 2000) float64; chunks (100, 100)."""
    benchmark.group = "sparse edits: 100 versions x 10 points of (2000,2000) f8"
    base, edits = sparse
    counter = iter(range(10**6))
    result = benchmark.pedantic(
        lambda: sparse_edits(impl, str(tmp_path / f"s{next(counter)}.h5"), base, edits), rounds=1, iterations=1
    )
    np.testing.assert_array_equal(result, expected_sparse(base, edits))
