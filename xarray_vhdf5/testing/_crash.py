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
import traceback
from typing import Any

import numpy as np

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

#: The packages compared.
PACKAGES = ("xarray_vhdf5", "versioned_hdf5")

#: Kinds of operation, and the packages that have them.
KINDS = {
    # a file opened with h5py.File(p, "a") once, committed to many times
    "held_open": PACKAGES,
    # the same through xarray_vhdf5._versions.mutation.open_file (journaled), when the package has it
    "held_open_journaled": ("xarray_vhdf5",),
    # with h5py.File(p, "a") as f: ...stage_version(...) per commit
    "open_commit_close": PACKAGES,
    # ds = xr.open_dataset(p).load(); edit; ds.vhdf5.commit(name, path=p)
    "xr_path": ("xarray_vhdf5",),
    # staged = ds.vhdf5.stage() once; edit; staged.vhdf5.commit(name) per commit
    "xr_staged": ("xarray_vhdf5",),
    # alternately an open-commit-close commit and delete_versions of the oldest version
    "delete_versions": PACKAGES,
    # modify_metadata of x: alternately its chunks and its compression
    "modify_metadata": PACKAGES,
    # the same two, the file opened by xarray_vhdf5._versions.mutation.open_file (journaled)
    "delete_versions_journaled": ("xarray_vhdf5",),
    "modify_metadata_journaled": ("xarray_vhdf5",),
}

#: Kinds whose file is opened with ``open_file`` (journaled) instead of ``h5py.File(path, "a")``.
JOURNALED_KINDS = ("held_open_journaled", "delete_versions_journaled", "modify_metadata_journaled")

#: The datasets: x (float64) and y (int64), with their chunks.
X_SHAPE, X_CHUNKS, X_CHUNKS_OTHER = (200, 50), (20, 50), (25, 40)
Y_SIZE, Y_CHUNKS = 4000, (500,)
#: Versions of a template file (v0 .. v4).
TEMPLATE_VERSIONS = 5
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


def available_kinds(package: str) -> list[str]:
    """The kinds of :data:`KINDS` that ``package`` has (:data:`JOURNALED_KINDS` need ``open_file``)."""
    kinds = [k for k, packages in KINDS.items() if package in packages]
    if package == "xarray_vhdf5":
        from .._versions import mutation

        if not hasattr(mutation, "open_file"):
            kinds = [k for k in kinds if k not in JOURNALED_KINDS]
    return kinds


def _open_writable(kind: str, path: str):
    """The file opened for writing as ``kind`` does: ``open_file`` (journaled) or ``h5py.File(path, "a")``."""
    if kind in JOURNALED_KINDS:
        from .._versions.mutation import open_file

        return open_file(path)
    import h5py

    return h5py.File(path, "a")


def _family(kind: str) -> str:
    return "xr" if kind.startswith("xr_") else "h5py"


# ---------------------------------------------------------------------------------------
# data and model


def _edit(arrays: dict[str, np.ndarray], edit: dict) -> dict[str, np.ndarray]:
    x, y = arrays["x"].copy(), arrays["y"].copy()
    x[edit["row"]] = edit["value"]
    y[edit["k0"] : edit["k0"] + 3] = edit["ivalue"]
    return {"x": x, "y": y}


def _commit_edit(seq: int) -> dict:
    """The edit of commit number ``seq``: a row of x and three points of y, values unique to ``seq``."""
    return {
        "row": (seq * 7) % X_SHAPE[0],
        "value": 1000.0 + seq + 0.25,
        "k0": (seq * 13) % (Y_SIZE - 3),
        "ivalue": -(seq + 1),
    }


def template_model() -> dict[str, dict[str, np.ndarray]]:
    """The data of each version of a template file (:func:`build_template`), by version name."""
    base = {
        "x": np.arange(X_SHAPE[0] * X_SHAPE[1], dtype="f8").reshape(X_SHAPE) / 8,
        "y": np.arange(Y_SIZE, dtype="i8") * 3,
    }
    model = {"v0": base}
    for k in range(1, TEMPLATE_VERSIONS):
        model[f"v{k}"] = _edit(model[f"v{k - 1}"], {"row": k * 11, "value": -float(k), "k0": k * 13, "ivalue": -k})
    return model


def build_template(path: str, package: str, family: str) -> None:
    """Write a template file of :data:`TEMPLATE_VERSIONS` versions holding :func:`template_model`.

    Parameters
    ----------
    path : str
        The new file.
    package : str
        ``"xarray_vhdf5"`` or ``"versioned_hdf5"``: whose ``VersionedHDF5File`` writes it.
    family : str
        ``"h5py"`` (``stage_version``, ``create_dataset``) or ``"xr"`` (this
        package's ``ds.vhdf5.commit(path=)``: ``x`` on ``(row, col)``, ``y`` on ``n``).
    """
    import h5py

    model = template_model()
    if family == "xr":
        import xarray as xr

        import xarray_vhdf5  # noqa: F401

        for k in range(TEMPLATE_VERSIONS):
            x = xr.Variable(("row", "col"), model[f"v{k}"]["x"])
            x.encoding["chunks"] = X_CHUNKS
            y = xr.Variable(("n",), model[f"v{k}"]["y"])
            y.encoding["chunks"] = Y_CHUNKS
            xr.Dataset({"x": x, "y": y}).vhdf5.commit(f"v{k}", path=path)
        return
    vf_class = _vf_class(package)
    with h5py.File(path, "w") as f:
        vf = vf_class(f)
        for k in range(TEMPLATE_VERSIONS):
            with vf.stage_version(f"v{k}") as g:
                if k == 0:
                    g.create_dataset("x", data=model["v0"]["x"], chunks=X_CHUNKS)
                    g.create_dataset("y", data=model["v0"]["y"], chunks=Y_CHUNKS)
                else:
                    g["x"][...] = model[f"v{k}"]["x"]
                    g["y"][...] = model[f"v{k}"]["y"]


def _vf_class(package: str):
    if package == "xarray_vhdf5":
        from .._versions.file import VersionedHDF5File

        return VersionedHDF5File
    import versioned_hdf5

    return versioned_hdf5.VersionedHDF5File


# ---------------------------------------------------------------------------------------
# the child


def child_loop(
    package: str,
    kind: str,
    path: str,
    ledger_path: str,
    ready,
    first_seq: int,
    deletable: list[str],
    metadata: dict,
    variant: int,
    max_ops: int = 1000,
) -> None:
    """Run operations of ``kind`` on ``path`` until killed (or ``max_ops`` done).

    Before each operation a ``start`` record is appended to the ledger (not
    synced); after it returned, a ``done`` record, ``fsync``'d. A failed
    operation appends a ``failed`` record and ends the loop.

    Parameters
    ----------
    package : str
        ``"xarray_vhdf5"`` or ``"versioned_hdf5"``.
    kind : str
        One of :data:`KINDS`.
    path, ledger_path : str
        The versioned file and the ledger.
    ready : multiprocessing.Event
        Set once the loop is about to start its first operation.
    first_seq : int
        Number of the first commit (edits and version names derive from it).
    deletable : list of str
        Versions ``delete_versions`` may delete, oldest first (it deletes
        those and the commits it made, never the last one).
    metadata : dict
        ``{"chunks": [...], "compression": str or None}`` of ``x`` now (``modify_metadata``).
    variant : int
        Which operation comes first: for ``delete_versions`` an even variant
        deletes first, an odd one commits first; for ``modify_metadata`` an
        even variant changes the chunks first, an odd one the compression.
    max_ops : int
        Operations before the loop ends by itself.
    """
    import h5py

    ledger = Ledger(ledger_path)
    vf_class = _vf_class(package)
    seq = first_seq
    deletable = list(deletable)
    state = dict(metadata)
    held = staged = None
    if kind == "held_open":
        held = vf_class(h5py.File(path, "a"))
    elif kind == "held_open_journaled":
        from .._versions.mutation import open_file

        held = vf_class(open_file(path))
    elif kind == "xr_staged":
        import xarray as xr

        import xarray_vhdf5  # noqa: F401

        staged = xr.open_dataset(path, engine="vhdf5").vhdf5.stage()
    ledger.append({"phase": "ready", "t": time.monotonic()}, fsync=False)
    ready.set()
    for i in range(max_ops):
        if kind.startswith("delete_versions"):
            op = "delete" if (i + variant) % 2 == 0 and len(deletable) > 1 else "commit"
        elif kind.startswith("modify_metadata"):
            op = "modify"
        else:
            op = "commit"
        record: dict[str, Any] = {"op": op, "i": i}
        try:
            if op == "commit":
                name = f"c{seq:05d}"
                edit = _commit_edit(seq)
                record.update(version=name, seq=seq, **edit)
                _commit(package, kind, path, held, staged, name, edit, record, ledger)
                deletable.append(name)
                seq += 1
            elif op == "delete":
                victim = deletable.pop(0)
                record["versions"] = [victim]
                ledger.append({"phase": "start", "t": time.monotonic(), **record}, fsync=False)
                with _open_writable(kind, path) as f:
                    if package == "xarray_vhdf5":
                        vf_class(f).delete_versions([victim])
                    else:
                        from versioned_hdf5 import delete_versions

                        delete_versions(f, [victim])
            else:
                if (i + variant) % 2 == 0:
                    state["chunks"] = list(X_CHUNKS_OTHER if tuple(state["chunks"]) == X_CHUNKS else X_CHUNKS)
                else:
                    state["compression"] = None if state["compression"] == "gzip" else "gzip"
                record.update(chunks=state["chunks"], compression=state["compression"])
                ledger.append({"phase": "start", "t": time.monotonic(), **record}, fsync=False)
                with _open_writable(kind, path) as f:
                    if package == "xarray_vhdf5":
                        from xarray_vhdf5 import modify_metadata as modify
                    else:
                        import versioned_hdf5

                        modify = versioned_hdf5.modify_metadata
                    modify(f, "x", chunks=tuple(state["chunks"]), compression=state["compression"])
        except Exception as exc:  # noqa: BLE001 - the parent counts it
            ledger.append(
                {
                    "phase": "failed",
                    "t": time.monotonic(),
                    **record,
                    "error": f"{type(exc).__name__}: {exc}"[:500],
                    "tb": traceback.format_exc()[-1500:],
                }
            )
            return
        ledger.append({"phase": "done", "t": time.monotonic(), **record})


def _commit(package, kind, path, held, staged, name, edit, record, ledger) -> None:
    def start():
        ledger.append({"phase": "start", "t": time.monotonic(), **record}, fsync=False)

    r, k0 = edit["row"], edit["k0"]
    if kind in ("held_open", "held_open_journaled"):
        record["parent"] = held.current_version
        start()
        with held.stage_version(name) as g:
            g["x"][r] = edit["value"]
            g["y"][k0 : k0 + 3] = edit["ivalue"]
    elif kind in ("open_commit_close", "delete_versions", "delete_versions_journaled"):
        vf_class = _vf_class(package)
        start()  # the open is part of the operation
        with _open_writable(kind, path) as f:
            vf = vf_class(f)
            record["parent"] = vf.current_version
            with vf.stage_version(name) as g:
                g["x"][r] = edit["value"]
                g["y"][k0 : k0 + 3] = edit["ivalue"]
    elif kind == "xr_path":
        import xarray as xr

        with xr.open_dataset(path, engine="vhdf5") as ds:
            ds = ds.load()
        record["parent"] = ds.encoding["vhdf5_version"]
        x, y = ds["x"].values.copy(), ds["y"].values.copy()
        x[r] = edit["value"]
        y[k0 : k0 + 3] = edit["ivalue"]
        ds["x"].values[...] = x
        ds["y"].values[...] = y
        start()
        ds.vhdf5.commit(name, path=path)
    elif kind == "xr_staged":
        record["parent"] = staged.encoding["vhdf5_version"]
        staged["x"].variable[r] = edit["value"]
        staged["y"].variable[k0 : k0 + 3] = edit["ivalue"]
        start()
        staged.vhdf5.commit(name)
    else:
        raise ValueError(f"no commit for kind {kind!r}")


# ---------------------------------------------------------------------------------------
# checking a file after a kill (in a fresh process)


def verify_file(package: str, kind: str, path: str, xr_versions: list[str], next_commit: dict | None) -> dict:
    """Open ``path`` the ways a user would after a crash; hash every version; try the next commit.

    Run in a fresh process (libhdf5 may crash on damaged metadata).

    Parameters
    ----------
    package : str
        Whose ``VersionedHDF5File`` opens the file and makes the next commit.
    kind : str
        The kind of the killed loop (``xr_*`` kinds commit the next one through xarray).
    path : str
        The file.
    xr_versions : list of str
        Versions also read through ``xr.open_dataset(engine="vhdf5")`` (this package only).
    next_commit : dict or None
        ``{"version": name, **edit}`` of the commit to try after the checks.

    Returns
    -------
    dict
        ``opened`` (bool) and ``open_error``; ``versions``, ``current``, ``parents``,
        ``hashes`` (version -> :func:`data_hash`), ``x_chunks`` and ``x_compression``
        (version -> ``x``'s chunks and compression); ``read_errors`` (version -> message);
        ``xr_opened``, ``xr_error``, ``xr_hashes``, ``xr_read_errors``; for this package
        also ``journal_left`` (a journal was beside the file), ``h5py_probe`` (``"ok"`` or
        the error of ``VersionedHDF5File(h5py.File(path, "r"))`` before anything rolled
        back) and ``reader_opened`` (``VersionedHDF5File.open``; None when absent);
        ``check_ok``, ``check_errors``
        (:func:`~xarray_vhdf5._versions.check.check_file`; ``None`` when the module is
        absent); ``next_ok``, ``next_error``, ``next_hash``, ``next_parent``.
    """
    import h5py

    out: dict[str, Any] = {
        "opened": False,
        "open_error": None,
        "versions": [],
        "current": None,
        "parents": {},
        "hashes": {},
        "x_chunks": {},
        "x_compression": {},
        "read_errors": {},
        "xr_opened": None,
        "xr_error": None,
        "xr_hashes": {},
        "xr_read_errors": {},
        "check_ok": None,
        "check_errors": [],
        "next_ok": None,
        "next_error": None,
        "next_hash": None,
        "next_parent": None,
    }
    vf_class = _vf_class(package)
    out["journal_left"] = os.path.exists(path + "-journal")
    out["h5py_probe"] = None
    if package == "xarray_vhdf5":
        # VersionedHDF5File(h5py.File(path, "r")) before anything rolled an interrupted commit back
        try:
            with h5py.File(path, "r") as f:
                _ = vf_class(f).versions
            out["h5py_probe"] = "ok"
        except Exception as exc:  # noqa: BLE001
            out["h5py_probe"] = f"{type(exc).__name__}: {exc}"[:300]
        # then the way the package says to open a file after a crash: its reader, which rolls back
        out["reader_opened"] = None  # no VersionedHDF5File.open in this version of the package
        if callable(getattr(vf_class, "open", None)):
            try:
                with vf_class.open(path) as reader:
                    _ = reader.versions
                out["reader_opened"] = True
            except Exception as exc:  # noqa: BLE001
                out["reader_opened"], out["reader_error"] = False, f"{type(exc).__name__}: {exc}"[:300]
        import xarray as xr

        import xarray_vhdf5  # noqa: F401

        try:
            with xr.open_dataset(path, engine="vhdf5") as ds:
                out["xr_hashes"]["<current>"] = data_hash(ds["x"].values, ds["y"].values)
            out["xr_opened"] = True
        except Exception as exc:  # noqa: BLE001
            out["xr_opened"], out["xr_error"] = False, f"{type(exc).__name__}: {exc}"[:500]
        for v in xr_versions if out["xr_opened"] else ():
            try:
                with xr.open_dataset(path, engine="vhdf5", version=v) as ds:
                    out["xr_hashes"][v] = data_hash(ds["x"].values, ds["y"].values)
            except Exception as exc:  # noqa: BLE001
                out["xr_read_errors"][v] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        with h5py.File(path, "r") as f:
            vf = vf_class(f)
            versions = list(vf.versions) if package == "xarray_vhdf5" else _their_versions(vf)
            out["versions"] = versions
            out["current"] = vf.current_version
            out["opened"] = True
            for v in versions:
                try:
                    group = vf[v]
                    x, y = group["x"], group["y"]
                    out["hashes"][v] = data_hash(np.asarray(x[()]), np.asarray(y[()]))
                    out["parents"][v] = _prev_version(f, v)
                    out["x_chunks"][v] = _chunks_attr(f, v)
                    out["x_compression"][v] = f["_version_data/x/raw_data"].compression
                except Exception as exc:  # noqa: BLE001
                    out["read_errors"][v] = f"{type(exc).__name__}: {exc}"[:300]
    except Exception as exc:  # noqa: BLE001
        out["open_error"] = f"{type(exc).__name__}: {exc}"[:500]
    from .._versions.check import check_file

    try:
        report = check_file(path)
        out["check_ok"] = bool(report.ok)
        out["check_errors"] = [str(p) for p in report.errors][:10]
    except Exception as exc:  # noqa: BLE001
        out["check_ok"], out["check_errors"] = False, [f"check_file raised {type(exc).__name__}: {exc}"[:500]]
    if next_commit is not None:
        try:
            out["next_parent"], out["next_hash"] = _next_commit(package, kind, path, next_commit)
            out["next_ok"] = True
        except Exception as exc:  # noqa: BLE001
            out["next_ok"], out["next_error"] = False, f"{type(exc).__name__}: {exc}"[:500]
    return out


def _their_versions(vf) -> list[str]:
    from versioned_hdf5.versions import all_versions

    return list(all_versions(vf.f))


def _prev_version(f, v: str) -> str | None:
    value = f["_version_data/versions"][v].attrs.get("prev_version")
    if isinstance(value, bytes):
        value = value.decode()
    return None if value is None else str(value)


def _chunks_attr(f, v: str) -> list[int]:
    """The ``chunks`` attribute of ``x``'s virtual dataset in version ``v`` (the format's chunk shape)."""
    return [int(c) for c in f["_version_data/versions"][v]["x"].attrs["chunks"]]


def _next_commit(package: str, kind: str, path: str, spec: dict) -> tuple[str, str]:
    import h5py

    name, r, k0 = spec["version"], spec["row"], spec["k0"]
    if _family(kind) == "xr":
        import xarray as xr

        with xr.open_dataset(path, engine="vhdf5") as ds:
            ds = ds.load()
        parent = ds.encoding["vhdf5_version"]
        ds["x"].values[r] = spec["value"]
        ds["y"].values[k0 : k0 + 3] = spec["ivalue"]
        ds.vhdf5.commit(name, path=path)
    else:
        vf_class = _vf_class(package)
        with h5py.File(path, "a") as f:
            vf = vf_class(f)
            parent = vf.current_version
            with vf.stage_version(name) as g:
                g["x"][r] = spec["value"]
                g["y"][k0 : k0 + 3] = spec["ivalue"]
    with h5py.File(path, "r") as f:
        group = _vf_class(package)(f)[name]
        return parent, data_hash(np.asarray(group["x"][()]), np.asarray(group["y"][()]))


# ---------------------------------------------------------------------------------------
# the parent


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
                runner.arrays[r["version"]] = _edit(runner.arrays[r["parent"]], r)
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
    next_spec = {"version": f"n{next_seq:05d}", **_commit_edit(next_seq)}
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
            interrupted_arrays = _edit(runner.arrays[parent], interrupted)
            expected_interrupted = data_hash(interrupted_arrays["x"], interrupted_arrays["y"])
    # what the next commit must hold: the current version's data plus its edit
    next_expected = None
    parent = result.get("next_parent")
    if parent in runner.arrays:
        arrays = _edit(runner.arrays[parent], next_spec)
        next_expected = data_hash(arrays["x"], arrays["y"])
    elif (
        parent is not None
        and interrupted is not None
        and interrupted_arrays is not None
        and parent == interrupted.get("version")
    ):
        arrays = _edit(interrupted_arrays, next_spec)
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
        runner.arrays[next_spec["version"]] = _edit(base, next_spec)
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
        return {
            "opened": False,
            "open_error": f"the checking process crashed ({exc})",
            "versions": [],
            "current": None,
            "parents": {},
            "hashes": {},
            "x_chunks": {},
            "x_compression": {},
            "read_errors": {},
            "xr_opened": None,
            "xr_error": None,
            "xr_hashes": {},
            "xr_read_errors": {},
            "check_ok": None,
            "check_errors": [],
            "next_ok": None,
            "next_error": None,
            "next_hash": None,
            "next_parent": None,
        }


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
                key = (package, _family(kind))
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
