"""Checking a file after a kill, in a fresh process: what :func:`~._crash.run_kills` records.

:func:`verify_file` opens the killed child's file the ways a user would
(``VersionedHDF5File``, and for this package ``xr.open_dataset``), hashes every
version, runs :func:`~xarray_vhdf5._versions.check.check_file` and tries the
next commit (:func:`_next_commit`); its result, a dict of plain values, is what
:func:`~._kill_report.classify` compares with the child's ledger.
:func:`blank_verdict` is that dict for a file nothing could be learned from.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from ._crash_child import family, versioned_file_class
from ._kill_report import data_hash

__all__ = ["blank_verdict", "verify_file"]


def blank_verdict() -> dict[str, Any]:
    """What :func:`verify_file` returns of a file nothing could be learned from (not opened, no version).

    The keys of :func:`verify_file`'s result (all but ``journal_left`` and
    ``h5py_probe``, which it sets first), each at its value before anything is
    tried: ``opened`` False, ``open_error`` None, empty collections, the check
    and next-commit results None. A new dict each call.
    """
    return {
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
        "repaired_hashes": None,
        "repair_error": None,
        "repaired_on_open": None,
        "history_hashes": {},
    }


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
        absent); ``repaired_hashes`` (version -> hash after ``vhdf5 check --repair`` of a
        copy, for a file the check found damaged; None otherwise) and ``repair_error``;
        ``next_ok``, ``next_error``, ``next_hash``, ``next_parent``; ``repaired_on_open``
        (the :class:`~xarray_vhdf5.errors.RepairedFileWarning` of ``VersionedHDF5File.open``, which
        repairs what an interrupted flush left: ``versions.openrepair``; None: none);
        ``history_hashes`` (this package: version -> hash of ``x`` and ``y`` as
        ``read_versions`` reads them, from the map log, or the error it raised).
    """
    import h5py

    out = blank_verdict()
    vf_class = versioned_file_class(package)
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
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    with vf_class.open(path) as reader:
                        _ = reader.versions
                said = [str(w.message) for w in caught if type(w.message).__name__ == "RepairedFileWarning"]
                out["repaired_on_open"] = said[0][:500] if said else None
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
            shapes: dict[tuple, list[str]] = {}
            for v in versions:
                try:
                    group = vf[v]
                    x, y = group["x"], group["y"]
                    out["hashes"][v] = data_hash(np.asarray(x[()]), np.asarray(y[()]))
                    shapes.setdefault((x.shape, y.shape), []).append(v)
                    out["parents"][v] = _prev_version(f, v)
                    out["x_chunks"][v] = _chunks_attr(f, v)
                    out["x_compression"][v] = f["_version_data/x/raw_data"].compression
                except Exception as exc:  # noqa: BLE001
                    out["read_errors"][v] = f"{type(exc).__name__}: {exc}"[:300]
    except Exception as exc:  # noqa: BLE001
        out["open_error"] = f"{type(exc).__name__}: {exc}"[:500]
    if package == "xarray_vhdf5" and out["opened"] and out.get("reader_opened"):
        out["history_hashes"] = _history_hashes(vf_class, path, shapes)
    from .._versions.check import check_file

    try:
        report = check_file(path)
        out["check_ok"] = bool(report.ok)
        out["check_errors"] = [str(p) for p in report.errors][:10]
    except Exception as exc:  # noqa: BLE001
        out["check_ok"], out["check_errors"] = False, [f"check_file raised {type(exc).__name__}: {exc}"[:500]]
    if package == "xarray_vhdf5" and out["check_ok"] is False:
        out["repaired_hashes"], out["repair_error"] = _after_repair(path)
    if next_commit is not None:
        try:
            out["next_parent"], out["next_hash"] = _next_commit(package, kind, path, next_commit)
            out["next_ok"] = True
        except Exception as exc:  # noqa: BLE001
            out["next_ok"], out["next_error"] = False, f"{type(exc).__name__}: {exc}"[:500]
    return out


def _history_hashes(vf_class, path: str, shapes: dict[tuple, list[str]]) -> dict[str, str]:
    """Version -> hash of ``x`` and ``y`` read by ``read_versions``, a group of equal shapes at a time."""
    hashes = {}
    with vf_class.open(path) as reader:
        for group in shapes.values():
            try:
                xs, ys = reader.read_versions("x", (), versions=group), reader.read_versions("y", (), versions=group)
            except Exception as exc:  # noqa: BLE001
                hashes.update(dict.fromkeys(group, f"{type(exc).__name__}: {exc}"[:200]))
                continue
            for i, v in enumerate(group):
                hashes[v] = data_hash(xs[i], ys[i])
    return hashes


def _after_repair(path: str) -> tuple[dict[str, str] | None, str | None]:
    """``vhdf5 check --repair`` (its steps, in this process) on a copy of ``path``; the versions' hashes after."""
    import shutil

    import h5py

    from .._versions.check import check_file
    from ..cli._check import _repair_path
    from ._crash_child import versioned_file_class

    copy = path + ".repair"
    shutil.copyfile(path, copy)
    try:
        _repair_path(copy, check_file(copy))
        hashes = {}
        with h5py.File(copy, "r") as f:
            vf = versioned_file_class("xarray_vhdf5")(f)
            for v in vf.versions:
                hashes[v] = data_hash(np.asarray(vf[v]["x"][()]), np.asarray(vf[v]["y"][()]))
        return hashes, None
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"[:300]
    finally:
        os.remove(copy)


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
    if family(kind) == "xr":
        import xarray as xr

        with xr.open_dataset(path, engine="vhdf5") as ds:
            ds = ds.load()
        parent = ds.encoding["vhdf5_version"]
        ds["x"].values[r] = spec["value"]
        ds["y"].values[k0 : k0 + 3] = spec["ivalue"]
        ds.vhdf5.commit(name, path=path)
    else:
        vf_class = versioned_file_class(package)
        with h5py.File(path, "a") as f:
            vf = vf_class(f)
            parent = vf.current_version
            with vf.stage_version(name) as g:
                g["x"][r] = spec["value"]
                g["y"][k0 : k0 + 3] = spec["ivalue"]
    with h5py.File(path, "r") as f:
        group = versioned_file_class(package)(f)[name]
        return parent, data_hash(np.asarray(group["x"][()]), np.asarray(group["y"][()]))
