"""What issue 17's machinery costs a commit today, by ablation of the same code.

The held-open daily append of ``bench_durability.py`` (a ``(t, 90, 180)`` float32, one
chunk a day, ``VersionedHDF5File(h5py.File(p, "a"))`` kept open), timed per commit, with
``xarray_vhdf5._versions.mutation.mutating`` (every mutation's lock, write counters,
staleness checks and flush), as ``xarray_vhdf5._versions.file`` calls it, replaced in
turn by:

- ``none``: a no-op (the commit unlocked, uncounted, not flushed);
- ``flush``: a no-op followed by ``h5file.flush()`` (what puts a returned commit on disk);
- ``real``: the package's own.

Runs interleave the three, so that the machine's load falls on all alike; the median
commit of each run is printed, then the ratios of the medians of the runs. Unlike
``bench_durability.py --compare`` (two installations), this measures only the sharing
machinery, not what other changes did to the commit since.

Run from the repository root with the development environment active::

    python benchmarks/bench_sharing_ablation.py --days 150 --runs 5
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile

import h5py
import numpy as np
from bench_durability import h5py_level  # the same workload, the same days

from xarray_vhdf5._versions import file as file_module

REAL = file_module.mutating


@contextlib.contextmanager
def _none(h5file, *, moves=False, what="commit"):
    yield


@contextlib.contextmanager
def _flush(h5file, *, moves=False, what="commit"):
    yield
    h5file.flush()


MODES = {"none": _none, "flush": _flush, "real": REAL}


def run(days: int, mode: str) -> float:
    """Median seconds of the daily commits of one run with ``mutating`` as ``mode``."""
    file_module.mutating = MODES[mode]
    try:
        with tempfile.TemporaryDirectory() as folder:
            times = h5py_level(os.path.join(folder, "a.h5"), days, lambda p: h5py.File(p, "a"))
    finally:
        file_module.mutating = REAL
    return float(np.median(times))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=150, help="commits a run (default 150)")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs of each mode (default 5)")
    args = parser.parse_args(argv)
    medians: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.runs):
        for mode in MODES:
            medians[mode].append(run(args.days, mode))
    for mode, values in medians.items():
        shown = ", ".join(f"{v * 1e3:.2f}" for v in values)
        print(f"{mode:6s} median commit per run (ms): {shown}")
    base = float(np.median(medians["none"]))
    for mode in ("flush", "real"):
        print(f"{mode} / none: {float(np.median(medians[mode])) / base:.3f}")


if __name__ == "__main__":
    main()
