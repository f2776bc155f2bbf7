"""``vhdf5 demo``: ingest a climate file as a version history and prove it.

One version per step of the record dimension (the dataset growing along it, as
a daily-updated record does), then one QC-correction version; then the version
log, the file size beside the cost of keeping every version as its own netCDF
file, and a check that every version read back through
``xr.open_dataset(..., engine="vhdf5", version=...)`` equals what was committed.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

import h5py
import numpy as np
import xarray as xr

from .._versions.history import version_log
from ._log import format_log, human_bytes

__all__ = ["DemoResult", "QCTarget", "embedded_source", "qc_correction", "qc_target", "record_dimension", "run_demo"]


def embedded_source() -> str:
    """Path of the shipped subset of NOAA's COADS climatology (SST and AIRT, 12 months)."""
    return str(resources.files("xarray_vhdf5") / "data" / "coads_sst_airt.nc")


def record_dimension(ds: xr.Dataset) -> str | None:
    """The record dimension: the unlimited one, else a time-like one.

    Time-like (checked in this order over the dimensions with a coordinate): ``axis = "T"``,
    ``standard_name = "time"``, CF time units (``<unit> since <date>``, as read with
    ``decode_times=False``), a datetime or cftime coordinate, then a name holding *time*.
    A gridMET file's ``day`` dimension, say, has ``standard_name = "time"`` and
    ``days since 1900-01-01`` units.
    """
    unlimited = list(ds.encoding.get("unlimited_dims") or ())
    if unlimited:
        return str(unlimited[0])
    coords = {dim: ds.variables.get(dim) for dim in ds.dims}
    tests = (
        lambda c: c.attrs.get("axis") == "T",
        lambda c: c.attrs.get("standard_name") == "time",
        lambda c: _TIME_UNITS.match(str(c.attrs.get("units", c.encoding.get("units", "")))) is not None,
        lambda c: c.dtype.kind == "M" or (c.dtype.kind == "O" and c.size and hasattr(c.values.flat[0], "calendar")),
    )
    for test in tests:
        for dim, coord in coords.items():
            if coord is not None and test(coord):
                return str(dim)
    for dim in ds.dims:
        if "time" in str(dim).lower():
            return str(dim)
    return None


#: CF time units: "<unit> since <reference time>".
_TIME_UNITS = re.compile(
    r"^\s*(days?|d|hours?|hrs?|h|minutes?|mins?|seconds?|secs?|s|milliseconds?|msecs?|ms|microseconds?|us)"
    r"\s+since\s+\S",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class QCTarget:
    """Where the QC correction goes: a float variable, a step along the record dimension, a first valid point."""

    name: str
    step: int
    first: tuple[int, ...]  # the first valid point of that step (indices of the variable's other axes)


def qc_target(ds: xr.Dataset, record_dim: str) -> QCTarget | None:
    """The QC correction's target: the last step holding a valid point of a float variable along ``record_dim``.

    Variables of two or more dimensions come first (in the Dataset's order). None when
    no float variable along ``record_dim`` has a valid (non-NaN, after CF decoding) point.
    """
    names = [n for n, v in ds.data_vars.items() if v.dtype.kind == "f" and record_dim in v.dims]
    names.sort(key=lambda n: ds[n].ndim < 2)
    for name in names:
        var = ds[name]
        rec_axis = var.dims.index(record_dim)
        valid = ~np.isnan(np.asarray(var.values))
        steps = np.flatnonzero(valid.any(axis=tuple(a for a in range(var.ndim) if a != rec_axis)))
        if len(steps):
            step = int(steps[-1])
            first = np.argwhere(np.take(valid, step, axis=rec_axis))[0]
            return QCTarget(str(name), step, tuple(int(i) for i in first))
    return None


def qc_correction(ds: xr.Dataset, record_dim: str, target: QCTarget | None = None) -> tuple[xr.Dataset, str]:
    """A QC correction: +0.5 on a 10x10 patch of :func:`qc_target`.

    +0.5, or one grid step of an integer-stored variable if that is coarser; the patch spans
    the last two axes besides ``record_dim``.

    The patch starts at the first valid (non-missing) point of the last step that has
    one, so the correction changes data. Returns the corrected Dataset and a description.
    Missing points (NaN after CF decoding) stay missing.

    Raises
    ------
    ValueError
        No float variable along ``record_dim`` has a valid point.
    """
    target = target or qc_target(ds, record_dim)
    if target is None:
        raise ValueError(f"no float variable along {record_dim!r} has a valid point to QC-correct")
    name = target.name
    fixed = ds.copy(deep=True)
    data = fixed[name].values
    rec_axis = ds[name].dims.index(record_dim)
    index: list = list(target.first)
    for axis in range(max(0, len(index) - 2), len(index)):
        index[axis] = slice(index[axis], index[axis] + 10)
    index.insert(rec_axis, target.step)
    # +0.5, or one step of an integer-stored variable's grid when that is coarser (an
    # unpacked int32 stored as float after CF decoding would round +0.5 back: no change)
    enc = ds[name].encoding
    step = float(np.asarray(enc.get("scale_factor", ds[name].attrs.get("scale_factor", 1.0))).reshape(-1)[0])
    delta = max(0.5, abs(step)) if np.dtype(enc.get("dtype", ds[name].dtype)).kind in "iu" else 0.5
    patch = data[tuple(index)]
    data[tuple(index)] = np.where(np.isnan(patch), patch, patch + delta)
    # As stored: packed variables (scale_factor/add_offset) round the corrected values to their grid.
    var = fixed[name].variable
    stored = xr.conventions.decode_cf_variable(name, xr.conventions.encode_cf_variable(var, name=name))
    fixed[name] = var.copy(data=np.asarray(stored.values, dtype=var.dtype))
    n = ds.sizes[record_dim]
    where = f"the last {record_dim}" if target.step == n - 1 else f"{record_dim} step {target.step + 1} of {n}"
    patch_shape = "x".join(["10"] * min(2, len(target.first))) or "1-point"
    return fixed, f"QC: +{delta:g} bias correction of {name} on a {patch_shape} patch of {where}"


@dataclass
class DemoResult:
    """What the demo did (for tests and the printed summary)."""

    path: str
    versions: list[str]
    file_bytes: int
    netcdf_bytes: int
    verified: int


def _prepare(ds: xr.Dataset, record_dim: str) -> xr.Dataset:
    """Drop chunk encodings that span several records: one record per chunk dedupes best."""
    out = ds.copy()
    for var in out.variables.values():
        for key in ("chunks", "chunksizes", "preferred_chunks"):
            var.encoding.pop(key, None)
    return out


def run_demo(source: str | None, out: str, echo=print, progress: bool = False) -> DemoResult:
    """Run the demo; raise AssertionError if a version does not read back identical.

    Everything that can be checked is checked before anything is written (the
    source's record dimension and a point to QC-correct). The versions are
    written to a temporary file beside ``out``, renamed to ``out`` once every
    version is verified: a demo that fails leaves no file behind.

    Raises
    ------
    ValueError
        The source has no record dimension, or no float variable along it has a
        valid point to QC-correct.
    FileExistsError
        ``out`` exists.
    """
    from ..xr._writer import commit_dataset

    path = source or embedded_source()
    if os.path.exists(out):
        raise FileExistsError(f"{out!r} exists; choose another --out or remove it")
    with xr.open_dataset(path, decode_times=False, mask_and_scale=True) as opened:
        src = opened.load()
    record_dim = record_dimension(src)
    if record_dim is None:
        raise ValueError(
            f"{path!r} has no record dimension (no unlimited or time-like dimension among "
            f"{list(src.dims)}); the demo versions a dataset growing along one"
        )
    target = qc_target(src, record_dim)
    if target is None:
        raise ValueError(
            f"{path!r}: no float variable along its record dimension {record_dim!r} has a valid "
            f"(non-missing) point, so the demo has nothing to QC-correct; nothing was written"
        )
    src = _prepare(src, record_dim)
    n = src.sizes[record_dim]
    echo(f"source: {path}")
    echo(f"record dimension {record_dim!r}: {n} steps; variables: {', '.join(map(str, src.data_vars))}")

    folder = os.path.dirname(os.path.abspath(out))
    fd, partial = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.", suffix=".partial", dir=folder)
    os.close(fd)
    os.remove(partial)  # the writer creates it
    try:
        result = _ingest_and_verify(src, record_dim, target, partial, out, commit_dataset, echo, progress)
        os.replace(partial, out)
    finally:
        for leftover in (partial, partial + "-journal"):
            if os.path.exists(leftover):
                os.remove(leftover)
    echo(f"open a version: {_open_hint(out, 'qc-1')}")
    return result


def _ingest_and_verify(src, record_dim, target, path, out, commit_dataset, echo, progress) -> DemoResult:
    """Commit every step and the QC version into ``path``, print the log and sizes, verify every version."""
    n = src.sizes[record_dim]
    expected: dict[str, xr.Dataset] = {}
    steps: Iterable[int] = range(1, n + 1)
    if progress:
        from tqdm import tqdm

        steps = tqdm(steps, desc="committing", unit="version")
    for i in steps:
        part = src.isel({record_dim: slice(0, i)})
        name = f"{record_dim.lower()}-{i:03d}"
        commit_dataset(part, path, name, message=f"append {record_dim} step {i}")
        expected[name] = part
    fixed, description = qc_correction(src, record_dim, target)
    commit_dataset(fixed, path, "qc-1", message=description)
    expected["qc-1"] = fixed

    with h5py.File(path, "r") as f:
        log = version_log(f)
    echo("")
    echo(format_log(log))
    file_bytes = os.path.getsize(path)
    netcdf_bytes = _netcdf_total(expected)
    echo("")
    chunk_bytes = sum(e.new_bytes_on_disk for e in log)
    echo(
        f"versioned file: {human_bytes(file_bytes)} for {len(expected)} versions "
        f"({human_bytes(chunk_bytes)} of it chunk data, the log's total on disk)"
    )
    echo(f"one netCDF file per version: {human_bytes(netcdf_bytes)} ({netcdf_bytes / file_bytes:.1f}x larger)")

    for name, want in expected.items():
        with xr.open_dataset(path, engine="vhdf5", version=name, decode_times=False) as got:
            got.load()
            try:
                xr.testing.assert_identical(_comparable(want), _comparable(got))
            except AssertionError as err:
                raise AssertionError(f"version {name!r} does not read back identical: {err}") from None
    echo(f"verified: all {len(expected)} versions read back identical to the source")
    return DemoResult(out, list(expected), file_bytes, netcdf_bytes, len(expected))


def _open_hint(out: str, version: str) -> str:
    """The ``xr.open_dataset`` call that opens ``version`` of ``out``, with ``decode_times=False`` if needed.

    Times in units xarray cannot decode without cftime (COADS's hours since year
    0000) make a plain ``open_dataset`` raise; the hint then says how to open it.
    """
    call = f"xr.open_dataset({out!r}, engine='vhdf5', version={version!r}"
    try:
        xr.open_dataset(out, engine="vhdf5", version=version).close()
    except ValueError as err:  # xarray: "unable to decode time units ..."
        if "decode" not in str(err):
            raise
        return call + ", decode_times=False)  # its time units need cftime to decode"
    return call + ")"


def _comparable(ds: xr.Dataset) -> xr.Dataset:
    """The Dataset without encodings (values, dims, coords and attrs are compared)."""
    ds = ds.copy()
    ds.encoding = {}
    for var in ds.variables.values():
        var.encoding = {}
    return ds


def _netcdf_total(versions: dict[str, xr.Dataset]) -> int:
    """Bytes of keeping each version as its own (uncompressed netCDF-4) file."""
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, ds in versions.items():
            p = os.path.join(tmp, f"{name}.nc")
            _comparable(ds).to_netcdf(p, engine="h5netcdf")
            total += os.path.getsize(p)
    return total
