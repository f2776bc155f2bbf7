"""Space after deleting versions: reuse by later commits, repack, h5repack, modify_metadata (issue 21).

What it measures (file sizes from ``os.stat``, in MB = 1e6 bytes):

1. **Reuse.** A history of ``N`` versions, each rewriting all of one dataset
   (``CHUNKS`` chunks of 32 KiB uncompressed), one ``h5py.File(path, "a")``
   session per commit as a daily job does. Every other version is deleted,
   then 50 more versions are committed; their growth of the file is compared
   with the growth of a twin file on which nothing was deleted ("without
   reuse"). Rows: the file created by libhdf5's default (freed space
   forgotten at close) or with ``fs_persist=True``; raw_data truncated by the
   deletion or its freed rows kept (``keep_freed``); uncompressed or
   gzip-1+shuffle data (rounded normal values, which compress to about 45%).
2. **Repack.** The file after the deletion, repacked (``repack``), against a
   file freshly written with the kept versions only; and what ``h5repack``
   (Debian's, HDF5 1.10) makes of the same file: its size, whether every kept
   version still reads right through the copied virtual datasets, and how many
   rows of raw_data it kept.
3. **modify_metadata** of a ~60 MB dataset (new chunk shape): the file
   before and after, through a plain h5py handle (the old raw_data is freed
   after the new one is written: twice the size) and through ``open_file``
   (journaled: rewritten into the old raw_data's bytes).

Left out: timing (see bench_versions_delete.py), netCDF files with many
variables, files on other file systems.

Run: ``python benchmarks/bench_space.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

from xarray_vhdf5 import VersionedHDF5File, modify_metadata
from xarray_vhdf5._versions.delete import delete_keeping_space
from xarray_vhdf5._versions.repack import repack

ROWS = 4096  # float64 rows per chunk: 32 KiB
GZIP = {"compression": "gzip", "compression_opts": 1, "shuffle": True}
DEB = "/tmp/deb18/usr"


def _data(i: int, chunks: int) -> np.ndarray:
    return np.round(np.random.default_rng(i).normal(0, 1, ROWS * chunks), 2)


def commit(path, i: int, chunks: int, filters=None) -> None:
    with h5py.File(path, "a") as h:
        vf = VersionedHDF5File(h)
        with vf.stage_version(f"v{i}") as g:
            if "x" in g:
                g["x"][:] = _data(i, chunks)
            else:
                g.create_dataset("x", data=_data(i, chunks), chunks=(ROWS,), **(filters or {}))


def build(path, versions, chunks: int, filters, persist: bool) -> None:
    kw = {"fs_strategy": "fsm", "fs_persist": True, "fs_threshold": 1} if persist else {}
    h5py.File(path, "w", **kw).close()
    for i in versions:
        commit(path, i, chunks, filters)


def reuse_row(tmp, n, chunks, filters, persist, keep_freed, label) -> dict:
    p, twin = os.path.join(tmp, f"{label}.h5"), os.path.join(tmp, f"{label}_twin.h5")
    build(p, range(n), chunks, filters, persist)
    shutil.copy(p, twin)
    size = os.path.getsize(p)
    with h5py.File(p, "a") as h:
        delete_keeping_space(h, [f"v{i}" for i in range(1, n, 2)], keep_freed=keep_freed)
    deleted = os.path.getsize(p)
    for i in range(n, n + n // 2):
        commit(p, i, chunks)
        commit(twin, i, chunks)
    grown, grown_twin = os.path.getsize(p) - deleted, os.path.getsize(twin) - size
    return {
        "label": label,
        "size": size,
        "deleted": deleted,
        "grown": grown,
        "grown_twin": grown_twin,
        "ratio": grown / grown_twin,
    }


def _deb(tool: str, *args: str) -> subprocess.CompletedProcess | None:
    exe = f"{DEB}/bin/{tool}"
    if not os.path.exists(exe):
        return None
    env = dict(os.environ, LD_LIBRARY_PATH=f"{DEB}/lib/x86_64-linux-gnu")
    return subprocess.run([exe, *args], capture_output=True, text=True, env=env)


def _reads_right(path, kept, chunks) -> bool:
    try:
        with h5py.File(path, "r") as h:
            vf = VersionedHDF5File(h)
            return all(np.array_equal(vf[f"v{i}"]["x"][:], _data(i, chunks)) for i in kept)
    except Exception:  # noqa: BLE001 any failure to read back counts as a damaged file
        return False


def repack_rows(tmp, n, chunks, filters) -> list[dict]:
    rows = []
    kept = list(range(0, n, 2))
    fresh = os.path.join(tmp, "fresh.h5")
    build(fresh, kept, chunks, filters, False)
    for keep_freed in (False, True):
        p = os.path.join(tmp, f"del_{int(keep_freed)}.h5")
        build(p, range(n), chunks, filters, False)
        with h5py.File(p, "a") as h:
            delete_keeping_space(h, [f"v{i}" for i in range(1, n, 2)], keep_freed=keep_freed)
        deleted = os.path.getsize(p)
        h5r = os.path.join(tmp, f"h5repack_{int(keep_freed)}.h5")
        done = _deb("h5repack", p, h5r)
        h5r_size = os.path.getsize(h5r) if done is not None and done.returncode == 0 else None
        h5r_ok = _reads_right(h5r, kept, chunks) if h5r_size else None
        h5r_rows = None
        if h5r_size:
            with h5py.File(h5r, "r") as h:
                h5r_rows = h["_version_data/x/raw_data"].shape[0]
                vds = h["_version_data/versions/v0/x"]
                sources = sorted({s.file_name for s in vds.virtual_sources()})
        report = repack(p)
        rows.append(
            {
                "keep_freed": keep_freed,
                "deleted": deleted,
                "repacked": report.size_after,
                "fresh": os.path.getsize(fresh),
                "ratio": report.size_after / os.path.getsize(fresh),
                "ok": _reads_right(p, kept, chunks),
                "h5repack": h5r_size,
                "h5repack_ok": h5r_ok,
                "h5repack_rows": h5r_rows,
                "rows": n // 2 * chunks * ROWS,
                "vds_sources": sources if h5r_size else None,
            }
        )
    return rows


def metadata_row(tmp, mb: int, journaled: bool) -> dict:
    from xarray_vhdf5 import open_file

    p = os.path.join(tmp, f"meta_{int(journaled)}.h5")
    n = mb * 1_000_000 // 8
    with h5py.File(p, "w") as h:
        vf = VersionedHDF5File(h)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.random.default_rng(0).random(n), chunks=(2**16,))
    before = os.path.getsize(p)
    with open_file(p) if journaled else h5py.File(p, "a") as h:
        modify_metadata(h, "x", chunks=(2**17,))
    return {"before": before, "after": os.path.getsize(p)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 versions of 4 chunks, a 10 MB metadata file")
    args = ap.parse_args(argv)
    n, chunks, mb = (20, 4, 10) if args.quick else (100, 8, 60)
    mb_ = 1e6
    with tempfile.TemporaryDirectory() as tmp:
        print(f"1. reuse: {n} versions x {chunks} chunks of 32 KiB, every other deleted, then {n // 2} commits")
        print(f"{'file':32s} {'size':>8s} {'deleted':>8s} {'grown':>8s} {'no-reuse':>9s} {'ratio':>6s}")
        for fname, filters in (("raw", None), ("gzip", GZIP)):
            for persist in (False, True):
                for keep_freed in (False, True):
                    label = (
                        f"{fname} {'fs_persist' if persist else 'default'} {'keep_freed' if keep_freed else 'truncate'}"
                    )
                    r = reuse_row(tmp, n, chunks, filters, persist, keep_freed, label.replace(" ", "_"))
                    print(
                        f"{label:32s} {r['size'] / mb_:8.2f} {r['deleted'] / mb_:8.2f} {r['grown'] / mb_:8.2f} "
                        f"{r['grown_twin'] / mb_:9.2f} {r['ratio']:6.3f}",
                        flush=True,
                    )
        print(f"\n2. repack after deleting every other of {n} versions (gzip), vs a fresh file of the kept ones")
        for r in repack_rows(tmp, n, chunks, GZIP):
            print(
                f"keep_freed={r['keep_freed']!s:5s} deleted {r['deleted'] / mb_:.2f} "
                f"-> repack {r['repacked'] / mb_:.2f} "
                f"(fresh {r['fresh'] / mb_:.2f}, x{r['ratio']:.3f}, reads right: {r['ok']})"
            )
            if r["h5repack"] is not None:
                print(
                    f"    h5repack: {r['h5repack'] / mb_:.2f} MB, reads right: {r['h5repack_ok']}, raw_data rows "
                    f"{r['h5repack_rows']} (live {r['rows']}), VDS sources {r['vds_sources']}"
                )
        print(f"\n3. modify_metadata (chunks 2**16 -> 2**17) of a {mb} MB dataset")
        for journaled in (False, True):
            r = metadata_row(tmp, mb, journaled)
            opener = "open_file (journaled, in place)" if journaled else "h5py.File(path, 'a')"
            print(
                f"{opener:34s} {r['before'] / mb_:.1f} MB -> {r['after'] / mb_:.1f} MB "
                f"(x{r['after'] / r['before']:.2f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
