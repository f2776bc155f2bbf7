"""The workload of the crash runs: what the child killed by :func:`~._crash.run_kills` does.

The kinds of operation (:data:`KINDS`) and the packages that have them, the
template file every sequence of kills starts from (:func:`build_template`,
:func:`template_model`: two datasets, :data:`TEMPLATE_VERSIONS` versions), and
:func:`child_loop`, the loop of one kind of operation that runs in the child
until it is killed, writing a ``start`` and (``fsync``'d, after the operation
returned) a ``done`` record of each operation to the :class:`~._processes.Ledger`.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

import numpy as np

from ._processes import Ledger

__all__ = [
    "JOURNALED_KINDS",
    "KINDS",
    "PACKAGES",
    "TEMPLATE_VERSIONS",
    "apply_edit",
    "available_kinds",
    "build_template",
    "child_loop",
    "commit_edit",
    "family",
    "template_model",
    "versioned_file_class",
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
    # the daily ingest: one row of x a commit, today.vhdf5.commit(name, path=p, append_dim="row")
    "xr_append": ("xarray_vhdf5",),
    # alternately an open-commit-close commit and delete_versions of the oldest version
    "delete_versions": PACKAGES,
    # modify_metadata of x: alternately its chunks and its compression
    "modify_metadata": PACKAGES,
    # the same two, the file opened by xarray_vhdf5._versions.mutation.open_file (journaled)
    "delete_versions_journaled": ("xarray_vhdf5",),
    "modify_metadata_journaled": ("xarray_vhdf5",),
    # rechunk(f, "x", chunks, in_place=False) through open_file: new raw_data after the end of the file
    "rechunk_grow_journaled": ("xarray_vhdf5",),
}

#: Kinds whose file is opened with ``open_file`` (journaled) instead of ``h5py.File(path, "a")``.
JOURNALED_KINDS = (
    "held_open_journaled",
    "delete_versions_journaled",
    "modify_metadata_journaled",
    "rechunk_grow_journaled",
)

#: The datasets: x (float64) and y (int64), with their chunks.
X_SHAPE, X_CHUNKS, X_CHUNKS_OTHER = (200, 50), (5, 25), (25, 40)  # 80 chunks (a stored map, the map log), 16
Y_SIZE, Y_CHUNKS = 4000, (500,)
#: Versions of a template file (v0 .. v4).
TEMPLATE_VERSIONS = 5


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


def family(kind: str) -> str:
    """``"xr"`` for the kinds that commit through xarray, else ``"h5py"``."""
    return "xr" if kind.startswith("xr_") else "h5py"


def apply_edit(arrays: dict[str, np.ndarray], edit: dict) -> dict[str, np.ndarray]:
    """``arrays`` (the model of a version) with ``edit`` (:func:`commit_edit`) applied: a new dict.

    An edit with ``append`` adds a row of ``value`` to x and leaves y; the others
    set row ``row`` of x and three points of y.
    """
    if edit.get("append"):
        return {"x": np.concatenate([arrays["x"], np.full((1, X_SHAPE[1]), edit["value"])]), "y": arrays["y"]}
    x, y = arrays["x"].copy(), arrays["y"].copy()
    x[edit["row"]] = edit["value"]
    y[edit["k0"] : edit["k0"] + 3] = edit["ivalue"]
    return {"x": x, "y": y}


def commit_edit(seq: int, append: bool = False) -> dict:
    """The edit of commit number ``seq``: a row of x and three points of y, values unique to ``seq``
    (``append``: a new row of x of that value instead, :func:`apply_edit`)."""
    edit = {
        "row": (seq * 7) % X_SHAPE[0],
        "value": 1000.0 + seq + 0.25,
        "k0": (seq * 13) % (Y_SIZE - 3),
        "ivalue": -(seq + 1),
    }
    return {**edit, "append": True} if append else edit


def template_model() -> dict[str, dict[str, np.ndarray]]:
    """The data of each version of a template file (:func:`build_template`), by version name."""
    base = {
        "x": np.arange(X_SHAPE[0] * X_SHAPE[1], dtype="f8").reshape(X_SHAPE) / 8,
        "y": np.arange(Y_SIZE, dtype="i8") * 3,
    }
    model = {"v0": base}
    for k in range(1, TEMPLATE_VERSIONS):
        model[f"v{k}"] = apply_edit(model[f"v{k - 1}"], {"row": k * 11, "value": -float(k), "k0": k * 13, "ivalue": -k})
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
    vf_class = versioned_file_class(package)
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


def versioned_file_class(package: str):
    """``VersionedHDF5File`` of ``package`` (this one or versioned-hdf5)."""
    if package == "xarray_vhdf5":
        from .._versions.file import VersionedHDF5File

        return VersionedHDF5File
    import versioned_hdf5

    return versioned_hdf5.VersionedHDF5File


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
    vf_class = versioned_file_class(package)
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
    elif kind == "xr_append":  # imported, and a first Dataset made, before the kill window opens
        import xarray as xr

        from xarray_vhdf5.xr import _accessor, _append  # noqa: F401

        xr.Dataset({"x": (("row", "col"), np.zeros((1, 1)))})  # its first costs 0.5 s of xarray's lazy setup
    ledger.append({"phase": "ready", "t": time.monotonic()}, fsync=False)
    ready.set()
    for i in range(max_ops):
        if kind.startswith("delete_versions"):
            op = "delete" if (i + variant) % 2 == 0 and len(deletable) > 1 else "commit"
        elif kind.startswith(("modify_metadata", "rechunk_grow")):
            op = "modify"
        else:
            op = "commit"
        record: dict[str, Any] = {"op": op, "i": i}
        try:
            if op == "commit":
                name = f"c{seq:05d}"
                edit = commit_edit(seq, append=kind == "xr_append")
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
                if (i + variant) % 2 == 0 or kind == "rechunk_grow_journaled":
                    state["chunks"] = list(X_CHUNKS_OTHER if tuple(state["chunks"]) == X_CHUNKS else X_CHUNKS)
                else:
                    state["compression"] = None if state["compression"] == "gzip" else "gzip"
                record.update(chunks=state["chunks"], compression=state["compression"])
                ledger.append({"phase": "start", "t": time.monotonic(), **record}, fsync=False)
                with _open_writable(kind, path) as f:
                    _modify(package, kind, f, state)
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


def _modify(package: str, kind: str, f, state: dict) -> None:
    """Give x the chunks and compression of ``state``: ``modify_metadata``, or ``rechunk(in_place=False)``."""
    chunks = tuple(state["chunks"])
    if kind == "rechunk_grow_journaled":
        from xarray_vhdf5 import rechunk

        rechunk(f, "x", chunks, in_place=False)
        return
    if package == "xarray_vhdf5":
        from xarray_vhdf5 import modify_metadata as modify
    else:
        import versioned_hdf5

        modify = versioned_hdf5.modify_metadata
    modify(f, "x", chunks=chunks, compression=state["compression"])


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
        vf_class = versioned_file_class(package)
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
    elif kind == "xr_append":
        import h5py
        import xarray as xr

        import xarray_vhdf5  # noqa: F401

        from .._backend.h5attrs import read_attr

        with h5py.File(path, "r") as f:  # the one writer is this process: the version it committed last
            record["parent"] = str(read_attr(f["_version_data/versions"].id, "current_version"))
        today = xr.Dataset({"x": (("row", "col"), np.full((1, X_SHAPE[1]), edit["value"]))})
        start()
        today.vhdf5.commit(name, path=path, append_dim="row")
    elif kind == "xr_staged":
        record["parent"] = staged.encoding["vhdf5_version"]
        staged["x"].variable[r] = edit["value"]
        staged["y"].variable[k0 : k0 + 3] = edit["ivalue"]
        start()
        staged.vhdf5.commit(name)
    else:
        raise ValueError(f"no commit for kind {kind!r}")
