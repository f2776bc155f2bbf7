"""Versioning workloads, each implemented four ways (the commit workloads five), for side-by-side benchmarks.

Implementations (``IMPLEMENTATIONS``):

- ``"xarray_vhdf5"``: this package's ``VersionedHDF5File``;
- ``"versioned_hdf5"``: versioned-hdf5 2.6 (PyPI), the same API;
- ``"floor"``: the *format floor*, a plain h5py script doing only what the format
  requires per version: hash the changed chunks (SHA-256), append the new ones to
  raw_data and their rows to hash_table, create the version group and its virtual
  dataset with one mapping per chunk (h5py's low-level API), and write the attributes
  ``docs/format.md`` lists (the group's ``prev_version``, ``committed`` first False then True,
  ``timestamp``, the virtual dataset's ``raw_data`` and ``chunks``, ``largest_index``,
  ``current_version``). No staging, no
  validation, no reading back: the cost any implementation of the format pays;
- ``"lean_floor"``: the same operations as ``"floor"``, each made the cheapest way
  this project knows from Python (:class:`LeanFloor`: raw_data and hash-table rows,
  virtual mappings and attributes through xarray_vhdf5's compiled calls into
  libhdf5). The bound of the issue-6 targets measured against versioned-hdf5
  (``bench_bounds.py``); the appends, sparse-edit and bulk-rewrite workloads only;
- ``"h5py"``: plain h5py without versions (edit one dataset in place): the
  absolute limit.

Every workload returns the final array so the benchmark can check it against a
numpy model (``expected_*``); with ``read=False`` it returns None (the memory
measurement reads the final data after its measurement, ``read_final``).
Shapes, chunks and counts are the ones of issues 4
and 6 and are documented in ``benchmarks/README.md``.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Callable

import h5py
import numpy as np
from h5py import h5d, h5g, h5o, h5p, h5s, h5t

from xarray_vhdf5._backend.h5attrs import write_attr
from xarray_vhdf5._backend.rows import write_rows
from xarray_vhdf5._backend.virtual import create_virtual_dataset_id

IMPLEMENTATIONS = ("xarray_vhdf5", "versioned_hdf5", "floor", "h5py")

#: When set (bytes), the commit workloads give the files they write a metadata cache
#: of this fixed size (``h5py.File.id.set_mdc_config``) instead of libhdf5's
#: adaptive default (2 MiB at first). The memory benchmark uses it to show what
#: bounds the peak memory of an ingest: libhdf5 keeps each new virtual dataset's
#: decoded layout in that cache, which is sized by the layout's bytes on disk.
METADATA_CACHE_BYTES: int | None = None
#: Environment variable: when set, xarray_vhdf5's ``VersionedHDF5File`` trims libhdf5's
#: metadata cache every this many commits (``metadata_trim_every``) instead of its default.
TRIM_EVERY_ENV = "VHDF5_BENCH_TRIM_EVERY"


def _create(path: str) -> h5py.File:
    """``h5py.File(path, "w")``, with :data:`METADATA_CACHE_BYTES` applied."""
    f = h5py.File(path, "w")
    if METADATA_CACHE_BYTES:
        config = f.id.get_mdc_config()
        config.set_initial_size = True
        config.initial_size = config.max_size = METADATA_CACHE_BYTES
        config.min_size = min(config.min_size, METADATA_CACHE_BYTES)
        f.id.set_mdc_config(config)
    return f


def _versioned_file_class(impl: str):
    if impl == "xarray_vhdf5":
        from xarray_vhdf5 import VersionedHDF5File

        trim_every = os.environ.get(TRIM_EVERY_ENV)
        if trim_every:  # memory.py's trimmed runs: metadata-cache trims every N commits
            return functools.partial(VersionedHDF5File, metadata_trim_every=int(trim_every))
    else:
        from versioned_hdf5 import VersionedHDF5File
    return VersionedHDF5File


class FormatFloor:
    """Minimal writer of the versioned-hdf5 format for one n-d dataset ``x``."""

    def __init__(
        self, f: h5py.File, shape, chunks, dtype, fill=0, *, name: str = "x", versions: h5py.Group | None = None
    ):
        self.f = f
        self.name = name
        self.chunks = tuple(chunks)
        self.dtype = np.dtype(dtype)
        grp = f.create_group(f"_version_data/{name}")
        if versions is None:  # the file's first dataset
            versions = f.create_group("_version_data/versions")
            versions.create_group("__first_version__").attrs["timestamp"] = "1970-01-01 00:00:00.000000+0000"
            versions.attrs["current_version"] = "__first_version__"
            versions.attrs["data_version"] = 4
        self.versions = versions
        self.raw = grp.create_dataset(
            "raw_data", shape=(0, *chunks[1:]), chunks=chunks, maxshape=(None, *chunks[1:]), dtype=dtype, fillvalue=fill
        )
        self.raw.attrs["chunks"] = chunks
        dt = np.dtype([("hash", "u1", (32,)), ("shape", "<i8", (2,))])
        self.hash_table = grp.create_dataset(
            "hash_table", shape=(1,), dtype=dt, chunks=(4096,), maxshape=(None,), compression="lzf"
        )
        self.n_rows = 0
        self.hashes: dict[bytes, int] = {}
        self.mapping: dict[tuple, tuple[int, tuple]] = {}  # chunk index -> (raw row, trimmed shape)
        self.shape = tuple(shape)
        self.prev = "__first_version__"

    def commit(self, name: str, shape, changed: dict[tuple, np.ndarray]) -> None:
        """``changed``: chunk index -> the chunk's edge-trimmed data."""
        self.shape = tuple(shape)
        new = self._hash(changed)
        if new:
            self._append_chunks(new)
            self._append_hash_rows(new)
        self._create_version(name)
        self.prev = name

    def _hash(self, changed: dict[tuple, np.ndarray]) -> list[tuple[int, np.ndarray, bytes]]:
        """Hash the changed chunks, map them; ``(row, chunk, digest)`` of those not stored yet."""
        new = []
        for index, chunk in changed.items():
            h = hashlib.sha256(np.ascontiguousarray(chunk).data)
            h.update(str(chunk.shape).encode("ascii"))
            digest = h.digest()
            row = self.hashes.get(digest)
            if row is None:
                row = self.n_rows
                self.hashes[digest] = row
                self.n_rows += 1
                new.append((row, chunk, digest))
            self.mapping[index] = (row, chunk.shape)
        # drop chunks beyond a shrunk shape
        grid = [math.ceil(s / c) for s, c in zip(self.shape, self.chunks)]
        for index in [i for i in self.mapping if any(a >= g for a, g in zip(i, grid))]:
            del self.mapping[index]
        return new

    def _hash_rows(self, new) -> np.ndarray:
        c0 = self.chunks[0]
        rows = np.zeros(len(new), self.hash_table.dtype)
        rows["hash"] = np.frombuffer(b"".join(d for _, _, d in new), np.uint8).reshape(-1, 32)
        rows["shape"] = [(r * c0, r * c0 + ch.shape[0]) for r, ch, _ in new]
        return rows

    def _append_chunks(self, new) -> None:
        c0 = self.chunks[0]
        self.raw.resize((self.n_rows * c0, *self.chunks[1:]))
        for row, chunk, _ in new:
            self.raw[(slice(row * c0, row * c0 + chunk.shape[0]), *(slice(0, s) for s in chunk.shape[1:]))] = chunk

    def _append_hash_rows(self, new) -> None:
        self.hash_table.resize((self.n_rows,))
        self.hash_table[self.n_rows - len(new) : self.n_rows] = self._hash_rows(new)
        self.hash_table.attrs["largest_index"] = self.n_rows

    def _create_version(self, name: str) -> None:
        grp = self._new_version_group(name, self.prev)
        self._create_vds(grp)
        grp.attrs["committed"] = True
        self.versions.attrs["current_version"] = name

    def _new_version_group(self, name: str, prev: str) -> h5py.Group:
        grp = self.versions.create_group(name)
        # ``docs/format.md``: created with committed=False and its timestamp, marked committed last.
        grp.attrs["prev_version"] = prev
        grp.attrs["committed"] = False
        grp.attrs["timestamp"] = "1970-01-01 00:00:00.000000+0000"
        return grp

    def _create_vds(self, grp: h5py.Group) -> None:
        """This dataset's virtual dataset in version group ``grp``, one mapping per stored chunk."""
        c0 = self.chunks[0]
        raw_path = f"/_version_data/{self.name}/raw_data"
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_layout(h5d.VIRTUAL)
        vspace = h5s.create_simple(self.shape, self.shape)
        src = self.raw.id.get_space()
        for index, (row, cshape) in self.mapping.items():
            vspace.select_hyperslab(tuple(i * c for i, c in zip(index, self.chunks)), cshape)
            src.select_hyperslab((row * c0,) + (0,) * (len(cshape) - 1), cshape)
            dcpl.set_virtual(vspace, b".", raw_path.encode(), src)
        vspace.select_all()
        vds = h5d.create(grp.id, self.name.encode(), h5t.py_create(self.dtype), vspace, dcpl=dcpl)
        vds_attrs = h5py.AttributeManager(h5py.Dataset(vds))
        vds_attrs["raw_data"] = raw_path  # ``docs/format.md``: the version dataset's attrs
        vds_attrs["chunks"] = np.asarray(self.chunks, dtype=np.int64)

    def read(self, name: str) -> np.ndarray:
        return self.versions[name][self.name][()]


class LeanFloor(FormatFloor):
    """:class:`FormatFloor`'s operations through xarray_vhdf5's compiled calls into libhdf5.

    Chunk rows and hash-table rows are written by ``backend.rows.write_rows``
    (``H5Sselect_hyperslab`` + ``H5Dwrite``; an edge chunk padded with the fill value
    to whole rows), the virtual dataset by ``backend.virtual.create_virtual_dataset_id``
    (its mappings made in C, its ``raw_data`` and ``chunks`` attributes included),
    the other attributes by ``backend.h5attrs.write_attr``, the version group by
    ``h5g.create``. Hashing, bookkeeping and the order of the operations are the
    floor's. What a per-version cost can come down to when only the format's
    operations are left and each costs what libhdf5 charges for it.
    """

    def __init__(self, f: h5py.File, shape, chunks, dtype, fill=0):
        super().__init__(f, shape, chunks, dtype, fill)
        self.fill = fill

    def _append_chunks(self, new) -> None:
        c0 = self.chunks[0]
        self.raw.id.set_extent((self.n_rows * c0, *self.chunks[1:]))
        for row, chunk, _ in new:
            if chunk.shape[1:] != self.chunks[1:]:  # whole rows: pad the trailing axes
                padded = np.full((chunk.shape[0], *self.chunks[1:]), self.fill, dtype=self.dtype)
                padded[(slice(None), *(slice(0, s) for s in chunk.shape[1:]))] = chunk
                chunk = padded
            write_rows(self.raw.id, row * c0, np.ascontiguousarray(chunk, dtype=self.dtype))

    def _append_hash_rows(self, new) -> None:
        self.hash_table.id.set_extent((self.n_rows,))
        write_rows(self.hash_table.id, self.n_rows - len(new), self._hash_rows(new))
        write_attr(self.hash_table.id, "largest_index", self.n_rows)

    def _create_version(self, name: str) -> None:
        c0 = self.chunks[0]
        gid = h5g.create(self.versions.id, name.encode())
        write_attr(gid, "prev_version", self.prev)
        write_attr(gid, "committed", False)
        write_attr(gid, "timestamp", "1970-01-01 00:00:00.000000+0000")
        chunk_rows = [(index, row * c0, row * c0 + cshape[0]) for index, (row, cshape) in self.mapping.items()]
        create_virtual_dataset_id(gid, self.name, self.raw, self.shape, self.chunks, chunk_rows, fillvalue=self.fill)
        write_attr(gid, "committed", True)
        write_attr(self.versions.id, "current_version", name)


class MultiFloor:
    """The format floor of a file of several datasets, one or some of them changed per version.

    Changed datasets are hashed, stored and mapped as :class:`FormatFloor` does;
    each unchanged one still needs its virtual dataset in the new version
    group, made the cheapest way: ``H5Ocopy`` of the previous version's
    (mappings and attributes copied inside libhdf5).
    """

    def __init__(self, f: h5py.File, names, shape, chunks, dtype):
        first = FormatFloor(f, shape, chunks, dtype, name=names[0])
        self.floors = {names[0]: first}
        for name in names[1:]:
            self.floors[name] = FormatFloor(f, shape, chunks, dtype, name=name, versions=first.versions)
        self.versions = first.versions
        self.prev = "__first_version__"

    def commit(self, version: str, changed: dict[str, dict[tuple, np.ndarray]]) -> None:
        """``changed``: dataset name -> (chunk index -> the chunk's data)."""
        for name, chunks in changed.items():
            floor = self.floors[name]
            new = floor._hash(chunks)
            if new:
                floor._append_chunks(new)
                floor._append_hash_rows(new)
        first = next(iter(self.floors.values()))
        grp = first._new_version_group(version, self.prev)
        for name, floor in self.floors.items():
            if name in changed or self.prev == "__first_version__":
                floor._create_vds(grp)
            else:
                h5o.copy(self.versions[self.prev].id, name.encode(), grp.id, name.encode())
        grp.attrs["committed"] = True
        self.versions.attrs["current_version"] = version
        self.prev = version

    def read(self, version: str, name: str) -> np.ndarray:
        return self.versions[version][name][()]


def _floor(impl: str, f: h5py.File, shape, chunks, dtype) -> FormatFloor:
    """The ``"floor"`` or ``"lean_floor"`` writer of a workload."""
    return (LeanFloor if impl == "lean_floor" else FormatFloor)(f, shape, chunks, dtype)


def _chunk_of(arr: np.ndarray, index: tuple, chunks: tuple) -> np.ndarray:
    return arr[tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, arr.shape))]


# -- appends ------------------------------------------------------------------------
APPEND_SHAPE = (180, 360)
APPEND_CHUNKS = (8, 180, 360)


def append_steps(n: int, seed: int = 0) -> np.ndarray:
    """The ``n`` time steps appended, float32 (n, 180, 360)."""
    return np.random.default_rng(seed).standard_normal((n, *APPEND_SHAPE)).astype("f4")


def appends(impl: str, path: str, steps: np.ndarray, read: bool = True):
    """One version per time step, each growing a (t, 180, 360) float32 by one step."""
    n = len(steps)
    with _create(path) as f:
        if impl == "h5py":
            ds = f.create_dataset(
                "x", shape=(0, *APPEND_SHAPE), maxshape=(None, *APPEND_SHAPE), chunks=APPEND_CHUNKS, dtype="f4"
            )
            for i in range(n):
                ds.resize((i + 1, *APPEND_SHAPE))
                ds[i] = steps[i]
            return ds[()] if read else None
        if impl in ("floor", "lean_floor"):
            fl = _floor(impl, f, (0, *APPEND_SHAPE), APPEND_CHUNKS, "f4")
            for i in range(n):
                k = i // APPEND_CHUNKS[0]
                chunk = steps[k * APPEND_CHUNKS[0] : i + 1]
                fl.commit(f"v{i}", (i + 1, *APPEND_SHAPE), {(k, 0, 0): chunk})
            return fl.read(f"v{n - 1}") if read else None
        vf = _versioned_file_class(impl)(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=steps[:1], chunks=APPEND_CHUNKS)  # versioned datasets always grow
        for i in range(1, n):
            with vf.stage_version(f"v{i}") as g:
                ds = g["x"]
                ds.resize((i + 1, *APPEND_SHAPE))
                ds[i] = steps[i]
        return vf[f"v{n - 1}"]["x"][()] if read else None


# -- sparse edits --------------------------------------------------------------------
SPARSE_SHAPE = (2000, 2000)
SPARSE_CHUNKS = (100, 100)


def sparse_plan(n_versions: int, points: int = 10, seed: int = 1):
    """Base array and, per version, ``points`` random (i, j, value) edits."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(SPARSE_SHAPE)
    edits = [
        (
            rng.integers(0, SPARSE_SHAPE[0], points),
            rng.integers(0, SPARSE_SHAPE[1], points),
            rng.standard_normal(points),
        )
        for _ in range(n_versions)
    ]
    return base, edits


def expected_sparse(base, edits) -> np.ndarray:
    out = base.copy()
    for i, j, v in edits:
        out[i, j] = v
    return out


def sparse_edits(impl: str, path: str, base: np.ndarray, edits, read: bool = True):
    """One version per set of random point edits of a (2000, 2000) float64."""
    with _create(path) as f:
        if impl == "h5py":
            ds = f.create_dataset("x", data=base, chunks=SPARSE_CHUNKS)
            for i, j, v in edits:
                for a, b, c in zip(i, j, v):
                    ds[a, b] = c
            return ds[()] if read else None
        if impl in ("floor", "lean_floor"):
            fl = _floor(impl, f, SPARSE_SHAPE, SPARSE_CHUNKS, "f8")
            grid = tuple(math.ceil(s / c) for s, c in zip(SPARSE_SHAPE, SPARSE_CHUNKS))
            fl.commit("v0", SPARSE_SHAPE, {idx: _chunk_of(base, idx, SPARSE_CHUNKS) for idx in np.ndindex(*grid)})
            current = base.copy()  # the floor stages nothing: it knows the changed chunks
            for n, (i, j, v) in enumerate(edits, 1):
                current[i, j] = v
                touched = {(a // SPARSE_CHUNKS[0], b // SPARSE_CHUNKS[1]) for a, b in zip(i, j)}
                fl.commit(f"v{n}", SPARSE_SHAPE, {idx: _chunk_of(current, idx, SPARSE_CHUNKS) for idx in touched})
            return fl.read(f"v{len(edits)}") if read else None
        vf = _versioned_file_class(impl)(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=base, chunks=SPARSE_CHUNKS)
        for n, (i, j, v) in enumerate(edits, 1):
            with vf.stage_version(f"v{n}") as g:
                ds = g["x"]
                for a, b, c in zip(i, j, v):
                    ds[a, b] = c
        return vf[f"v{len(edits)}"]["x"][()] if read else None


# -- bulk rewrite ---------------------------------------------------------------------
BULK_SHAPE = (1000, 1000)
BULK_CHUNKS = (100, 100)  # 100 chunks of 80 kB; each half is 50 whole chunks


def bulk_plan(n_versions: int, seed: int = 2):
    """Base array (1000, 1000) float64 and, per version, the new (500, 1000) half.

    Version ``k`` (1-based) overwrites rows ``0:500`` when ``k`` is odd and
    ``500:1000`` when it is even: half of the array, 50 of the 100 chunks,
    every value new (no chunk deduplicates).
    """
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(BULK_SHAPE)
    halves = rng.standard_normal((n_versions, BULK_SHAPE[0] // 2, BULK_SHAPE[1]))
    return base, halves


def bulk_rows(k: int) -> slice:
    """Rows that version ``k`` (1-based) overwrites."""
    h = BULK_SHAPE[0] // 2
    return slice(0, h) if k % 2 else slice(h, 2 * h)


def expected_bulk(base, halves) -> np.ndarray:
    out = base.copy()
    for k, half in enumerate(halves, 1):
        out[bulk_rows(k)] = half
    return out


def bulk_rewrite(impl: str, path: str, base: np.ndarray, halves: np.ndarray, read: bool = True):
    """One version per rewrite of half of a (1000, 1000) float64, chunks (100, 100)."""
    with _create(path) as f:
        if impl == "h5py":
            ds = f.create_dataset("x", data=base, chunks=BULK_CHUNKS)
            for k, half in enumerate(halves, 1):
                ds[bulk_rows(k)] = half
            return ds[()] if read else None
        if impl in ("floor", "lean_floor"):
            fl = _floor(impl, f, BULK_SHAPE, BULK_CHUNKS, "f8")
            grid = tuple(math.ceil(s / c) for s, c in zip(BULK_SHAPE, BULK_CHUNKS))
            fl.commit("v0", BULK_SHAPE, {idx: _chunk_of(base, idx, BULK_CHUNKS) for idx in np.ndindex(*grid)})
            c0, c1 = BULK_CHUNKS
            for k, half in enumerate(halves, 1):
                r0 = bulk_rows(k).start // c0
                changed = {
                    (r0 + a, b): half[a * c0 : (a + 1) * c0, b * c1 : (b + 1) * c1]
                    for a in range(half.shape[0] // c0)
                    for b in range(grid[1])
                }
                fl.commit(f"v{k}", BULK_SHAPE, changed)
            return fl.read(f"v{len(halves)}") if read else None
        vf = _versioned_file_class(impl)(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=base, chunks=BULK_CHUNKS)
        for k, half in enumerate(halves, 1):
            with vf.stage_version(f"v{k}") as g:
                g["x"][bulk_rows(k)] = half
        return vf[f"v{len(halves)}"]["x"][()] if read else None


def run(workload: Callable, impl: str, path: str, *args):
    return workload(impl, path, *args)


def read_final(impl: str, path: str) -> np.ndarray:
    """The final data of a workload's file, read with plain h5py.

    ``impl == "h5py"``: dataset ``x``; otherwise the virtual dataset ``x`` of
    the current version (``_version_data/versions`` attribute ``current_version``).
    """
    with h5py.File(path, "r") as f:
        if impl == "h5py":
            return f["x"][()]
        versions = f["_version_data/versions"]
        return versions[versions.attrs["current_version"]]["x"][()]


# -- many versions -------------------------------------------------------------------
MANY_SHAPE = (1000,)
MANY_CHUNKS = (100,)


def many_versions_file(impl: str, path: str, n: int = 1000):
    """Write ``n`` versions each changing one point of a (1000,) float64, 1 s apart.

    Returns the numpy model: ``model[k]`` is version ``v{k}``'s data. For
    ``impl == "h5py"`` the file holds ``n`` plain datasets ``d{k}`` instead.
    """
    import datetime as dt

    rng = np.random.default_rng(3)
    current = np.zeros(MANY_SHAPE)
    model = []
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    with h5py.File(path, "w") as f:
        vf = None if impl == "h5py" else _versioned_file_class(impl)(f)
        for k in range(n):
            i = int(rng.integers(0, MANY_SHAPE[0]))
            current[i] = k + 1.0
            model.append(current.copy())
            if vf is None:
                f.create_dataset(f"d{k}", data=current, chunks=MANY_CHUNKS)
                continue
            with vf.stage_version(f"v{k}", timestamp=t0 + dt.timedelta(seconds=k)) as g:
                if k == 0:
                    g.create_dataset("x", data=current, chunks=MANY_CHUNKS)
                else:
                    g["x"][i] = k + 1.0
    return model
