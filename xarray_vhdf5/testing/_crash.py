"""SIGKILL at a random instant of a commit, a deletion or ``modify_metadata``; classify the damage.

The harness of issue 17's crash runs (``tests/test_concurrency_slow.py``):
:func:`run_kills` starts a child process that runs a loop of one kind of
operation (:data:`KINDS`) on a small versioned file, kills it with ``SIGKILL``
at an instant drawn uniformly over a window that covers its first operation,
and checks the file in a fresh process (:func:`verify_file`):

- does it open (``VersionedHDF5File`` at the h5py level, and for this package
  ``xr.open_dataset(engine="vhdf5")``)?
- is every version committed before the kill bit-for-bit what it was (values
  against a numpy model, and a SHA-256 of each version's data against the one
  read before the kill)? The child appends each operation to a :class:`Ledger`
  (``fsync``'d) only *after* the operation returned, so a returned commit the
  file lacks is counted;
- is the interrupted operation whole or absent (an interrupted commit's
  version either absent or exactly its parent plus its edit; an interrupted
  ``modify_metadata`` leaves every version with the old chunks or every
  version with the new ones; an interrupted deletion leaves its version whole
  or gone)?
- does :func:`~xarray_vhdf5._versions.check.check_file` report an error?
- does the next commit work (and hold what it should)?

The same kills run against versioned-hdf5 2.6 for the kinds it has. The
counts per kind and package come back as a :class:`KillReport`.

Each kill's record says which operation was running when the signal landed
(from the child's ``start`` ledger record without its ``done``), or
``between`` operations (ledger writes, the xarray path's open).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import os
import random
import shutil
import signal
import time

import numpy as np

from ._crash_child import (
    JOURNALED_KINDS,
    KINDS,
    PACKAGES,
    TEMPLATE_VERSIONS,
    X_CHUNKS,
    apply_edit,
    available_kinds,
    build_template,
    child_loop,
    commit_edit,
    family,
    template_model,
)
from ._crash_verify import blank_verdict, verify_file
from ._kill_report import COUNT_COLUMNS, INFORMATIVE_COLUMNS, KillReport, classify, data_hash
from ._processes import Ledger, process_context

__all__ = [
    "COUNT_COLUMNS",
    "INFORMATIVE_COLUMNS",
    "JOURNALED_KINDS",
    "KINDS",
    "PACKAGES",
    "KillReport",
    "available_kinds",
    "build_template",
    "child_loop",
    "classify",
    "data_hash",
    "kills_per_kind",
    "run_kills",
    "template_model",
    "verify_file",
]

#: Files are started again from the template past this many versions.
MAX_VERSIONS = 40
#: Damaged files kept (copied beside the others, with the child's ledger) per package and kind.
KEEP_DAMAGED = 3

_PRELOAD = (
    "h5py",
    "xarray",
    "xarray_vhdf5",
    "xarray_vhdf5.xr._accessor",
    "xarray_vhdf5.xr._reading",
    "versioned_hdf5",
    "xarray_vhdf5.testing._crash",
)


class _Runner:
    """State of one (package, kind) sequence of kills: the file, its model, the window."""

    def __init__(self, package: str, kind: str, workdir: str, template: str):
        self.package, self.kind = package, kind
        self.path = os.path.join(workdir, f"{package}-{kind}.h5")
        self.template = template
        self.first_cycle_s: list[float] = []
        self.resets = 0
        self.kept = 0
        self.seq = 0
        self.reset()

    def reset(self) -> None:
        shutil.copyfile(self.template, self.path)
        if os.path.exists(self.path + "-journal"):  # a damaged file's journal must not roll back the template
            os.remove(self.path + "-journal")
        model = template_model()
        self.arrays = {v: model[v] for v in model}
        self.before = {v: data_hash(a["x"], a["y"]) for v, a in self.arrays.items()}
        self.current = f"v{TEMPLATE_VERSIONS - 1}"
        self.metadata = {"chunks": list(X_CHUNKS), "compression": None}

    def window(self) -> float:
        if not self.first_cycle_s:
            return 0.5
        return min(max(1.25 * float(np.median(self.first_cycle_s)), 0.01), 10.0)


def _run_one(runner: _Runner, ctx, pool_factory, n: int, rng: random.Random, workdir: str) -> dict:
    ledger_path = os.path.join(workdir, f"{runner.package}-{runner.kind}-{n}.ledger")
    ready = ctx.Event()
    first_seq = runner.seq
    deletable = [v for v in runner.arrays if v not in ("v0", runner.current)]
    proc = ctx.Process(
        target=child_loop,
        args=(runner.package, runner.kind, runner.path, ledger_path, ready, first_seq, deletable, runner.metadata, n),
    )
    proc.start()
    window = runner.window()
    delay = rng.uniform(0.0, window)
    if not ready.wait(120):
        proc.kill()
        proc.join()
        raise RuntimeError(f"{runner.package} {runner.kind}: the child never became ready")
    t_ready = time.monotonic()
    time.sleep(max(0.0, t_ready + delay - time.monotonic()))
    killed = proc.exitcode is None
    with contextlib.suppress(ProcessLookupError):  # it ended by itself (max_ops, or a failure)
        os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    shutil.copyfile(runner.path, runner.path + ".killed")  # as the kill left it, kept if damaged
    journal = runner.path + "-journal"
    if os.path.exists(journal):
        shutil.copyfile(journal, runner.path + ".killed-journal")
    elif os.path.exists(runner.path + ".killed-journal"):
        os.remove(runner.path + ".killed-journal")
    records = Ledger(ledger_path).read()
    # ---- what the child did, from its ledger
    returned, deleted = set(), set()
    interrupted = None
    failed = None
    ready_t = next((r["t"] for r in records if r["phase"] == "ready"), t_ready)
    for r in records:
        if r["phase"] == "start":
            interrupted = r
        elif r["phase"] == "done":
            interrupted = None
            if r["op"] == "commit":
                runner.arrays[r["version"]] = apply_edit(runner.arrays[r["parent"]], r)
                returned.add(r["version"])
                runner.current = r["version"]
                runner.seq = max(runner.seq, r["seq"] + 1)
            elif r["op"] == "delete":
                for v in r["versions"]:
                    runner.arrays.pop(v, None)
                    deleted.add(v)
            elif r["op"] == "modify":
                runner.metadata = {"chunks": r["chunks"], "compression": r["compression"]}
            if r["i"] == 0:
                runner.first_cycle_s.append(r["t"] - ready_t)
        elif r["phase"] == "failed":
            failed = r
            interrupted = None
    if interrupted is not None and interrupted["op"] == "commit":
        runner.seq = max(runner.seq, interrupted["seq"] + 1)
    model = {v: data_hash(a["x"], a["y"]) for v, a in runner.arrays.items()}
    current_before = runner.current
    # ---- the next commit, on the version that must be current
    next_seq = runner.seq
    next_spec = {"version": f"n{next_seq:05d}", **commit_edit(next_seq)}
    runner.seq += 1
    xr_versions = []
    if runner.package == "xarray_vhdf5":
        names = sorted(model)
        xr_versions = sorted({*rng.sample(names, min(2, len(names))), runner.current})
    result = _verify(pool_factory, runner, xr_versions, next_spec)
    # an interrupted commit's parent: in its start record, else the file says (prev_version), else the
    # version that was current (the kinds that open the file inside the operation record it later)
    interrupted_arrays = expected_interrupted = None
    if interrupted is not None and interrupted["op"] == "commit":
        parent = interrupted.get("parent") or result["parents"].get(interrupted["version"]) or current_before
        if parent in runner.arrays:
            interrupted_arrays = apply_edit(runner.arrays[parent], interrupted)
            expected_interrupted = data_hash(interrupted_arrays["x"], interrupted_arrays["y"])
    # what the next commit must hold: the current version's data plus its edit
    next_expected = None
    parent = result.get("next_parent")
    if parent in runner.arrays:
        arrays = apply_edit(runner.arrays[parent], next_spec)
        next_expected = data_hash(arrays["x"], arrays["y"])
    elif (
        parent is not None
        and interrupted is not None
        and interrupted_arrays is not None
        and parent == interrupted.get("version")
    ):
        arrays = apply_edit(interrupted_arrays, next_spec)
        next_expected = data_hash(arrays["x"], arrays["y"])
    counts = classify(model, runner.before, returned, deleted, interrupted, expected_interrupted, result, next_expected)
    if failed is not None:
        counts["child_failures"] = 1
        counts["problems"].append(f"child's {failed['op']} failed: {failed['error']}")
    record = {
        "package": runner.package,
        "kind": runner.kind,
        "n": n,
        "running": (
            interrupted["op"] if interrupted is not None else "failed" if failed else "between" if killed else "exited"
        ),
        "delay_ms": round(1e3 * delay, 1),
        "window_ms": round(1e3 * window, 1),
        "killed_alive": killed,
        "versions": len(result["versions"]),
        **counts,
    }
    # ---- carry the verified state into the next kill, or start again from the template
    damaged = any(counts[k] for k in COUNT_COLUMNS if k not in INFORMATIVE_COLUMNS)
    if damaged or not result["opened"] or len(result["versions"]) > MAX_VERSIONS:
        if damaged and runner.kept < KEEP_DAMAGED:
            kept = os.path.join(workdir, f"damaged-{runner.package}-{runner.kind}-{n}.h5")
            shutil.copyfile(runner.path + ".killed", kept)
            if os.path.exists(runner.path + ".killed-journal"):
                shutil.copyfile(runner.path + ".killed-journal", kept + "-journal")
            shutil.copyfile(ledger_path, kept + ".ledger")
            runner.kept += 1
            record["kept"] = kept
        runner.reset()
        runner.resets += 1
        record["reset"] = True
        return record
    record["reset"] = False
    present = set(result["versions"])
    if interrupted is not None:
        if interrupted["op"] == "commit" and interrupted["version"] in present:
            # its data are known: else classify counted it partial, and the runner was reset above
            assert interrupted_arrays is not None
            runner.arrays[interrupted["version"]] = interrupted_arrays
        elif interrupted["op"] == "delete":
            for v in interrupted["versions"]:
                if v not in present:
                    runner.arrays.pop(v, None)
        elif interrupted["op"] == "modify":
            any_version = next(iter(present))
            runner.metadata = {
                "chunks": result["x_chunks"][any_version],
                "compression": result["x_compression"][any_version],
            }
    if result["next_ok"]:
        assert parent is not None  # the next commit says on which version it was made
        base = interrupted_arrays if parent == (interrupted or {}).get("version") else runner.arrays[parent]
        assert base is not None  # the interrupted commit's data are known (as above)
        runner.arrays[next_spec["version"]] = apply_edit(base, next_spec)
        runner.current = next_spec["version"]
    runner.before = {v: data_hash(a["x"], a["y"]) for v, a in runner.arrays.items()}
    return record


def _verify(pool_factory, runner: _Runner, xr_versions, next_spec) -> dict:
    pool = pool_factory()
    try:
        future = pool.submit(verify_file, runner.package, runner.kind, runner.path, xr_versions, next_spec)
        return future.result(timeout=600)
    except concurrent.futures.process.BrokenProcessPool as exc:
        pool_factory(reset=True)
        return {**blank_verdict(), "open_error": f"the checking process crashed ({exc})"}


def run_kills(
    workdir: str,
    kills_per_kind: int,
    *,
    packages: tuple[str, ...] = PACKAGES,
    kinds: tuple[str, ...] | None = None,
    seed: int = 0,
    progress=None,
) -> KillReport:
    """Kill ``kills_per_kind`` children per (package, kind) and classify what each kill did.

    Parameters
    ----------
    workdir : str
        A directory for the files, templates and ledgers.
    kills_per_kind : int
        Kills per kind and package.
    packages : tuple of str
        Among :data:`PACKAGES`.
    kinds : tuple of str, optional
        Among :data:`KINDS` (default: every kind each package has, :func:`available_kinds`).
    seed : int
        Seeds the kill instants and the versions read through xarray.
    progress : callable, optional
        ``progress(record)`` after each kill.

    Returns
    -------
    KillReport
    """
    wall = time.monotonic()
    ctx = process_context(_PRELOAD)
    pools: list[concurrent.futures.ProcessPoolExecutor] = []

    def pool_factory(reset: bool = False):
        if reset or not pools:
            if pools:
                pools.pop().shutdown(wait=False, cancel_futures=True)
            pools.append(concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx, max_tasks_per_child=1))
        return pools[-1]

    rng = random.Random(seed)
    report = KillReport()
    try:
        runners = []
        templates: dict[tuple[str, str], str] = {}
        for package in packages:
            for kind in kinds or available_kinds(package):
                if kind not in available_kinds(package):
                    continue
                key = (package, family(kind))
                if key not in templates:
                    templates[key] = os.path.join(workdir, f"template-{package}-{key[1]}.h5")
                    pool_factory().submit(build_template, templates[key], package, key[1]).result()
                runners.append(_Runner(package, kind, workdir, templates[key]))
        for n in range(kills_per_kind):
            for runner in runners:  # interleaved: a slow phase of the machine touches every kind alike
                record = _run_one(runner, ctx, pool_factory, n, rng, workdir)
                report.kills.append(record)
                if progress is not None:
                    progress(record)
    finally:
        for pool in pools:
            pool.shutdown(wait=True)
    report.wall_seconds = time.monotonic() - wall
    return report


def kills_per_kind(total: int) -> int:
    """Kills per kind so that this package's kinds get ``total`` kills in all (rounded up)."""
    return math.ceil(total / len(available_kinds("xarray_vhdf5")))
