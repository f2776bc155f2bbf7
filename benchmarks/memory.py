"""Peak memory and file size of a commit workload, measured in a fresh child process.

``measure(workload, impl, tmpdir)`` runs ``python memory.py WORKLOAD IMPL PATH [MDC_BYTES]``
in a subprocess (``MDC_BYTES``: ``workloads.METADATA_CACHE_BYTES``, a fixed metadata
cache size for the file written): the child imports everything, builds the workload's input (the same
seeded arrays as the timed benchmarks), resets the kernel's peak-RSS mark
(``echo 5 > /proc/self/clear_refs``, Linux >= 4.0), runs the workload without
reading its result back, then reads ``VmHWM`` (peak resident set size) from
``/proc/self/status``. The reported *peak RSS growth* is ``VmHWM - VmRSS`` at the
start of the workload: everything the workload made resident, libhdf5's own
allocations (chunk cache, metadata cache, virtual dataset mappings) included,
which ``tracemalloc`` does not see. Only then does the child read the final data
(plain h5py, ``workloads.read_final``) and compare it with the numpy model; the
file size (bytes, ``os.path.getsize``) is taken after the file is closed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _status() -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of this process, bytes."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def _inputs(workload: str):
    """The workload function, its input arrays and the numpy model of its final data."""
    import workloads as w

    if workload == "appends":
        steps = w.append_steps(200)
        return w.appends, (steps,), steps
    if workload == "sparse":
        base, edits = w.sparse_plan(100)
        return w.sparse_edits, (base, edits), w.expected_sparse(base, edits)
    if workload == "bulk":
        base, halves = w.bulk_plan(20)
        return w.bulk_rewrite, (base, halves), w.expected_bulk(base, halves)
    raise ValueError(f"unknown workload {workload!r}: expected appends, sparse or bulk")


def _child(workload: str, impl: str, path: str, metadata_cache_bytes: str | None = None) -> dict:
    import numpy as np
    import workloads as w

    w.METADATA_CACHE_BYTES = int(metadata_cache_bytes) if metadata_cache_bytes else None

    w._versioned_file_class(impl) if impl in ("xarray_vhdf5", "versioned_hdf5") else None  # import now
    trims = _count_trims() if impl == "xarray_vhdf5" else None
    func, args, expected = _inputs(workload)
    _reset_peak()
    before = _status()["VmRSS"]
    func(impl, path, *args, read=False)
    peak = _status()["VmHWM"]
    np.testing.assert_array_equal(w.read_final(impl, path), expected)
    return {
        "peak_rss_growth": peak - before,
        "rss_before": before,
        "file_size": os.path.getsize(path),
        "metadata_trims": trims[0] if trims is not None else None,
    }


def _count_trims() -> list[int]:
    """Count xarray_vhdf5's metadata-cache trims in this process (so a run shows the setting it ran with)."""
    from xarray_vhdf5._versions import file as vfile

    count = [0]
    trim = vfile.trim_metadata_cache

    def counted(*args, **kwargs):
        count[0] += 1
        return trim(*args, **kwargs)

    vfile.trim_metadata_cache = counted
    return count


def measure(
    workload: str,
    impl: str,
    tmpdir: str | os.PathLike,
    metadata_cache_bytes: int | None = None,
    trim_every: int | None = None,
) -> dict:
    """Run ``workload`` (``"appends"``, ``"sparse"`` or ``"bulk"``) for ``impl`` in a child process.

    ``metadata_cache_bytes``: a fixed metadata cache for the file (default:
    libhdf5's adaptive cache). ``trim_every``: xarray_vhdf5's
    ``metadata_trim_every`` (default: the package's).

    Returns ``{"peak_rss_growth": bytes, "rss_before": bytes, "file_size": bytes,
    "metadata_trims": int or None}`` (the trims xarray_vhdf5 made; None for the others).
    Raises ``subprocess.CalledProcessError`` if the child fails (its data check included).
    """
    path = str(Path(tmpdir) / f"mem-{workload}-{impl}-{metadata_cache_bytes or 'default'}-{trim_every}.h5")
    extra = [str(metadata_cache_bytes)] if metadata_cache_bytes else []
    env = dict(os.environ)
    env.pop("VHDF5_BENCH_TRIM_EVERY", None)
    if trim_every:
        env["VHDF5_BENCH_TRIM_EVERY"] = str(trim_every)
    proc = subprocess.run(
        [sys.executable, str(HERE / "memory.py"), workload, impl, path, *extra],
        cwd=str(tmpdir),
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(_child(*sys.argv[1:5])))
