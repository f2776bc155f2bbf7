"""An interrupted modify_metadata (or deletion) through a plain h5py handle is finished by the next writer.

A ``modify_metadata`` through ``h5py.File(path, "a")`` has no journal: killed between
two of its flushes it leaves versions mapping ``_version_data/<name>/__vhdf5_new_<k>/raw_data``
(issue 17's SIGKILL harness: 7 of 150 kills). Every version still reads its data;
``check_file`` says so with a warning, not an error; the next ``VersionedHDF5File``
opened writable finishes the run (or rolls it back if it died before any version used
the new raw_data), and the next commit works, read back by versioned-hdf5 2.6 too.

The kills are deterministic: a forked child runs the call with
``scratch._barrier_hook`` set to ``os._exit`` at one barrier (after its flush), as
``tests/test_modify_metadata.py`` does.
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
import versioned_hdf5

import xarray_vhdf5
from xarray_vhdf5._versions import delete_versions, modify_metadata, scratch
from xarray_vhdf5._versions import metadata as metadata_mod
from xarray_vhdf5._versions.check import check_file

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

#: The barriers of modify_metadata between its first flush and its clean-up.
BARRIERS = ["written", "switched", "linked", "rebuilt", "relinked"]
#: Barriers after which versions map the new raw_data by its temporary name.
MAPPING_NEW = ["switched", "linked", "rebuilt"]
X0 = np.arange(24 * 7, dtype="f8").reshape(24, 7)
#: The two changes the harness alternates: chunks, compression.
CHANGES = {"chunks": dict(chunks=(5, 7)), "compression": dict(compression="gzip", compression_opts=4)}


def make(path):
    """v0 .. v3 (a resize, a branch) of x (2-d float64, chunks (4, 7)) and y (int64)."""
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=X0, chunks=(4, 7), fillvalue=-1.0)
            g.create_dataset("y", data=np.arange(40), chunks=(8,))
        with vf.stage_version("v1") as g:
            g["x"][3:9] = 0.5
            g["y"][0] = 7
        with vf.stage_version("v2") as g:
            g["x"].resize((30, 7))
            g["x"][27] = 2.0
        with vf.stage_version("b3", prev_version="v1", make_current=False) as g:
            g["x"][0] = np.nan


def values(path, lib=xarray_vhdf5) -> dict:
    """Every version's x and y, as bytes, read through ``lib`` (read-only for ours)."""
    out = {}
    with h5py.File(path, "r" if lib is xarray_vhdf5 else "r+") as f:
        vf = lib.VersionedHDF5File(f)
        for v in [n for n in f["_version_data/versions"] if n != "__first_version__"]:
            for name in ("x", "y"):
                arr = np.asarray(vf[v][name][()])
                out[v, name] = (arr.shape, arr.tobytes())
        if lib is versioned_hdf5:
            vf.close()
    return out


def layout(path) -> dict:
    """x's raw_data chunks and compression, what each version's dataset says, and our leftovers."""
    with h5py.File(path, "r") as f:
        raw = f["_version_data/x/raw_data"]
        versions = f["_version_data/versions"]
        return {
            "chunks": tuple(int(c) for c in raw.attrs["chunks"]),
            "compression": (raw.compression, raw.compression_opts),
            "versions": {
                v: (tuple(int(c) for c in versions[v]["x"].attrs["chunks"]), versions[v]["x"].attrs["raw_data"])
                for v in versions
                if v != "__first_version__"
            },
            "leftovers": sorted(k for k in f["_version_data/x"] if k.startswith("__vhdf5_")),
            "scratch": "__vhdf5_scratch__" in f["_version_data"],
        }


def kill_at(path, stage, call=modify_metadata, *args, **kwargs) -> None:
    """Run ``call(h5py.File(path, "a"), *args, **kwargs)`` in a child killed (os._exit) at barrier ``stage``."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            scratch._barrier_hook = lambda s: os._exit(3) if s == stage else None
            with h5py.File(path, "a") as f:
                call(f, *args, **kwargs)
        finally:
            os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3, f"not killed at {stage!r}"


def commit_next(f, name="next"):
    vf = xarray_vhdf5.VersionedHDF5File(f)
    with vf.stage_version(name) as g:
        g["x"][1] = 99.0
        g["y"][2] = -5
    return vf


def expected_after_next(before: dict) -> dict:
    shape, raw = before["v2", "x"]
    x = np.frombuffer(raw, "f8").reshape(shape).copy()
    x[1] = 99.0
    yshape, yraw = before["v2", "y"]
    y = np.frombuffer(yraw, "i8").copy()
    y[2] = -5
    return {**before, ("next", "x"): (shape, x.tobytes()), ("next", "y"): (yshape, y.tobytes())}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("stage", BARRIERS)
def test_killed_run_is_finished_by_the_next_writer(tmp_path, stage, change):
    path, ref = tmp_path / "killed.h5", tmp_path / "ref.h5"
    make(path)
    make(ref)
    before = values(path)
    with h5py.File(ref, "a") as f:
        modify_metadata(f, "x", **CHANGES[change])
    target = layout(ref)

    kill_at(path, stage, modify_metadata, "x", **CHANGES[change])
    # Not finished yet: every version reads what it read, and the check finds no error.
    assert values(path) == before
    report = check_file(path)
    assert report.ok, str(report)
    interrupted = [p for p in report.warnings if "modify_metadata run was interrupted" in p.what]
    assert bool(interrupted) == (stage in MAPPING_NEW), str(report)
    assert check_file(path, rehash=True).ok

    # The next writer finishes it on open: no leftover, the target metadata (or, killed
    # before any version used the new raw_data, the old one) in every version.
    with h5py.File(path, "a") as f:
        commit_next(f)
    got = layout(path)
    assert got["leftovers"] == [] and not got["scratch"], got
    if stage == "written":  # rolled back: no version had switched
        assert got["chunks"] == (4, 7) and got["compression"] == (None, None)
    else:
        assert (got["chunks"], got["compression"]) == (target["chunks"], target["compression"])
    assert {c for c, _ in got["versions"].values()} == {got["chunks"]}
    assert {r for _, r in got["versions"].values()} == {"/_version_data/x/raw_data"}
    expected = expected_after_next(before)
    assert values(path) == expected
    assert values(path, versioned_hdf5) == expected
    report = check_file(path, rehash=True)
    assert report.ok and not report.warnings, str(report)


def test_interrupted_in_process_then_commit_through_the_same_handle(tmp_path):
    """modify_metadata raising halfway (here at a barrier) leaves the handle's next commit working."""
    path = tmp_path / "inproc.h5"
    make(path)
    before = values(path)

    def boom(stage):
        if stage == "switched":
            raise KeyboardInterrupt

    with h5py.File(path, "a") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        scratch._barrier_hook = boom
        try:
            with pytest.raises(KeyboardInterrupt):
                modify_metadata(vf, "x", chunks=(6, 7))
        finally:
            scratch._barrier_hook = None
        with vf.stage_version("next") as g:
            g["x"][1] = 99.0
            g["y"][2] = -5
        assert np.asarray(vf["next"]["x"][1]).tolist() == [99.0] * 7
    got = layout(path)
    assert got["leftovers"] == [] and not got["scratch"] and got["chunks"] == (6, 7)
    assert values(path) == expected_after_next(before)
    assert values(path, versioned_hdf5) == expected_after_next(before)


def test_finish_interrupted_and_other_datasets(tmp_path):
    """finish_interrupted at the h5py level; modify_metadata of another dataset finishes x first."""
    path = tmp_path / "other.h5"
    make(path)
    before = values(path)
    kill_at(path, "linked", modify_metadata, "x", chunks=(5, 7))
    with h5py.File(path, "a") as f:
        modify_metadata(f, "y", chunks=(16,))
    got = layout(path)
    assert got["leftovers"] == [] and not got["scratch"] and got["chunks"] == (5, 7)
    assert values(path) == before

    kill_at(path, "rebuilt", modify_metadata, "x", compression="gzip")
    with h5py.File(path, "a") as f:
        assert metadata_mod.finish_interrupted(f) == ["x"]
        assert metadata_mod.finish_interrupted(f) == []
    got = layout(path)
    assert got["leftovers"] == [] and not got["scratch"] and got["compression"][0] == "gzip"
    assert values(path) == before == values(path, versioned_hdf5)
    assert check_file(path).ok


def test_check_still_errors_on_a_missing_new_raw_data(tmp_path):
    """A version naming a __vhdf5_new_<k>/raw_data that is not there is an error; the real one a warning."""
    path = tmp_path / "missing.h5"
    make(path)
    kill_at(path, "switched", modify_metadata, "x", chunks=(5, 7))
    report = check_file(path)
    assert report.ok and any("modify_metadata run was interrupted" in p.what for p in report.warnings)
    with h5py.File(path, "a") as f:
        f["_version_data/versions/v1/x"].attrs["raw_data"] = "/_version_data/x/__vhdf5_new_9/raw_data"
    report = check_file(path)
    assert [p.version for p in report.errors] == ["v1"], str(report)
    assert "__vhdf5_new_9" in report.errors[0].what


def test_half_swapped_deletion_is_recovered_on_open(tmp_path):
    """A delete_versions killed between the two moves of a link swap leaves a version without x:
    the next writer's open puts it back (Scratch.recover), and the next commit works."""
    path = tmp_path / "delete.h5"
    make(path)
    before = values(path)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:

            def die(self, parent, new, relink):
                self.f.move(f"{parent}/{next(iter(new))}", f"{self.path}/dead")
                self.f.file.flush()
                os._exit(3)

            scratch.Scratch.replace_members = die
            with h5py.File(path, "a") as f:
                delete_versions(f, ["v0", "v1"])
        finally:
            os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3
    with h5py.File(path, "a") as f:
        vf = commit_next(f)
        assert sorted(vf.versions) == ["b3", "next", "v2"]
        assert "__vhdf5_scratch__" not in f["_version_data"]
    got = values(path)
    for key, value in before.items():
        if key[0] in got:
            assert got[key] == value, key
    assert check_file(path).ok


def test_killed_inside_the_relink(tmp_path):
    """Killed between unlinking the old raw_data and linking the new one (inside step C): the
    dataset group has no raw_data. A warning, and the next writer links it and finishes."""
    path = tmp_path / "relink.h5"
    make(path)
    before = values(path)
    kill_at(path, "switched", modify_metadata, "x", chunks=(5, 7))
    with h5py.File(path, "a") as f:
        del f["_version_data/x/raw_data"]  # what the first half of step C does
    assert values(path) == before
    report = check_file(path, rehash=True)
    assert report.ok, str(report)
    assert any("raw_data is missing" in p.what for p in report.warnings), str(report)
    with h5py.File(path, "a") as f:
        commit_next(f)
    got = layout(path)
    assert got["leftovers"] == [] and not got["scratch"] and got["chunks"] == (5, 7)
    assert values(path) == values(path, versioned_hdf5) == expected_after_next(before)
    assert check_file(path, rehash=True).ok
