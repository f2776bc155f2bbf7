"""What icechunk's rebase does to two sessions writing different points of one chunk.

Run with icechunk 1.1.x (the newest that installs on Python 3.11), not in this
package's venv::

    python3.11 -m venv /tmp/icechunk-venv
    /tmp/icechunk-venv/bin/pip install 'icechunk<1.2' zarr xarray
    /tmp/icechunk-venv/bin/python benchmarks/icechunk_rebase.py

An in-memory repository holds one (8,) float64 array in one chunk of 8 points,
all zeros. Two writable sessions start from the same snapshot: "theirs" sets
point 1 to 1.0 and commits; "ours" sets point 6 to 6.0 and commits second,
rebasing with each of icechunk's conflict solvers:

- ``ConflictDetector()``: refuses (a chunk written on both sides is a conflict);
- ``BasicConflictSolver(on_chunk_conflict=VersionSelection.UseOurs)``: keeps
  our chunk whole, so their point 1 goes back to 0.0;
- ``BasicConflictSolver(on_chunk_conflict=VersionSelection.UseTheirs)``: keeps
  their chunk whole, so our point 6 stays 0.0.

The same with chunks of 4 points (the two points in different chunks) is the
control: every solver keeps both. For each solver the script prints the committed values and which side's point
was lost. A chunk-level solver has no point to merge, only a chunk to pick;
``xarray_vhdf5._versions.merge`` merges the two points (both survive) and
raises ``ConflictError`` only for a point written on both sides to different
values.
"""

from __future__ import annotations

import icechunk
import numpy as np
import zarr


def _repo(chunk: int) -> icechunk.Repository:
    repo = icechunk.Repository.create(icechunk.in_memory_storage())
    session = repo.writable_session("main")
    root = zarr.group(store=session.store)
    root.create_array("x", shape=(8,), chunks=(chunk,), dtype="f8", fill_value=0.0)
    root["x"][:] = np.zeros(8)
    session.commit("base")
    return repo


def run(solver_name: str, solver, chunk: int = 8) -> dict:
    """Both sessions' commits with ``solver``; the values committed last and what was lost.

    ``chunk``: points per chunk (8: both points in one chunk; 4: in two).
    """
    repo = _repo(chunk)
    theirs = repo.writable_session("main")
    ours = repo.writable_session("main")
    zarr.open_group(store=theirs.store)["x"][1] = 1.0
    theirs.commit("theirs: point 1")
    zarr.open_group(store=ours.store)["x"][6] = 6.0
    outcome = "committed"
    try:
        ours.commit("ours: point 6", rebase_with=solver)
    except (icechunk.ConflictError, icechunk.RebaseFailedError) as exc:
        outcome = f"refused: {type(exc).__name__}"
    values = zarr.open_group(store=repo.readonly_session(branch="main").store, mode="r")["x"][:]
    lost = [side for side, i, v in (("theirs", 1, 1.0), ("ours", 6, 6.0)) if values[i] != v]
    if outcome != "committed":
        lost = ["nothing (ours not committed)"]
    return {"solver": solver_name, "outcome": outcome, "values": values.tolist(), "lost": lost}


def main() -> None:
    print(f"icechunk {icechunk.__version__}, zarr {zarr.__version__}")
    solvers = {
        "ConflictDetector()": icechunk.ConflictDetector(),
        "BasicConflictSolver(UseOurs)": icechunk.BasicConflictSolver(
            on_chunk_conflict=icechunk.VersionSelection.UseOurs
        ),
        "BasicConflictSolver(UseTheirs)": icechunk.BasicConflictSolver(
            on_chunk_conflict=icechunk.VersionSelection.UseTheirs
        ),
    }
    for chunk in (8, 4):
        print(f"points 1 (theirs) and 6 (ours), chunks of {chunk} points:")
        for name, solver in solvers.items():
            r = run(name, solver, chunk)
            lost = ", ".join(r["lost"]) or "nothing"
            print(f"  {r['solver']:32s} {r['outcome']:30s} x = {r['values']}  lost: {lost}")


if __name__ == "__main__":
    main()
