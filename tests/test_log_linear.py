"""The version log from the commits' records (issue 19) agrees with the log decoded from the mappings.

Every test builds a history, then compares ``version_log(f)`` (records where
they hold, :mod:`xarray_vhdf5._versions.logrecord`) with
``version_log(f, records=False)`` (every version's mappings decoded, the
definition in :mod:`xarray_vhdf5._versions.history`), and counts the versions
the record path had to decode: none for histories this package wrote, exactly
the versions without a record that holds otherwise.
"""

from __future__ import annotations

import datetime as dt
import json

import h5py
import numpy as np
import pandas as pd
import pytest
import versioned_hdf5
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5._versions import history, logrecord
from xarray_vhdf5._versions.bookkeeping import PATH as BOOKKEEPING
from xarray_vhdf5._versions.history import version_log


def _logs(path, monkeypatch) -> tuple[list, list, list[str]]:
    """``(from records, decoded, names of the versions the record path decoded)``."""
    decoded: list[str] = []
    real = history._decoded

    def counting(group):
        decoded.append(group.name.rsplit("/", 1)[1])
        return real(group)

    monkeypatch.setattr(history, "_decoded", counting)
    with h5py.File(path, "r") as f:
        fast = version_log(f)
        names = list(decoded)
        slow = version_log(f, records=False)
    return fast, slow, names


def _append_days(vf: xv.VersionedHDF5File, first: int, last: int, seed: int = 0) -> None:
    """Versions ``d<first>`` .. ``d<last - 1>``: one (1, 5) row of float32 appended each (chunks of one row)."""
    rng = np.random.default_rng(seed + first)
    for i in range(first, last):
        with vf.stage_version(f"d{i}") as g:
            if "x" not in g:
                g.create_dataset("x", data=rng.random((1, 5), dtype=np.float32), chunks=(1, 5))
                continue
            x = g["x"]
            n = x.shape[0]
            x.resize((n + 1, 5))
            x[n] = rng.random(5, dtype=np.float32)


def test_daily_appends_are_read_from_the_records(tmp_path, monkeypatch):
    path = tmp_path / "days.h5"
    with h5py.File(path, "w") as f:
        _append_days(xv.VersionedHDF5File(f), 0, 30)
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow
    assert decoded == []
    assert [e.new_chunks for e in fast] == [1] * 30
    assert all(e.new_bytes == 20 and e.new_bytes_on_disk == 20 for e in fast)


def test_edits_reverts_attributes_removals_and_branches_agree(tmp_path, monkeypatch):
    path = tmp_path / "edits.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(10, dtype="i4"), chunks=(4,), fillvalue=-1)
            g.create_dataset("grp/y", data=np.ones((3, 3)), chunks=(2, 2))
            g["grp/y"].attrs["units"] = 1
        with vf.stage_version("v2") as g:
            g["x"][0] = 100  # one chunk rewritten
        with vf.stage_version("v3") as g:
            g["x"][0] = 0  # back to v1's data: v1's chunk mapped again, nothing stored
        with vf.stage_version("v4") as g:
            g["grp/y"].attrs["units"] = "m"  # attributes only
        with vf.stage_version("v5") as g:
            g["grp/y"].attrs["units"] = "m"  # the same value written again: not a change
        with vf.stage_version("v6") as g:
            del g["grp/y"]
        with vf.stage_version("v7") as g:
            g.create_dataset("grp/y", data=np.ones((3, 3)), chunks=(2, 2))  # v1's chunks again
        with vf.stage_version("v8") as g:
            g["x"].resize((40,))  # new chunks all fill: not stored
        with vf.stage_version("v9", prev_version="v2", make_current=False) as g:
            g["x"][9] = 5  # a branch
        with vf.stage_version("v10", prev_version="v8") as g:
            g.create_dataset("empty", shape=(0,), dtype="f8", chunks=(4,))
        with vf.stage_version("v11") as g:
            g["x"][:] = 0  # three chunks of zeros: one stored, mapped three times
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow
    assert decoded == []
    got = {e.name: (e.new_chunks, e.changed) for e in fast}
    assert got["v3"] == (0, ("x",))
    assert got["v4"] == (0, ("grp/y",))
    assert got["v5"] == (0, ())
    assert got["v6"] == (0, ("grp/y",))
    assert got["v7"] == (0, ("grp/y",))
    assert got["v8"] == (1, ("x",))  # the last chunk, re-trimmed to the new shape
    assert got["v11"][0] == 1


def test_moved_datasets_agree(tmp_path, monkeypatch):
    path = tmp_path / "moved.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("a/x", data=np.arange(8.0), chunks=(4,))
            g.create_dataset("y", data=np.arange(3.0), chunks=(2,))
        with vf.stage_version("v2") as g:
            g.move("a/x", "b/x")  # the same chunks under another path
        with vf.stage_version("v3") as g:
            g.move("b", "c")
            g["c/x"][0] = -1.0
        with vf.stage_version("v4") as g:
            g["y"][0] = 5.0
    fast, slow, _ = _logs(path, monkeypatch)
    assert fast == slow
    assert [e.changed for e in fast] == [("a/x", "y"), ("a/x", "b/x"), ("b/x", "c/x"), ("y",)]


def test_attribute_of_equal_value_and_another_dtype_is_compared_by_value(tmp_path, monkeypatch):
    path = tmp_path / "attrs.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(4.0), chunks=(2,))
            g["x"].attrs["scale"] = np.int64(1)
            g["x"].attrs["nan"] = np.float64(np.nan)
        with vf.stage_version("v2") as g:
            g["x"].attrs["scale"] = np.float32(1.0)  # equal by value (same_attr_value), other bytes
            g["x"].attrs["nan"] = np.array([0x7FF8000000000001], np.uint64).view(np.float64)[0]
        with vf.stage_version("v3") as g:
            g["x"].attrs["scale"] = 2.0
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow and decoded == []
    assert [e.changed for e in fast] == [("x",), (), ("x",)]


def test_deleting_versions_decodes_only_the_reparented_ones(tmp_path, monkeypatch):
    path = tmp_path / "deleted.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        _append_days(vf, 0, 12)
        xv.delete_versions(vf, ["d5", "d11"])  # a middle day (its row still mapped) and the last one
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow
    assert decoded == ["d6"]  # its parent is d4 now; d6 is the first to map d5's row
    assert [e.new_chunks for e in fast] == [1] * 5 + [2] + [1] * 4


def test_versioned_hdf5_deleting_versions_of_our_file(tmp_path, monkeypatch):
    path = tmp_path / "deleted_by_them.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        _append_days(vf, 0, 6)
        with vf.stage_version("e") as g:
            g["x"][0] = np.full(5, 9, np.float32)  # d0's row replaced: d0 alone maps it
        _append_days(vf, 7, 9)
    with h5py.File(path, "r+") as f:
        versioned_hdf5.delete_versions(f, [f"d{i}" for i in range(6)])  # d0's row freed: later rows move
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow
    assert decoded == []  # no record holds (e re-parented, d7 and d8 over moved rows): all decoded once
    assert [e.new_chunks for e in fast] == [6, 1, 1]


def test_versions_committed_by_versioned_hdf5_are_decoded_and_files_stay_readable(tmp_path, monkeypatch):
    path = tmp_path / "mixed.h5"
    with h5py.File(path, "w") as f:
        _append_days(xv.VersionedHDF5File(f), 0, 5)
    with h5py.File(path, "r+") as f:
        theirs = versioned_hdf5.VersionedHDF5File(f)
        for i in (5, 6):
            with theirs.stage_version(f"d{i}") as g:
                x = g["x"]
                x.resize((i + 1, 5))
                x[i] = np.full(5, i, np.float32)
        with theirs.stage_version("d7") as g:
            g["x"][0] = np.full(5, 6, np.float32)  # d6's row: deduplicated by versioned-hdf5
    with h5py.File(path, "r+") as f:
        _append_days(xv.VersionedHDF5File(f), 8, 11)
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow
    assert decoded == ["d5", "d6", "d7"]
    assert [e.new_chunks for e in fast] == [1] * 7 + [0] + [1] * 3
    # versioned-hdf5 reads every version of the file, records and all
    with h5py.File(path, "r") as f:
        ours = xv.VersionedHDF5File(f)
        theirs = versioned_hdf5.VersionedHDF5File(f)
        for name in ours.versions:
            np.testing.assert_array_equal(theirs[name]["x"][()], ours[name]["x"][()])
        assert theirs["d10"]["x"].shape == (10, 5)


def test_damaged_or_missing_records_fall_back(tmp_path, monkeypatch):
    path = tmp_path / "damaged.h5"
    with h5py.File(path, "w") as f:
        _append_days(xv.VersionedHDF5File(f), 0, 8)
    expected, _, _ = _logs(path, monkeypatch)
    with h5py.File(path, "r+") as f:
        log = f[f"{BOOKKEEPING}/log"]
        blob = log[: log.attrs["used"]].tobytes()
        starts = _record_starts(blob)
        assert len(starts) == 8 and blob[0] == logrecord.PACKED  # commits write compressed records
        body = starts[3] + 5  # past d3's header: its compressed bytes
        log[body : body + 20] = np.frombuffer(b"#" * 20, np.uint8)  # d3's record unreadable
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow == expected
    assert decoded == ["d3"]
    with h5py.File(path, "r+") as f:
        log = f[f"{BOOKKEEPING}/log"]
        log[starts[5]] = ord("#")  # d5's header: no record's end can be found from there on
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow == expected
    assert decoded == ["d3", "d5", "d6", "d7"]
    with h5py.File(path, "r+") as f:
        f[f"{BOOKKEEPING}/log"].attrs["used"] = np.int64(10**9)  # beyond the dataset: none read
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow == expected
    with h5py.File(path, "r+") as f:
        del f[f"{BOOKKEEPING}/log"]
    fast, slow, _ = _logs(path, monkeypatch)
    assert fast == slow == expected


def _record_starts(blob: bytes) -> list[int]:
    """Offsets of the log's records: compressed (PACKED, uint32 length) or JSON lines."""
    starts, at = [], 0
    while at < len(blob):
        starts.append(at)
        if blob[at] == logrecord.PACKED:
            at += 5 + int.from_bytes(blob[at + 1 : at + 5], "little")
        else:
            at = blob.index(b"\n", at) + 1
    return starts


def test_json_records_of_earlier_commits_read_beside_compressed_ones(tmp_path, monkeypatch):
    """A log whose first records are JSON lines (as commits wrote them before compression) reads whole."""
    path = tmp_path / "mixed.h5"
    with h5py.File(path, "w") as f:
        _append_days(xv.VersionedHDF5File(f), 0, 6)
    expected, _, _ = _logs(path, monkeypatch)
    with h5py.File(path, "r+") as f:
        log = f[f"{BOOKKEEPING}/log"]
        records = logrecord.unpack_records(log[: log.attrs["used"]].tobytes())
        assert [r["v"] for r in records] == [f"d{i}" for i in range(6)]
        text = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records[:3])
        blob = text + b"".join(logrecord.pack_record(r) for r in records[3:])
        assert len(text) > 1.5 * (len(blob) - len(text))  # the compressed half is the smaller
        log[: len(blob)] = np.frombuffer(blob, np.uint8)
        log.attrs["used"] = np.int64(len(blob))
    assert list(logrecord.load(h5py.File(path, "r"))) == [f"d{i}" for i in range(6)]
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow == expected
    assert decoded == []


def test_backdated_timestamps_and_failed_commits_fall_back_to_decoding(tmp_path, monkeypatch):
    path = tmp_path / "order.h5"
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v0", timestamp=t0) as g:
            g.create_dataset("x", data=np.arange(10.0, 18.0), chunks=(4,))
        with vf.stage_version("v1", timestamp=t0 + dt.timedelta(days=2)) as g:
            g["x"][0] = 1.0  # stores a chunk
        with vf.stage_version("v2", prev_version="v0", timestamp=t0 + dt.timedelta(days=1)) as g:
            g["x"][0] = 1.0  # maps v1's chunk, yet comes first in the log: it counts it
    fast, slow, _ = _logs(path, monkeypatch)
    assert fast == slow
    assert {e.name: e.new_chunks for e in fast} == {"v0": 2, "v2": 1, "v1": 0}

    path = tmp_path / "theirs_backdated.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v0", timestamp=t0) as g:
            g.create_dataset("x", data=np.arange(10.0, 18.0), chunks=(4,))
        with vf.stage_version("v1", timestamp=t0 + dt.timedelta(days=2)) as g:
            g["x"][0] = 1.0  # stores a chunk
    with h5py.File(path, "r+") as f:  # versioned-hdf5, dated before v1, maps v1's chunk: no record, decoded
        with versioned_hdf5.VersionedHDF5File(f).stage_version(
            "w", prev_version="v0", make_current=False, timestamp=t0 + dt.timedelta(days=1)
        ) as g:
            g["x"][0] = 1.0
    fast, slow, _ = _logs(path, monkeypatch)
    assert fast == slow
    assert {e.name: e.new_chunks for e in fast} == {"v0": 2, "w": 1, "v1": 0}

    path = tmp_path / "failed.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.arange(10.0, 18.0), chunks=(4,))

        def fail(group):
            raise RuntimeError("interrupted")

        with pytest.raises(RuntimeError), vf.stage_version("v1", finish=fail) as g:
            g["x"][0] = 3.0  # stored, then the commit fails: the chunk stays in raw_data
        with vf.stage_version("v1") as g:
            g["x"][0] = 3.0  # that chunk, deduplicated: no record claims it
    fast, slow, _ = _logs(path, monkeypatch)
    assert fast == slow
    assert [e.new_chunks for e in fast] == [2, 1]


def test_modify_metadata_and_rebase_agree(tmp_path, monkeypatch):
    path = tmp_path / "rewritten.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        _append_days(vf, 0, 6)
        with vf.stage_version("e1", prev_version="d3", make_current=False) as g:
            g["x"][0] = np.ones(5, np.float32)
        with vf.stage_version("e2", prev_version="d5", rebase=False) as g:
            g["x"][1] = np.ones(5, np.float32)
        with vf.stage_version("e3", prev_version="d5", rebase=True) as g:  # merged onto e2
            g["x"][2] = np.ones(5, np.float32)
        assert vf.version_info("e3").prev_version == "e2"
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow and decoded == []
    with h5py.File(path, "r+") as f:
        xv.modify_metadata(f, "x", dtype="f8")  # every chunk rewritten
    fast, slow, _ = _logs(path, monkeypatch)
    assert fast == slow

    path = tmp_path / "rechunked.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.arange(4.0), chunks=(4,))
        with vf.stage_version("v1") as g:
            g["x"].attrs["a"] = 1
        xv.modify_metadata(f, "x", chunks=(8,))  # as many chunks, each rewritten: the records' rows moved
    with h5py.File(path, "r+") as f:
        with versioned_hdf5.VersionedHDF5File(f).stage_version("t") as g:
            g["x"].attrs["a"] = 1  # nothing changed: compared with v1 as it is now
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow
    assert fast[-1].changed == ()
    assert decoded == []  # no record holds: every version decoded once, by the computed path


def _day(t: int) -> xr.Dataset:
    rng = np.random.default_rng(t)
    ds = xr.Dataset(
        {"sst": (("time", "lat"), rng.normal(20, 2, (1, 6)).astype("f4"), {"units": "degC"})},
        coords={"time": pd.date_range("2024-01-01", periods=1) + pd.Timedelta(days=t), "lat": np.arange(6.0)},
    )
    ds["sst"].encoding["chunks"] = (1, 6)
    return ds


def test_xarray_commits_agree_and_the_frame_matches(tmp_path, monkeypatch):
    path = tmp_path / "sst.h5"
    for t in range(6):
        _day(t).vhdf5.commit(f"d{t}", path=path, append_dim="time")
    with xr.open_dataset(path, engine="vhdf5") as ds:
        edited = ds.load()
    edited["sst"].attrs["units"] = "K"
    edited.vhdf5.commit("attrs", path=path, message="units")  # the whole Dataset again: chunks deduplicated
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow and decoded == []
    frame = xv.xr.version_log_frame(path)
    with h5py.File(path, "r") as f:
        only = version_log(f, variables_only=True)
    assert [e.changed for e in only] == list(frame["changed"])
    assert list(frame["new_chunks"]) == [e.new_chunks for e in fast]
    assert fast[-1].changed == ("sst",) and fast[-1].new_chunks == 0 and fast[-1].message == "units"


# -- random histories ---------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_POOL = [0.0, 1.0, 2.0, np.nan]
_OPS = st.lists(
    st.tuples(
        st.sampled_from(["append", "edit", "attr", "drop_y", "branch", "backdate", "delete", "theirs"]),
        st.integers(0, 1000),
    ),
    min_size=1,
    max_size=12,
)


def _play(vf, ops) -> None:
    """Commit ``ops`` through ``vf``: appends, edits and attributes from small pools (so chunks and
    values repeat), a dataset dropped and re-created, branches, timestamps out of commit order, deletions."""
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    with vf.stage_version("v0", timestamp=t0) as g:
        g.create_dataset("x", data=np.zeros((2, 3)), chunks=(1, 3), fillvalue=0.0)
        g.create_dataset("y", data=np.ones(4), chunks=(2,))
    for i, (op, k) in enumerate(ops, start=1):
        name, names = f"v{i}", vf.versions
        when = t0 + dt.timedelta(hours=i)
        value = _POOL[k % len(_POOL)]
        if op == "delete":
            if len(names) > 1:
                xv.delete_versions(vf, [names[k % len(names)]])
            continue
        prev = names[k % len(names)] if op in ("branch", "backdate") else None
        if op == "backdate":
            when = t0 + dt.timedelta(minutes=k % 7)
        with vf.stage_version(name, prev_version=prev, timestamp=when, make_current=op != "branch") as g:
            if "x" not in g:  # the current version was deleted: staging starts from the empty first one
                g.create_dataset("x", data=np.zeros((2, 3)), chunks=(1, 3), fillvalue=0.0)
            if op == "append":
                x = g["x"]
                x.resize((x.shape[0] + 1, 3))
                x[-1] = value
            elif op in ("edit", "branch", "backdate"):
                x = g["x"]
                x[k % x.shape[0], k % 3] = value
            elif op == "attr":
                g["x"].attrs["a"] = [1, 1.0, "one", np.nan][k % 4]
            elif op == "drop_y":
                if "y" in g:
                    del g["y"]
                else:
                    g.create_dataset("y", data=np.full(4, value), chunks=(2,))


@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_random_histories_agree(tmp_path_factory, monkeypatch, ops):
    path = tmp_path_factory.mktemp("random") / "h.h5"
    with h5py.File(path, "w") as f:
        _play(xv.VersionedHDF5File(f), [op for op in ops if op[0] != "theirs"])
    theirs = [k for op, k in ops if op == "theirs"]
    if theirs:  # versioned-hdf5 commits on top
        with h5py.File(path, "r+") as f:
            vh = versioned_hdf5.VersionedHDF5File(f)
            for j, k in enumerate(theirs):
                with vh.stage_version(f"t{j}") as g:
                    if "x" not in g:  # as in _play: the current version was deleted
                        g.create_dataset("x", data=np.zeros((2, 3)), chunks=(1, 3), fillvalue=0.0)
                    g["x"][0, k % 3] = _POOL[k % len(_POOL)]
    fast, slow, decoded = _logs(path, monkeypatch)
    assert fast == slow
    if not theirs and not any(op == "delete" for op, _ in ops):
        assert decoded == []  # every version of this package has a record that holds
