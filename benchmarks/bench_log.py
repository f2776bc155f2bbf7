"""The version log of a long daily-append history: from the commits' records, and decoded.

A file of ``N`` daily versions (``xarray_vhdf5.VersionedHDF5File``: each stages a
version, grows a (t, 130) float32 of (1, 130) chunks by one row and writes it) is
built once (not timed). Then, on a fresh ``h5py.File`` each round:

- ``version_log (records)``: :func:`xarray_vhdf5._versions.history.version_log`,
  which reads the per-commit records (:mod:`xarray_vhdf5._versions.logrecord`);
- ``version_log (decoded)``: the same with ``records=False``, decoding every
  version's virtual-dataset mappings (the computation before the records,
  O(versions x chunks)): the baseline;
- ``version_log_frame``: the DataFrame ``ds.vhdf5.versions`` shows, as a user
  calls it (opening the file included).

Left out: the CLI's process start and package import (``vhdf5 log`` adds them:
about 0.7 s on the development machine) and the commits' cost of writing the
records (``bench_commits.py`` times commits with them).

Run: ``pytest benchmarks/bench_log.py --benchmark-only -p no:cacheprovider -o addopts=""``.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions.history import version_log
from xarray_vhdf5.xr._accessor import version_log_frame

N = 1000


@pytest.fixture(scope="module")
def daily(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("log") / "daily.h5")
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=rng.random((1, 130), dtype=np.float32), chunks=(1, 130))
        for i in range(1, N):
            with vf.stage_version(f"v{i}") as g:
                x = g["x"]
                x.resize((i + 1, 130))
                x[i] = rng.random(130, dtype=np.float32)
    return path


def _check(entries) -> None:
    assert len(entries) == N
    assert all(e.new_chunks == 1 and e.new_bytes == 520 and e.changed == ("x",) for e in entries)


@pytest.mark.parametrize("records", [True, False], ids=["records", "decoded"])
def test_version_log(benchmark, daily, record, records):
    def log():
        with h5py.File(daily, "r") as f:
            return version_log(f, records=records)

    _check(benchmark.pedantic(log, rounds=5 if records else 2, iterations=1))
    record(benchmark, f"version_log of {N} daily versions", "records" if records else "decoded", baseline=not records)


def test_version_log_frame(benchmark, daily, record):
    frame = benchmark.pedantic(version_log_frame, args=(daily,), rounds=3, iterations=1)
    assert len(frame) == N and (frame["new_chunks"] == 1).all()
    record(benchmark, f"version_log_frame of {N} daily versions", "xarray_vhdf5")
