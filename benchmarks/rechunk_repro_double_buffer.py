"""Regression check: a resplit holds one buffer, not the previous one too, while it reads the next (issue 22).

Found while benchmarking the resplit executor as it stood in the working tree
before its first commit: ``resplit_into`` iterated ``for w in iter_resplit(...)``
and the loop variable ``w`` kept the last ``OutputWrite`` alive while the
generator allocated and read the next buffer; its ``data`` was a view of the
previous buffer, so two buffers were resident at once. On the 2.2 GB record of
``bench_rechunk.py`` (chunks (1, 360, 720) to (365, 16, 16), 512 MB) the peak
RSS growth was 761 MB against a predicted 380 MB; dropping the write
(``del w``) gave 382 MB. Commit bdc4267 (the executor allocates its buffer
once and reuses it) fixed it: both ways below now measure the prediction.

Run each way in a fresh process (``into`` takes an optional writer thread count)::

    python benchmarks/rechunk_repro_double_buffer.py into 1  # resplit_into, one writer
    python benchmarks/rechunk_repro_double_buffer.py into 2  # resplit_into, two writer threads
    python benchmarks/rechunk_repro_double_buffer.py del     # iter_resplit loop with del w

Before the fix ``into`` printed about 144 MB, ``del`` 80 MB (the prediction).
"""

import sys

import numpy as np

from xarray_vhdf5.resplit import iter_resplit, plan_resplit, resplit_into


def status(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


class Sink:
    """A target that keeps nothing; checks each write's values."""

    dtype = np.dtype(np.float32)

    def __setitem__(self, region, data):
        want = np.arange(region[0].start, region[0].stop, dtype=np.float32)[:, None, None]
        assert (data == want).all()


def read(index):
    """A fresh input chunk per read, as a file reader returns: time step i holds i."""
    return np.full((1, 2000, 2000), index[0], dtype=np.float32)


shape = (16, 2000, 2000)  # 256 MB of float32 in chunks (1, 2000, 2000) = 16 MB
plan = plan_resplit(shape, (1, 2000, 2000), (4, 100, 100), 4, "100MB")  # buffer: 4 input chunks, 64 MB
base = status("VmRSS")
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")  # reset VmHWM
if sys.argv[1] == "into":
    resplit_into(plan, read, Sink(), **({"threads": int(sys.argv[2])} if len(sys.argv) > 2 else {}))
else:
    for w in iter_resplit(plan, read, np.float32, pieces=True):
        Sink()[w.region] = w.data
        del w
growth = status("VmHWM") - base
print(f"{sys.argv[1:]}: peak RSS growth {growth / 1e6:.0f} MB; plan.predicted_peak {plan.predicted_peak / 1e6:.0f} MB")
