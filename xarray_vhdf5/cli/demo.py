"""``vhdf5 demo``: ingest a climate file as a version history and prove it.

One version per step of the record dimension (the dataset growing along it, as
a daily-updated record does), then one QC-correction version; then the version
log, the file size beside the cost of keeping every version as its own netCDF
file, and a check that every version read back through
``xr.open_dataset(..., engine="vhdf5", version=...)`` equals what was committed.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from importlib import resources

import h5py
import numpy as np
import xarray as xr

from ..versions.history import version_log
from .log import format_log, human_bytes

__all__ = ["DemoResult", "embedded_source", "qc_correction", "record_dimension", "run_demo"]


def embedded_source() -> str:
    """Path of the shipped subset of NOAA's COADS climatology (SST and AIRT, 12 months)."""
    return str(resources.files("xarray_vhdf5") / "data" / "coads_sst_airt.nc")


def record_dimension(ds: xr.Dataset) -> str | None:
    """The record dimension: the unlimited one, else a time-like one (``axis="T"`` or named *time*)."""
    unlimited = list(ds.encoding.get("unlimited_dims") or ())
    if unlimited:
        return str(unlimited[0])
    for dim in ds.dims:
        coord = ds.variables.get(dim)
        if (coord is not None and coord.attrs.get("axis") == "T") or "time" in str(dim).lower():
            return str(dim)
    return None


def qc_correction(ds: xr.Dataset, record_dim: str) -> tuple[xr.Dataset, str]:
    """A QC correction: +0.5 on a 10x10 patch of the first float variable at the last step.

    The patch starts at the first valid (non-missing) point of that step, so the
    correction changes data. Returns the corrected Dataset and a description.
    Missing points (NaN after CF decoding) stay missing.
    """
    name = next(
        n for n, v in ds.data_vars.items() if v.dtype.kind == "f" and record_dim in v.dims and v.ndim >= 2
    )
    var = ds[name]
    fixed = ds.copy(deep=True)
    data = fixed[name].values
    rec_axis = var.dims.index(record_dim)
    last = np.take(data, -1, axis=rec_axis)
    valid = np.argwhere(~np.isnan(last))
    if not len(valid):
        raise ValueError(f"variable {name!r} has no valid point at the last {record_dim}")
    first = list(valid[0])
    index: list = first[:]
    for axis in range(len(first) - 2, len(first)):
        index[axis] = slice(first[axis], first[axis] + 10)
    index.insert(rec_axis, data.shape[rec_axis] - 1)
    patch = data[tuple(index)]
    data[tuple(index)] = np.where(np.isnan(patch), patch, patch + 0.5)
    return fixed, f"QC: +0.5 bias correction of {name} on a 10x10 patch of the last {record_dim}"


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

    Raises
    ------
    ValueError
        The source has no record dimension.
    FileExistsError
        ``out`` exists.
    """
    from ..xr.writer import commit_dataset

    path = source or embedded_source()
    if os.path.exists(out):
        raise FileExistsError(f"{out!r} exists; choose another --out or remove it")
    src = xr.open_dataset(path, decode_times=False, mask_and_scale=True)
    src = src.load()
    record_dim = record_dimension(src)
    if record_dim is None:
        raise ValueError(
            f"{path!r} has no record dimension (no unlimited or time-like dimension among "
            f"{list(src.dims)}); the demo versions a dataset growing along one"
        )
    src = _prepare(src, record_dim)
    n = src.sizes[record_dim]
    echo(f"source: {path}")
    echo(f"record dimension {record_dim!r}: {n} steps; variables: {', '.join(map(str, src.data_vars))}")
    expected: dict[str, xr.Dataset] = {}
    steps = range(1, n + 1)
    if progress:
        from tqdm import tqdm

        steps = tqdm(steps, desc="committing", unit="version")
    for i in steps:
        part = src.isel({record_dim: slice(0, i)})
        name = f"{record_dim.lower()}-{i:03d}"
        commit_dataset(part, out, name, message=f"append {record_dim} step {i}")
        expected[name] = part
    fixed, description = qc_correction(src, record_dim)
    commit_dataset(fixed, out, "qc-1", message=description)
    expected["qc-1"] = fixed

    with h5py.File(out, "r") as f:
        log = version_log(f)
    echo("")
    echo(format_log(log))
    file_bytes = os.path.getsize(out)
    netcdf_bytes = _netcdf_total(expected)
    echo("")
    chunk_bytes = sum(e.new_bytes_on_disk for e in log)
    echo(
        f"versioned file: {human_bytes(file_bytes)} for {len(expected)} versions "
        f"({human_bytes(chunk_bytes)} of it chunk data, the log's total on disk)"
    )
    echo(f"one netCDF file per version: {human_bytes(netcdf_bytes)} ({netcdf_bytes / file_bytes:.1f}x larger)")

    for name, want in expected.items():
        with xr.open_dataset(out, engine="vhdf5", version=name, decode_times=False) as got:
            got.load()
            try:
                xr.testing.assert_identical(_comparable(want), _comparable(got))
            except AssertionError as err:
                raise AssertionError(f"version {name!r} does not read back identical: {err}") from None
    echo(f"verified: all {len(expected)} versions read back identical to the source")
    echo(f"open a version: {_open_hint(out, 'qc-1')}")
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
