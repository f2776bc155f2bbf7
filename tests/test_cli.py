"""The vhdf5 command line: demo (embedded data and NOAA files), log and diff."""

from __future__ import annotations

import datetime as dt
import re

import h5py
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import xarray_vhdf5 as xv
from xarray_vhdf5._versions.history import version_log
from xarray_vhdf5.cli._log import human_bytes
from xarray_vhdf5.cli._main import cli

#: NOAA files with a record (TIME) dimension, the ones the demo versions.
NOAA_RECORD_FILES = ["coads_climatology.cdf", "ocean_atlas_subset.nc", "esku_heat_budget.cdf"]


def test_demo_on_embedded_data(tmp_path):
    out = tmp_path / "demo.h5"
    result = CliRunner().invoke(cli, ["demo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "verified: all 13 versions read back identical" in result.output
    assert "one netCDF file per version" in result.output
    # The last line says how to open it, and that call works (COADS's year-0000 times need decode_times=False).
    hint = result.output.strip().splitlines()[-1]
    assert hint.startswith("open a version: xr.open_dataset(") and "decode_times=False" in hint
    with eval(hint.removeprefix("open a version: ").split("  #")[0], {"xr": xr}) as opened:
        assert opened.sizes["TIME"] == 12 and opened.encoding["vhdf5_version"] == "qc-1"
    with h5py.File(out) as f:
        vf = xv.VersionedHDF5File(f)
        assert vf.versions[-1] == "qc-1" and len(vf) == 13
    # QC version adds exactly the chunk it corrected; appends one chunk per variable.
    log = CliRunner().invoke(cli, ["log", str(out)])
    assert log.exit_code == 0, log.output
    rows = {r["version"]: r for r in _table(log.output)[0]}
    assert rows["qc-1"]["new chunks"] == "1"
    assert rows["time-002"]["new chunks"] == "3"  # SST, AIRT and the TIME coordinate
    assert rows["qc-1"]["changed"] == "SST"
    # Every raw_data chunk is stored by exactly one version, with its size in the file:
    # the log's totals are the file's chunks, and the demo's summary says so.
    with h5py.File(out) as f:
        entries = version_log(f)
        raw = [f["_version_data"][k]["raw_data"] for k in ("SST", "AIRT", "TIME", "COADSX", "COADSY")]
        stored = [r.id.get_chunk_info(i) for r in raw for i in range(r.id.get_num_chunks())]
        uncompressed = sum(r.id.get_num_chunks() * int(np.prod(r.chunks)) * r.dtype.itemsize for r in raw)
    assert sum(e.new_chunks for e in entries) == len(stored) == 39
    assert sum(e.new_bytes_on_disk for e in entries) == sum(c.size for c in stored)
    assert sum(e.new_bytes for e in entries) == uncompressed
    disk = human_bytes(sum(c.size for c in stored))
    assert log.output.splitlines()[-1] == (
        f"13 versions stored 39 chunks: {disk} on disk, {human_bytes(uncompressed)} uncompressed"
    )
    assert f"({disk} of it chunk data, the log's total on disk)" in result.output


@pytest.mark.parametrize(
    "name",
    # ocean_atlas_subset.nc in the suite; COADS (the embedded demo's source, test_demo_on_embedded_data)
    # and esku_heat_budget.cdf (12 s: 100 variables) in the slow run, so the suite stays under 5 minutes
    [n if n == "ocean_atlas_subset.nc" else pytest.param(n, marks=pytest.mark.slow) for n in NOAA_RECORD_FILES],
)
def test_demo_on_noaa_files(noaa_dir, tmp_path, name):
    out = tmp_path / "demo.h5"
    result = CliRunner().invoke(cli, ["demo", "--source", str(noaa_dir / name), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "read back identical to the source" in result.output


def test_demo_refuses_file_without_record_dimension(noaa_dir, tmp_path):
    result = CliRunner().invoke(
        cli, ["demo", "--source", str(noaa_dir / "etopo20.cdf"), "--out", str(tmp_path / "x.h5")]
    )
    assert result.exit_code != 0
    assert "has no record dimension" in result.output


def test_demo_refuses_existing_output(tmp_path):
    out = tmp_path / "demo.h5"
    out.write_bytes(b"")
    result = CliRunner().invoke(cli, ["demo", "--out", str(out)])
    assert result.exit_code != 0 and "exists" in result.output


# -- log and diff --------------------------------------------------------------------------------

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _at(hours: int) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


#: First line after a table: the log's totals; the diff's attribute changes, note and summary.
_AFTER_TABLE = re.compile(r"\d+ versions? stored |attributes changed:$|\(--mappings-only|\d+ of \d+ datasets differ ")


def _table(output: str) -> tuple[list[dict[str, str]], list[str]]:
    """Rows of the first table of ``output`` (cells by the rule's column spans), and the lines after it."""
    lines = output.splitlines()
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]

    def cells(line):
        return [line[a : b if i < len(spans) - 1 else None].strip() for i, (a, b) in enumerate(spans)]

    header = cells(lines[0])
    rows, n = [], 2
    while n < len(lines) and not _AFTER_TABLE.match(lines[n]):
        rows.append(dict(zip(header, cells(lines[n]))))
        n += 1
    return rows, lines[n:]


def _invoke(*args: str):
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


@pytest.fixture
def grown(tmp_path):
    """The user's report: a grow onto a deduplicated chunk, then an attribute-only change."""
    path = tmp_path / "log1.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1", timestamp=_at(0)) as g:
            g.create_dataset("x", data=np.ones(4), chunks=(2,))
        with vf.stage_version("grow_same_data", timestamp=_at(1)) as g:
            g["x"].resize((6,))
            g["x"][4:] = 1
        with vf.stage_version("attrs_only", timestamp=_at(2)) as g:
            g["x"].attrs["units"] = "K"
    return path


def test_log_lists_shape_only_and_attribute_only_changes(grown):
    result = _invoke("log", str(grown))
    assert result.exit_code == 0
    assert result.output == (
        "version         timestamp (UTC)      parent             new chunks  on disk  uncompressed  changed  message\n"
        "--------------  -------------------  -----------------  ----------  -------  ------------  -------  -------\n"
        "v1              2024-01-01 00:00:00  __first_version__  1           16 B     16 B          x\n"
        "grow_same_data  2024-01-01 01:00:00  v1                 0           0 B      0 B           x\n"
        "attrs_only      2024-01-01 02:00:00  grow_same_data     0           0 B      0 B           x\n"
        "3 versions stored 1 chunk: 16 B on disk, 16 B uncompressed\n"
    )


def test_diff_reports_points_added_and_attribute_changes(grown):
    grow = _invoke("diff", str(grown), "v1", "grow_same_data")
    assert grow.exit_code == 0
    assert grow.output == (
        "dataset  status    shape v1  shape grow_same_data  points added  chunks read/total  chunks changed"
        "  points changed  points removed  attributes changed\n"
        "-------  --------  --------  --------------------  ------------  -----------------  --------------"
        "  --------------  --------------  ------------------\n"
        "x        modified  (4,)      (6,)                  2             1/3                1"
        "               0               0\n"
        "1 of 1 datasets differ from v1 to grow_same_data\n"
    )
    attrs = _invoke("diff", str(grown), "grow_same_data", "attrs_only")
    assert attrs.exit_code == 0
    assert attrs.output == (
        "dataset  status    shape grow_same_data  shape attrs_only  points added  chunks read/total  chunks changed"
        "  points changed  points removed  attributes changed\n"
        "-------  --------  --------------------  ----------------  ------------  -----------------  --------------"
        "  --------------  --------------  ------------------\n"
        "x        modified  (6,)                  (6,)              0             0/3                0"
        "               0               0               units\n"
        "attributes changed:\n"
        "  x: units: (absent) -> 'K'\n"
        "1 of 1 datasets differ from grow_same_data to attrs_only\n"
    )


def test_diff_mappings_only_reads_nothing_and_says_so(grown):
    result = _invoke("diff", "--mappings-only", str(grown), "v1", "attrs_only")
    assert result.exit_code == 0
    assert result.output == (
        "dataset  status    shape v1  shape attrs_only  points added  mappings differ/total  chunks changed"
        "  points changed  points removed  attributes changed\n"
        "-------  --------  --------  ----------------  ------------  ---------------------  --------------"
        "  --------------  --------------  ------------------\n"
        "x        modified  (4,)      (6,)              2             1/3                    ?"
        "               ?               0               units\n"
        "attributes changed:\n"
        "  x: units: (absent) -> 'K'\n"
        "(--mappings-only: no chunk read; '?' = not counted)\n"
        "1 of 1 datasets differ from v1 to attrs_only\n"
    )


def test_log_new_chunks_are_the_chunks_a_version_stored(tmp_path):
    """A revert, and a branch repeating another branch's edit, store nothing (deduplicated)."""
    path = tmp_path / "revert.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1", timestamp=_at(0)) as g:
            g.create_dataset("x", data=np.arange(4.0), chunks=(2,))
        with vf.stage_version("v2", timestamp=_at(1)) as g:
            g["x"][0:2] = 9
        with vf.stage_version("revert", timestamp=_at(2)) as g:
            g["x"] = vf["v1"]["x"]
        with vf.stage_version("branch", prev_version="v1", timestamp=_at(3)) as g:
            g["x"][0:2] = 9
        assert f["_version_data/x/raw_data"].shape == (6,)  # three chunks stored in all
    result = _invoke("log", str(path))
    assert result.exit_code == 0
    assert result.output == (
        "version  timestamp (UTC)      parent             new chunks  on disk  uncompressed  changed  message\n"
        "-------  -------------------  -----------------  ----------  -------  ------------  -------  -------\n"
        "v1       2024-01-01 00:00:00  __first_version__  2           32 B     32 B          x\n"
        "v2       2024-01-01 01:00:00  v1                 1           16 B     16 B          x\n"
        "revert   2024-01-01 02:00:00  v2                 0           0 B      0 B           x\n"
        "branch   2024-01-01 03:00:00  v1                 0           0 B      0 B           x\n"
        "4 versions stored 3 chunks: 48 B on disk, 48 B uncompressed\n"
    )


def test_log_bytes_on_disk_are_the_compressed_chunks(tmp_path):
    path = tmp_path / "gzip.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1", timestamp=_at(0)) as g:
            g.create_dataset("x", data=np.arange(1000.0) % 7, chunks=(500,), compression="gzip")
        with vf.stage_version("v2", timestamp=_at(1)) as g:
            g["x"][0] = -1
        raw = f["_version_data/x/raw_data"]
        sizes = [raw.id.get_chunk_info(i).size for i in range(raw.id.get_num_chunks())]
    assert len(sizes) == 3 and all(n < 500 * 8 / 10 for n in sizes)  # gzip: each chunk < 10% of 4000 B
    rows = _table(_invoke("log", str(path)).output)[0]
    assert [(r["version"], r["new chunks"], r["on disk"], r["uncompressed"]) for r in rows] == [
        ("v1", "2", f"{sizes[0] + sizes[1]} B", "7.8 KiB"),
        ("v2", "1", f"{sizes[2]} B", "3.9 KiB"),
    ]


def test_log_help_says_what_the_columns_count():
    result = _invoke("log", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert (
        "new chunks raw_data chunks the version maps that no earlier version maps: the chunks its commit stored" in text
    )
    assert "on disk their bytes in the file, after compression (HDF5's chunk index)" in text
    assert "uncompressed their bytes in memory (whole chunks: edge chunks are padded)" in text


@pytest.fixture
def xr_history(tmp_path):
    """v2 changes an attribute of sst and adds a variable on lat (rewriting lat's REFERENCE_LIST)."""
    path = tmp_path / "xr.h5"
    ds = xr.Dataset(
        {"sst": (("time", "lat"), np.arange(12.0).reshape(3, 4), {"units": "Deg C"})},
        coords={"time": [1, 2, 3], "lat": [0.0, 1, 2, 3]},
    )
    ds.vhdf5.commit("v1", path=path)
    ds2 = ds.copy(deep=True)
    ds2["sst"].attrs["units"] = "K"
    ds2["extra"] = ("lat", np.ones(4))
    ds2.vhdf5.commit("v2", path=path)
    return path


def test_log_and_diff_of_an_attribute_change_in_an_xarray_file(xr_history):
    with h5py.File(xr_history) as f:  # the netCDF bookkeeping did change on lat: not a change of lat
        lat1, lat2 = (f[f"_version_data/versions/{v}/lat"] for v in ("v1", "v2"))
        assert len(lat1.attrs["REFERENCE_LIST"]) == 1 and len(lat2.attrs["REFERENCE_LIST"]) == 2
    rows = _table(_invoke("log", str(xr_history)).output)[0]
    assert [(r["version"], r["changed"]) for r in rows] == [("v1", "lat,sst,time"), ("v2", "extra,sst")]
    result = _invoke("diff", str(xr_history), "v1", "v2")
    assert result.exit_code == 0
    rows, rest = _table(result.output)
    assert [(r["dataset"], r["status"], r["points added"], r["attributes changed"]) for r in rows] == [
        ("sst", "modified", "0", "units"),
        ("time", "unchanged", "0", ""),
        ("lat", "unchanged", "0", ""),
        ("extra", "added", "4", ""),
    ]
    assert rest == ["attributes changed:", "  sst: units: 'Deg C' -> 'K'", "2 of 4 datasets differ from v1 to v2"]


def test_log_and_diff_agree_on_what_changed(tmp_path):
    """For every version, the datasets `log` lists as changed are those `diff PARENT VERSION` says differ."""
    path = tmp_path / "mixed.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1", timestamp=_at(0)) as g:
            g.create_dataset("a", data=np.arange(10.0), chunks=(4,))
            g.create_dataset("grp/b", data=np.ones((4, 4), dtype="i4"), chunks=(2, 2))
            g.create_dataset("c", data=np.zeros(3), chunks=(3,))
        with vf.stage_version("data", timestamp=_at(1)) as g:
            g["a"][5] = -1.0
        with vf.stage_version("grow", timestamp=_at(2)) as g:
            g["grp/b"].resize((6, 4))
            g["grp/b"][4:] = 1  # the new chunks equal stored ones: nothing stored
        with vf.stage_version("shrink_attr", timestamp=_at(3)) as g:
            g["a"].resize((8,))
            g["c"].attrs["note"] = np.array([1.5, np.nan])
        with vf.stage_version("same_attr", timestamp=_at(4)) as g:
            g["c"].attrs["note"] = np.array([1.5, np.nan])  # rewritten, equal (NaN equals NaN)
        with vf.stage_version("drop_add", timestamp=_at(5)) as g:
            del g["c"]
            g.create_dataset("d", data=np.arange(3.0), chunks=(3,))
        with vf.stage_version("nothing", timestamp=_at(6)):
            pass
    log_rows = _table(_invoke("log", str(path)).output)[0]
    changed = {r["version"]: r["changed"] for r in log_rows}
    assert changed == {
        "v1": "a,c,grp/b",
        "data": "a",
        "grow": "grp/b",
        "shrink_attr": "a,c",
        "same_attr": "",
        "drop_add": "c,d",
        "nothing": "",
    }
    for row in log_rows[1:]:
        for flag in ((), ("--mappings-only",)):
            diff_rows = _table(_invoke("diff", *flag, str(path), row["parent"], row["version"]).output)[0]
            differ = ",".join(sorted(r["dataset"] for r in diff_rows if r["status"] != "unchanged"))
            assert differ == row["changed"], (row["version"], flag)


def test_log_of_a_plain_file_is_an_error(tmp_path):
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = [1, 2]
    for args in (["log", str(plain)], ["diff", str(plain), "a", "b"]):
        result = _invoke(*args)
        assert result.exit_code == 1
        assert result.output == (
            f"Error: {str(plain)!r} is not a versioned HDF5 file: it has no /_version_data/versions group "
            "(create versions with VersionedHDF5File(h5py.File(path, 'a')).stage_version(...))\n"
        )


#: The end of the message for a file that is not HDF5.
HINT = (
    "hence not a versioned HDF5 file; to version its data, open it with xarray and commit it "
    "(ds.vhdf5.commit(version, path=...))"
)


@pytest.mark.parametrize("name", ["etopo20.cdf", "ocean_atlas_subset.nc"])
def test_log_and_diff_of_a_netcdf3_file_say_it_is_not_hdf5(noaa_dir, name):
    path = str(noaa_dir / name)
    for args in (["log", path], ["diff", path, "a", "b"]):
        result = _invoke(*args)
        assert result.exit_code == 1
        assert result.output == f"Error: {path!r} is not an HDF5 file (a netCDF-3 classic file): {HINT}\n"


def test_log_of_other_files_that_are_not_hdf5(tmp_path):
    text, empty = tmp_path / "notes.txt", tmp_path / "empty.h5"
    text.write_text("hello\n")
    empty.write_bytes(b"")
    result = _invoke("log", str(text))
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {str(text)!r} is not an HDF5 file (it starts with b'hello\\n', not the HDF5 signature): {HINT}\n"
    )
    result = _invoke("diff", str(empty), "a", "b")
    assert result.exit_code == 1
    assert result.output == f"Error: {str(empty)!r} is not an HDF5 file (an empty file): {HINT}\n"


def test_log_of_a_damaged_hdf5_file_says_so_with_h5pys_error(tmp_path):
    path = tmp_path / "cut.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(1000)
    path.write_bytes(path.read_bytes()[:100])  # the signature survives, the rest does not
    result = _invoke("log", str(path))
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert result.output.startswith(f"Error: {str(path)!r} is damaged: libhdf5 says OSError: Unable to synchronously")


def test_diff_attribute_values_are_brief_and_follow_group(tmp_path):
    path = tmp_path / "grp.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("grp/b", data=np.arange(4.0), chunks=(2,))
            g.create_dataset("a", data=np.arange(4.0), chunks=(2,))
            g["a"].attrs["units"] = "m"
        with vf.stage_version("v2") as g:
            g["grp/b"].attrs["long_name"] = "a very long description of this variable that goes on"
            g["a"].attrs["units"] = np.array([1, 2, 3])
    rows, rest = _table(_invoke("diff", str(path), "v1", "v2").output)
    assert [(r["dataset"], r["status"], r["attributes changed"]) for r in rows] == [
        ("grp/b", "modified", "long_name"),
        ("a", "modified", "units"),
    ]
    assert rest == [
        "attributes changed:",
        "  grp/b: long_name: (absent) -> 'a very long description of this vari...",
        "  a: units: 'm' -> [1, 2, 3]",
        "2 of 2 datasets differ from v1 to v2",
    ]
    rows, rest = _table(_invoke("diff", "--group", "grp", str(path), "v2", "v1").output)
    assert [(r["dataset"], r["status"], r["attributes changed"]) for r in rows] == [("b", "modified", "long_name")]
    assert rest == [
        "attributes changed:",
        "  b: long_name: 'a very long description of this vari... -> (absent)",
        "1 of 1 datasets differ from v2 to v1",
    ]


def test_python_dash_m_runs_the_vhdf5_command():
    """``python -m xarray_vhdf5`` is the ``vhdf5`` command where its script is not on PATH."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "xarray_vhdf5", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: vhdf5 ") and "check" in done.stdout
