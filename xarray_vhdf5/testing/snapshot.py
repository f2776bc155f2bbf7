"""Everything a versioned file stores, as plain Python values, to compare two files.

The parity tests (``tests/test_parity*.py``) play one scenario with
versioned-hdf5 2.6 and with xarray_vhdf5 and compare :func:`snapshot` of the
two files with :func:`assert_same`: the raw_data of every dataset (its
points, dtype, chunking, filters and fill value), its hash table rows and
``largest_index``, the version DAG (``current_version``, ``prev_version``,
``committed``, optionally timestamps), the user attributes of every group
and dataset, and for each version's virtual dataset its shape, dtype,
fill value, ``chunks`` / ``raw_data`` attributes, the raw_data row that
each chunk maps to, and its points.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import h5py
import numpy as np

from .._backend.chunks import chunk_grid_shape
from .._backend.layout import BOOKKEEPING, DATASET_ATTRS, FIRST_VERSION, VERSION_ATTRS, VERSION_DATA, VERSIONS
from .._versions.objects import dataset_paths, read_chunk_map

__all__ = ["MODULES", "assert_same", "play", "raw_rows", "snapshot", "without_fill_chunks"]


def _plain(value: Any) -> Any:
    """Attribute values as comparable Python / numpy values (bytes and str kept apart)."""
    if isinstance(value, np.ndarray):
        return value.tolist() if value.dtype.kind != "O" else [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _attrs(obj: h5py.HLObject, skip: Iterable[str] = ()) -> dict[str, Any]:
    skip = set(skip)
    return {k: _plain(obj.attrs[k]) for k in sorted(obj.attrs) if k not in skip}


def raw_rows(f: h5py.File, name: str) -> int:
    """Rows of ``_version_data/<name>/raw_data`` (its length along axis 0)."""
    return f[VERSION_DATA][name]["raw_data"].shape[0]


def _raw(f: h5py.File, name: str) -> dict[str, Any]:
    group = f[VERSION_DATA][name]
    raw = group["raw_data"]
    table = group["hash_table"]
    n = int(table.attrs["largest_index"]) if "largest_index" in table.attrs else table.shape[0]
    rows = table[:n]
    points = raw[()]
    c0 = raw.chunks[0]
    # Stored chunks by digest: row order in raw_data is free (versioned-hdf5 appends
    # new chunks in the order they were first written, xarray_vhdf5 in C order).
    stored = {}
    for r in rows:
        start, stop = (int(x) for x in r["shape"])
        stored[bytes(r["hash"]).hex()] = (stop - start, points[start : start + c0])
    return {
        "dtype": raw.dtype,
        "rows": raw.shape[0],
        "row_shape": raw.shape[1:],
        "chunks": raw.chunks,
        "maxshape": raw.maxshape,
        "fillvalue": _plain(raw.fillvalue),
        "compression": raw.compression,
        "compression_opts": raw.compression_opts,
        "shuffle": raw.shuffle,
        "fletcher32": raw.fletcher32,
        "scaleoffset": raw.scaleoffset,
        "stored": stored,
        "largest_index": _plain(table.attrs.get("largest_index")),
        "hash_table_shape": table.shape,
        "hash_table_dtype": table.dtype,
        "attrs": _attrs(raw),
    }


def _digests_by_row(f: h5py.File, raw_name: str) -> dict[int, str]:
    table = f[raw_name].parent["hash_table"]
    n = int(table.attrs["largest_index"]) if "largest_index" in table.attrs else table.shape[0]
    return {int(r["shape"][0]): bytes(r["hash"]).hex() for r in table[:n]}


def _version(f: h5py.File, group: h5py.Group, timestamps: bool) -> dict[str, Any]:
    skip = set(VERSION_ATTRS) - {"prev_version", "committed"} - ({"timestamp"} if timestamps else set())
    out: dict[str, Any] = {"attrs": _attrs(group, skip=skip), "tree": {}}

    def visit(path: str, obj) -> None:
        if isinstance(obj, h5py.Group):
            out["tree"][path] = {"group_attrs": _attrs(obj)}
            return
        raw_name = obj.attrs["raw_data"]
        raw_name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
        chunks = tuple(int(c) for c in obj.attrs["chunks"])
        flat, starts = read_chunk_map(obj, chunks, raw_name)
        by_row = _digests_by_row(f, raw_name)
        out["tree"][path] = {
            "shape": obj.shape,
            "dtype": obj.dtype,
            "maxshape": obj.maxshape,
            "fillvalue": _plain(obj.fillvalue),
            "chunks_attr": chunks,
            "raw_data_attr": raw_name,
            # chunk index -> digest of the raw_data chunk it maps (None: not in the hash table)
            "chunk_map": {c: by_row.get(r) for c, r in zip(flat.tolist(), starts.tolist())},
            "points": obj[()],
            "attrs": _attrs(obj, skip=DATASET_ATTRS),
        }

    group.visititems(visit)
    return out


def snapshot(f: h5py.File, *, timestamps: bool = False) -> dict[str, Any]:
    """Everything the versioned file ``f`` stores, as nested dicts (see the module docs).

    Parameters
    ----------
    f : h5py.File
        A file holding ``_version_data``.
    timestamps : bool
        Include the versions' ``timestamp`` attributes (only meaningful when the
        scenario passed explicit timestamps to ``stage_version``).
    """
    versions = f[VERSION_DATA][VERSIONS]
    return {
        "current_version": _plain(versions.attrs["current_version"]),
        "data_version": _plain(versions.attrs.get("data_version")),
        "versions": {name: _version(f, versions[name], timestamps) for name in versions if name != FIRST_VERSION},
        "datasets": {name: _raw(f, name) for name in sorted(dataset_paths(f))},
        # this package's bookkeeping group is not part of the format (versioned-hdf5 ignores it)
        "top_level": sorted(k for k in f if k not in (VERSION_DATA, BOOKKEEPING)),
    }


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind == "f":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _diffs(a: Any, b: Any, where: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                out.append(f"{where}/{key}: only in {'first' if key in a else 'second'}")
            else:
                _diffs(a[key], b[key], f"{where}/{key}", out)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b) or type(a) is not type(b):
            out.append(f"{where}: {a!r:.300} != {b!r:.300}")
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                _diffs(x, y, f"{where}[{i}]", out)
    elif not _equal(a, b):
        out.append(f"{where}: {a!r:.300} != {b!r:.300}")


def assert_same(a: dict[str, Any], b: dict[str, Any], what: str = "snapshots") -> None:
    """Raise AssertionError listing every path where two snapshots differ (exact types too)."""
    out: list[str] = []
    _diffs(a, b, "", out)
    if out:
        raise AssertionError(f"{what} differ at {len(out)} places:\n  " + "\n  ".join(out[:40]))


#: The two implementations a parity scenario is played with.
MODULES = ("versioned_hdf5", "xarray_vhdf5")


def play(
    scenario, directory, modules: Iterable[str] = MODULES, *, timestamps: bool = False
) -> dict[str, tuple[Any, dict]]:
    """Play ``scenario(module, h5py_file)`` once per module, each in a new file.

    Returns ``{module name: (what the scenario returned, snapshot of its file)}``;
    the snapshot is taken after the file was closed and reopened read-only.
    """
    import importlib
    from pathlib import Path

    out = {}
    for name in modules:
        module = importlib.import_module(name)
        path = Path(directory) / f"{scenario.__name__}-{name}.h5"
        with h5py.File(path, "w") as f:
            result = scenario(module, f)
        with h5py.File(path, "r") as f:
            out[name] = (result, snapshot(f, timestamps=timestamps))
    return out


def _region_is_fill(points: np.ndarray, chunk: int, chunks: tuple[int, ...], fillvalue: Any) -> bool:
    grid = chunk_grid_shape(points.shape, chunks)
    index = np.unravel_index(chunk, grid)
    region = points[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks))]
    fill = np.full(region.shape, fillvalue, dtype=region.dtype)
    return bool(np.array_equal(region, fill, equal_nan=region.dtype.kind in "fc"))


def without_fill_chunks(snap: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``snap`` without the chunks entirely of the fill value.

    versioned-hdf5 2.6 stores an all-fill *edge* chunk, xarray_vhdf5 none
    (docs/format.md, "Commit rules"): with those dropped from every version's
    chunk map and from the stored chunks (and the row counts, which they change,
    left out), snapshots of the same history compare equal.
    """
    import copy

    out = copy.deepcopy(snap)
    fill_only: dict[str, set[str]] = {}
    used: dict[str, set[str]] = {}
    for version in out["versions"].values():
        for entry in version["tree"].values():
            if "chunk_map" not in entry:
                continue
            raw = entry["raw_data_attr"].removeprefix(f"/{VERSION_DATA}/").removesuffix("/raw_data")
            keep = {}
            for chunk, digest in entry["chunk_map"].items():
                if _region_is_fill(entry["points"], chunk, entry["chunks_attr"], entry["fillvalue"]):
                    fill_only.setdefault(raw, set()).add(digest)
                else:
                    keep[chunk] = digest
                    used.setdefault(raw, set()).add(digest)
            entry["chunk_map"] = keep
    for name, raw in out["datasets"].items():
        for digest in fill_only.get(name, set()) - used.get(name, set()):
            raw["stored"].pop(digest, None)
        for key in ("rows", "largest_index", "hash_table_shape"):
            raw.pop(key)
    return out
