"""icechunk's side of ``bench_ingest.py``: daily appends, one commit per day, on local storage.

Runs in a separate interpreter with icechunk 1.1.x (the newest that installs on
Python 3.11), not in this package's venv::

    python3.11 -m venv /tmp/icechunk-venv
    /tmp/icechunk-venv/bin/pip install 'icechunk<1.2' zarr xarray
    /tmp/icechunk-venv/bin/python benchmarks/ingest_icechunk.py SPEC.json

``bench_ingest.py`` writes ``SPEC.json`` (and the ``.npy`` of the data it names)
and reads the JSON this script prints on stdout. The spec's keys:

- ``data``: path of a ``.npy`` array, shape ``(T, *step_shape)``: day ``t`` is ``data[t]``;
- ``store``: directory of the icechunk repository (created; must not exist);
- ``var``, ``dims``, ``chunks``: the variable's name, dimension names (``time`` first)
  and chunk shape;
- ``coords``: ``{name: list of values}`` for the other dimensions' coordinates;
- ``start``: the first day's date (``time`` is daily from there, ``datetime64[ns]``);
- ``compress``: false writes every array with ``compressors=None``; true keeps
  zarr's defaults (zstd);
- ``qc``: ``[day, [start, stop], ...]`` (a box in one day, rewritten with its values
  + 10 after the last day) or null;
- ``old``: the number of days of the version read back at the end (``T // 2``).

Each day: ``Repository.open`` (``create`` on day 1), a writable session on
``main``, ``ds.to_zarr(session.store, append_dim="time")`` (day 1: ``mode="w"``
with the encoding), ``session.commit``. The timing of a day includes the
repository's open, as a daily job that starts fresh pays it. Then the QC fix
(``zarr`` write of the box into ``main``, commit), and the open + full read of the
version holding ``old`` days (``readonly_session(snapshot_id=)``,
``xr.open_zarr``, ``.load()``). The final data, its time coordinate and the old
version are checked against numpy; a mismatch raises ``AssertionError``.

Printed JSON: ``tool``, ``versions``, ``times`` (seconds per day's commit, day 1
first), ``qc_s``, ``read_s``, ``size`` (bytes in the store directory),
``ok`` (true), ``icechunk``/``zarr``/``xarray`` versions.
"""

from __future__ import annotations

import json
import os
import sys
import time

import icechunk
import numpy as np
import pandas as pd
import xarray as xr
import zarr


def store_size(path: str) -> int:
    """Bytes in every file under ``path``."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def day_dataset(spec: dict, data: np.ndarray, times: pd.DatetimeIndex, t: int) -> xr.Dataset:
    coords = {"time": times[t : t + 1], **{k: np.asarray(v) for k, v in spec["coords"].items()}}
    return xr.Dataset({spec["var"]: (tuple(spec["dims"]), data[t : t + 1])}, coords=coords)


def qc_box(spec: dict) -> tuple | None:
    if spec["qc"] is None:
        return None
    day, *ranges = spec["qc"]
    return (day, *(slice(a, b) for a, b in ranges))


def run(spec: dict) -> dict:
    data = np.load(spec["data"])
    n_days = len(data)
    times = pd.date_range(spec["start"], periods=n_days, freq="D")
    var = spec["var"]
    storage = icechunk.local_filesystem_storage(spec["store"])
    encoding = {var: {"chunks": tuple(spec["chunks"])}}
    if not spec["compress"]:
        for name in (var, "time", *spec["coords"]):
            encoding.setdefault(name, {})["compressors"] = None
    snapshots = {}
    durations = []
    for t in range(n_days):
        ds = day_dataset(spec, data, times, t)
        start = time.perf_counter()
        if t == 0:
            repo = icechunk.Repository.create(storage)
            session = repo.writable_session("main")
            ds.to_zarr(session.store, mode="w", encoding=encoding, consolidated=False)
        else:
            repo = icechunk.Repository.open(storage)
            session = repo.writable_session("main")
            ds.to_zarr(session.store, append_dim="time", consolidated=False)
        snapshots[t + 1] = session.commit(f"day {t + 1}")
        durations.append(time.perf_counter() - start)

    expected = data.copy()
    qc_s = None
    box = qc_box(spec)
    if box is not None:
        fix = data[box] + np.float32(10)
        expected[box] = fix
        start = time.perf_counter()
        repo = icechunk.Repository.open(storage)
        session = repo.writable_session("main")
        zarr.open_group(store=session.store, mode="r+")[var][box] = fix
        session.commit("qc fix")
        qc_s = time.perf_counter() - start

    old = spec["old"]
    start = time.perf_counter()
    repo = icechunk.Repository.open(storage)
    session = repo.readonly_session(snapshot_id=snapshots[old])
    ds_old = xr.open_zarr(session.store, consolidated=False).load()
    read_s = time.perf_counter() - start
    np.testing.assert_array_equal(ds_old[var].values, data[:old])
    np.testing.assert_array_equal(ds_old["time"].values, times[:old].values)

    final = xr.open_zarr(repo.readonly_session(branch="main").store, consolidated=False)
    np.testing.assert_array_equal(final[var].values, expected)
    np.testing.assert_array_equal(final["time"].values, times.values)
    return {
        "tool": "icechunk",
        "versions": n_days + (box is not None),
        "times": durations,
        "qc_s": qc_s,
        "read_s": read_s,
        "size": store_size(spec["store"]),
        "ok": True,
        "icechunk": icechunk.__version__,
        "zarr": zarr.__version__,
        "xarray": xr.__version__,
    }


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: ingest_icechunk.py SPEC.json (written by bench_ingest.py)")
    with open(argv[0]) as fh:
        spec = json.load(fh)
    print(json.dumps(run(spec)))


if __name__ == "__main__":
    main(sys.argv[1:])
