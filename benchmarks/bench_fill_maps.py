"""Reads of versions versioned-hdf5 committed, before and after ``vhdf5 fill-maps``.

Run: ``python benchmarks/bench_fill_maps.py [--versions 30] [--rounds 9]``

versioned-hdf5 2.6 commits ``--versions`` versions of a ``(1000, 1000)``
float32 in ``(10, 10)`` chunks (10,000 chunks; one point changed a version).
Timed, medians of ``--rounds``: ``VersionedHDF5File.open`` of the last version
and one point read (libhdf5 decodes its 10,000 mappings), and
``read_versions`` of one point across every version; then
:func:`xarray_vhdf5.fill_chunk_maps` once (timed), and both reads again. Every
read is checked against numpy.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import h5py
import numpy as np
import versioned_hdf5
from bench_stored_maps import _median_ms

import xarray_vhdf5 as xv


def _open_point(path: str, version: str, expected: float) -> None:
    with xv.VersionedHDF5File.open(path) as reader:
        assert reader[version]["x"][5, 5] == expected


def _history(path: str, expected: np.ndarray) -> None:
    with xv.VersionedHDF5File.open(path) as reader:
        np.testing.assert_array_equal(reader.read_versions("x", (5, 5)), expected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1000, 1000)).astype("f4")
    history = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "vhdf5.h5")
        start = time.perf_counter()
        with h5py.File(path, "w") as f:
            vf = versioned_hdf5.VersionedHDF5File(f)
            with vf.stage_version("v0") as g:
                g.create_dataset("x", data=data, chunks=(10, 10))
            history.append(data[5, 5])
            for k in range(1, args.versions):
                i, j = (int(n) for n in rng.integers(0, 1000, 2))
                data[i, j] = k
                with vf.stage_version(f"v{k}") as g:
                    g["x"][i, j] = k
                history.append(data[5, 5])
        written = time.perf_counter() - start
        last = f"v{args.versions - 1}"
        rows = {}
        for label in ("before", "after"):
            if label == "after":
                start = time.perf_counter()
                report = xv.fill_chunk_maps(path)
                filled = time.perf_counter() - start
            rows[label] = (
                _median_ms(_open_point, args.rounds, path, last, data[5, 5]),
                _median_ms(_history, max(1, args.rounds // 3), path, np.asarray(history)),
            )
        print(
            f"versioned-hdf5 2.6 wrote {args.versions} versions of a (1000, 1000) float32 in (10, 10) chunks "
            f"in {written:.1f} s; file {os.path.getsize(path) / 1e6:.1f} MB"
        )
        print(f"fill_chunk_maps: {filled:.2f} s, {report.stored} maps stored")
        print(f"{'':34}{'before':>10}{'after':>10}{'ratio':>8}")
        labels = ("open last version + 1 point (ms)", f"read_versions, 1 point x {args.versions} (ms)")
        for i, what in enumerate(labels):
            b, a = rows["before"][i], rows["after"][i]
            print(f"{what:34}{b:10.1f}{a:10.1f}{b / a:8.1f}")


if __name__ == "__main__":
    main()
