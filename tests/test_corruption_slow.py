"""Random damage to a small versioned file: every damaged copy is diagnosed, none is silently misread.

A file of four versions and three datasets (gzip, lzf and uncompressed) is
damaged 100 ways, seeded: 50 truncations at random lengths and 50 single bytes
changed at random offsets. Each damaged copy is read, every version's every
dataset, through ``VersionedHDF5File`` and through ``xr.open_dataset(engine="vhdf5")``,
in a forked child (libhdf5 crashes the process on some damaged metadata), and
checked with ``check_file(rehash=True)`` (through ``vhdf5 check``'s crash-surviving
runner). Each case is one of:

(a) every read returned the known-good values and the check found nothing;
(b) a read raised an exception (or crashed the reading process);
(c) no read raised, and the check reported a problem;
(d) a read returned wrong values without an exception and the check reported
    nothing: silent wrong values, which must never happen.

Run with ``pytest -m slow tests/test_corruption_slow.py -s`` to see the counts
and the exception types the damaged files raise.
"""

from __future__ import annotations

import collections
import faulthandler
import multiprocessing
import re
import warnings

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5._versions.check import CheckReport, corrupt_file_error
from xarray_vhdf5.cli._check import run_check, run_repair
from xarray_vhdf5.errors import CorruptFileError, NotHDF5Error, NotVersionedError

pytestmark = pytest.mark.slow

VERSIONS = ("v1", "v2", "v3", "v4")
#: Datasets by group (the xarray engine opens one group at a time).
GROUPS = {"": ("temp", "count"), "qc": ("flags",)}
SEED = 20261125
CASES = 50


def build(path) -> None:
    """Four versions of a gzip'd 2-d float32 (NaN fill), an uncompressed int64 and an lzf'd uint8 in a group."""
    rng = np.random.default_rng(7)
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset(
                "temp",
                data=rng.normal(15, 5, (24, 8)).astype("f4"),
                chunks=(6, 4),
                compression="gzip",
                fillvalue=np.float32(np.nan),
            )
            g.create_dataset("count", data=np.arange(200, dtype="i8"), chunks=(32,))
            g.create_dataset("qc/flags", data=rng.integers(0, 255, 300).astype("u1"), chunks=(64,), compression="lzf")
            g["temp"].attrs["units"] = "degC"
        with vf.stage_version("v2") as g:
            g["temp"][3, :] = -1.0
            g["count"].resize((260,))
            g["count"][200:] = np.arange(60) * 7
        with vf.stage_version("v3") as g:
            g["qc/flags"][::50] = 0
            g["temp"].resize((30, 8))
            g["temp"][24:] = 99.5
        with vf.stage_version("v4") as g:
            g["count"][5] = -5


def read_everything(path) -> tuple[dict, list[tuple[tuple, BaseException]]]:
    """``{(route, version, dataset): values}`` and the exceptions raised, reading every version's datasets."""
    values, raised = {}, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a warning is not what is measured here
        try:
            with h5py.File(path, "r") as f:
                vf = xv.VersionedHDF5File(f)
                for v in VERSIONS:
                    for group, names in GROUPS.items():
                        for name in names:
                            key = ("h5py", v, f"{group}/{name}".strip("/"))
                            try:
                                values[key] = np.asarray(vf[v][key[2]][()])
                            except Exception as exc:  # noqa: BLE001 every error a corrupt file raises is collected
                                raised.append((key, exc))
        except Exception as exc:  # noqa: BLE001 every error a corrupt file raises is collected
            raised.append((("h5py", "open"), exc))
        for v in VERSIONS:
            for group, names in GROUPS.items():
                try:
                    with xr.open_dataset(path, engine="vhdf5", version=v, group=group or None) as ds:
                        for name in names:
                            key = ("xarray", v, f"{group}/{name}".strip("/"))
                            try:
                                values[key] = np.asarray(ds[name].values)
                            except Exception as exc:  # noqa: BLE001 every error a corrupt file raises is collected
                                raised.append((key, exc))
                except Exception as exc:  # noqa: BLE001 every error a corrupt file raises is collected
                    raised.append((("xarray", v, group), exc))
    return values, raised


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def _read_in_child(conn, path, good) -> None:
    faulthandler.disable()  # pytest's: a crash here is expected, and counted
    values, raised = read_everything(path)
    wrong = sorted(k for k, v in values.items() if k in good and not same(v, good[k]))
    conn.send(
        (
            wrong,
            [
                (
                    key,
                    type(exc).__name__,
                    str(exc)[:160],
                    corrupt_file_error(path, exc) is not None,
                    isinstance(exc, CorruptFileError),
                )
                for key, exc in raised
            ],
        )
    )
    conn.close()


def read_isolated(path, good):
    """``(wrong keys, raised)`` read in a forked child; None when libhdf5 crashed it."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_read_in_child, args=(send, str(path), good), daemon=True)
    proc.start()
    send.close()
    try:
        result = recv.recv()
    except EOFError:
        result = None
    proc.join()
    return result, proc.exitcode


def repair_and_recheck(path, report: CheckReport, good: dict) -> str:
    """Repair ``path`` (as ``vhdf5 check --repair``); what became of it, in a few words.

    Every version the report did not find damaged must still read its known-good values.
    """
    failed = ""
    try:
        run_repair(str(path), report)
    except Exception as exc:  # noqa: BLE001 e.g. libhdf5 crashed the repairing process: each step left a valid file
        failed = f"failed ({type(exc).__name__}), "
    kept = [v for v in VERSIONS if v not in report.damaged_versions]
    result, _ = read_isolated(path, {k: v for k, v in good.items() if k[1] in kept})
    if result is None:
        return f"lost: {failed}reading a kept version crashed"
    wrong, errors = result
    lost = wrong + [key for key, *_ in errors if key[1] in kept or key[1] not in VERSIONS]
    if lost:
        return f"lost: {failed}kept versions read wrong or fail {lost[:3]}"
    after = run_check(str(path), True, None)
    return failed + ("file whole" if after.ok else "kept versions read right, problems left")


def damaged_copies(data: bytes):
    rng = np.random.default_rng(SEED)
    for _ in range(CASES):
        n = int(rng.integers(0, len(data)))
        yield f"truncated to {n} bytes", data[:n]
    for _ in range(CASES):
        at, xor = int(rng.integers(0, len(data))), int(rng.integers(1, 256))
        flipped = bytearray(data)
        flipped[at] ^= xor
        yield f"byte {at} ^= {xor:#04x}", bytes(flipped)


def test_damaged_copies_are_never_silently_misread(tmp_path):
    good_path = tmp_path / "good.h5"
    build(good_path)
    good, raised = read_everything(good_path)
    assert not raised and len(good) == 2 * len(VERSIONS) * 3
    assert run_check(str(good_path), True, None).problems == []
    data = good_path.read_bytes()
    counts: collections.Counter = collections.Counter()
    exceptions: collections.Counter = collections.Counter()
    crashes: list[str] = []
    silent: list[str] = []
    for i, (what, damaged) in enumerate(damaged_copies(data)):
        path = tmp_path / f"case{i}.h5"
        path.write_bytes(damaged)
        result, code = read_isolated(path, good)
        try:
            report = run_check(str(path), True, None)
            reported, check = bool(report.problems), report
        except (NotHDF5Error, NotVersionedError) as exc:  # what check_file may raise, by design
            reported, check = True, exc
        if isinstance(check, CheckReport) and check.needs_repair and check.versions_checked:
            counts[f"repair: {repair_and_recheck(path, check, good)}"] += 1
        if result is None:
            crashes.append(f"{what}: reading crashed (exit {code}); check: {str(check).splitlines()[-1]}")
            wrong, errors = [], [("crash",)]
        else:
            wrong, errors = result
            for key, kind, message, classified, ours in errors:
                message = re.sub(r"\d+", "N", message.replace(str(tmp_path), "..."))
                exceptions[(key[0], kind, message, classified, ours)] += 1
        if wrong and not reported:
            case = "d"
            silent.append(f"{what}: {wrong}")
        elif errors:
            case = "b"
        elif reported:
            case = "c"
        else:
            case = "a"
        counts[case] += 1
        counts[f"{case}, values wrong"] += bool(wrong)
        counts["check reported a problem"] += reported
        counts["a read failed or crashed, the check found nothing"] += bool(errors) and not reported
        path.unlink()
    print(f"\n{2 * CASES} damaged copies (seed {SEED}):")
    for key in ("a", "b", "c", "d"):
        print(f"  ({key}) {counts[key]}   of which values wrong: {counts[f'{key}, values wrong']}")
    print(f"  check reported a problem: {counts['check reported a problem']}")
    print(
        f"  a read failed or crashed, the check found nothing: "
        f"{counts['a read failed or crashed, the check found nothing']}"
    )
    for key in sorted(k for k in counts if k.startswith("repair: ")):
        print(f"  {key}: {counts[key]}")
    print(f"  reading crashed the process: {len(crashes)}")
    for line in crashes:
        print(f"    {line}")
    print(
        "  exceptions raised by reads (route, type: message [corrupt_file_error classifies it, is CorruptFileError]):"
    )
    for (route, kind, message, classified, ours), n in exceptions.most_common():
        print(f"    {n:4d}  {route:7s} {kind}: {message}  [{classified}, {ours}]")
    assert counts["d"] == 0, silent
    assert not [k for k in counts if k.startswith("repair: lost")], counts
    assert sum(counts[k] for k in "abcd") == 2 * CASES
