"""One table of the version log: ``log_frame``, shown by ``ds.vhdf5.versions`` and ``vhdf5 log``."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (the accessor)
from xarray_vhdf5._versions.history import LOG_COLUMNS, log_frame, version_log
from xarray_vhdf5.cli._log import format_log, format_totals
from xarray_vhdf5.xr._accessor import version_log_frame


@pytest.fixture
def history(tmp_path):
    path = tmp_path / "a.h5"
    rng = np.random.default_rng(0)
    ds = xr.Dataset({k: (("t", "x"), rng.random((30, 20))) for k in "abcd"}, coords={"t": np.arange(30)})
    ds.vhdf5.commit("v1", path=path, message="first")
    ds["a"] = ds["a"] + 1
    ds.vhdf5.commit("v2", path=path)  # no message
    ds.isel(x=slice(0, 5)).vhdf5.commit("v3", path=path, message="narrow")
    return path


def test_frame_holds_every_entry(history):
    with h5py.File(history, "r") as f:
        entries = version_log(f)
    frame = log_frame(entries)
    assert list(frame.columns) == list(LOG_COLUMNS)
    assert list(frame.index) == [e.name for e in entries] == ["v1", "v2", "v3"]
    for e in entries:
        row = frame.loc[e.name]
        assert row["timestamp"] == pd.Timestamp(e.timestamp)
        assert (row["parent"], row["changed"]) == (e.parent, e.changed)
        assert (row["new_chunks"], row["new_bytes"], row["new_bytes_on_disk"]) == (
            e.new_chunks,
            e.new_bytes,
            e.new_bytes_on_disk,
        )
    assert frame.loc["v1", "message"] == "first" and pd.isna(frame.loc["v2", "message"])
    assert str(frame["timestamp"].dt.tz) == "UTC"
    assert frame["new_bytes_on_disk"].dtype == np.int64


def test_accessor_frame_is_the_same_table(history):
    """``ds.vhdf5.versions`` (version_log_frame) shows the columns of log_frame it has."""
    with h5py.File(history, "r") as f:
        frame = log_frame(version_log(f, variables_only=True))
    shown = version_log_frame(history)
    pd.testing.assert_frame_equal(shown, frame[list(shown.columns)])


def test_table_shows_the_frame(history):
    """``vhdf5 log``'s table, formatted from the entries without pandas, shows the frame's rows."""
    with h5py.File(history, "r") as f:
        entries = version_log(f)
    frame = log_frame(entries)
    table = format_log(entries)
    lines = table.splitlines()
    for line, (name, row) in zip(lines[2:-1], frame.iterrows(), strict=True):
        cells = re.split(r"\s{2,}", line)
        assert cells[:4] == [name, f"{row['timestamp']:%Y-%m-%d %H:%M:%S}", row["parent"], str(row["new_chunks"])]
        # the last cell: the message, or for none the changed datasets (at most three here)
        assert cells[-1] == (row["message"] if isinstance(row["message"], str) else ",".join(row["changed"]))
    assert lines[0].split("  ")[0] == "version" and set(lines[1]) == {"-", " "}
    assert [line.split()[0] for line in lines[2:-1]] == ["v1", "v2", "v3"]
    assert lines[2].endswith("first") and lines[3].endswith("a")  # v2: changed "a", no message
    total = int(frame["new_chunks"].sum())
    assert lines[-1] == format_totals(entries) and lines[-1].startswith(f"3 versions stored {total} chunks: ")


def test_empty_log():
    assert format_log([]).splitlines()[-1] == "0 versions stored 0 chunks: 0 B on disk, 0 B uncompressed"
    assert log_frame([]).empty
