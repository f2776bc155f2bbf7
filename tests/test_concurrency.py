"""Several processes on one file: locks, stale handles, path-commit staleness, kills.

See :mod:`xarray_vhdf5._versions.locking` and :mod:`xarray_vhdf5._versions.mutation`.
The long stress runs (a writer with four readers for a minute, racing writers,
random SIGKILLs) are in ``tests/test_concurrency_slow.py`` (marker ``slow``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import h5py
import numpy as np
import pytest
import xarray as xr

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions import generation
from xarray_vhdf5._versions.locking import file_locks
from xarray_vhdf5._versions.mutation import open_for_writing
from xarray_vhdf5.errors import CorruptFileError, FileBusyError, StaleVersionError


def _make(path, n=3):
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        for i in range(n):
            with vf.stage_version(f"v{i}") as g:
                if i == 0:
                    g.create_dataset("x", data=np.arange(100.0), chunks=(10,))
                else:
                    g["x"][i] = -i


_HOLD = """
import sys
from xarray_vhdf5._versions.locking import file_locks
with file_locks(sys.argv[1]).writing():
    print("locked", flush=True)
    sys.stdin.readline()
"""


def _hold_write_lock(path):
    """A child process holding the file's WRITE lock until a line is written to its stdin."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "locked"
    return child


def _release(child):
    child.communicate("\n", timeout=30)


def test_second_writer_waits_then_names_the_holder(tmp_path):
    p = str(tmp_path / "f.h5")
    _make(p)
    child = _hold_write_lock(p)
    try:
        t0 = time.monotonic()
        with pytest.raises(FileBusyError) as info:
            with h5py.File(p, "a") as f:
                with VersionedHDF5File(f).stage_version("blocked") as g:
                    g["x"][0] = 42
        waited = time.monotonic() - t0
        assert isinstance(info.value, BlockingIOError)
        assert info.value.holder_pid == child.pid
        assert f"process {child.pid}" in str(info.value)
        assert waited >= 0.2  # it waited for the holder (VHDF5_LOCK_TIMEOUT below)
    finally:
        _release(child)
    with h5py.File(p, "r") as f:
        vf = VersionedHDF5File(f)
        assert "blocked" not in vf.versions and vf["v2"]["x"][0] == 0


@pytest.fixture(autouse=True)
def _short_timeout(monkeypatch):
    monkeypatch.setenv("VHDF5_LOCK_TIMEOUT", "0.3")


def test_a_writer_proceeds_once_the_holder_releases(tmp_path, monkeypatch):
    monkeypatch.setenv("VHDF5_LOCK_TIMEOUT", "20")
    p = str(tmp_path / "f.h5")
    _make(p)
    child = _hold_write_lock(p)
    threading.Timer(0.3, _release, (child,)).start()
    t0 = time.monotonic()
    with h5py.File(p, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("after") as g:
            g["x"][0] = 42
    assert time.monotonic() - t0 >= 0.25
    with h5py.File(p, "r") as f:
        assert VersionedHDF5File(f)["after"]["x"][0] == 42


def test_locks_are_reentrant_and_shared_inside_one_thread(tmp_path):
    p = str(tmp_path / "f.h5")
    _make(p)
    locks = file_locks(p)
    with locks.writing():
        with locks.writing(), locks.resolving(), locks.moving(), locks.reading_bytes():
            pass
    # Released: another thread may now take it exclusively at once.
    done = []
    t = threading.Thread(target=lambda: done.append(locks.writing(timeout=1).__enter__() is None))
    t.start()
    t.join(5)
    assert done == [True]


def test_a_stale_handle_is_refused_not_written(tmp_path):
    """Two handles of different processes, libhdf5's locking off: the second commit is refused."""
    p = str(tmp_path / "f.h5")
    _make(p)
    f = h5py.File(p, "a", locking=False)
    vf = VersionedHDF5File(f)
    with vf.stage_version("mine") as g:
        g["x"][5] = 5.5
    script = textwrap.dedent(f"""
        import h5py
        from xarray_vhdf5 import VersionedHDF5File
        with h5py.File({p!r}, "a", locking=False) as f:
            with VersionedHDF5File(f).stage_version("theirs") as g:
                g["x"][6] = 6.5
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    with pytest.raises(StaleVersionError, match="changed by another process"):
        with vf.stage_version("mine2") as g:
            g["x"][7] = 7.5
    # Checked from another process while the stale handle is still open: closing it lets
    # libhdf5 write its stale superblock (its end-of-file address), which is why writable
    # handles must keep libhdf5's locking on (docs: "Sharing a file").
    check = textwrap.dedent(f"""
        import h5py
        from xarray_vhdf5 import VersionedHDF5File
        with h5py.File({p!r}, "r", locking=False) as f:
            vf = VersionedHDF5File(f)
            assert vf.versions == ["v0", "v1", "v2", "mine", "theirs"], vf.versions
            assert vf["theirs"]["x"][6] == 6.5 and vf["theirs"]["x"][5] == 5.5
    """)
    subprocess.run([sys.executable, "-c", check], check=True)
    f.close()


def test_counters_count_commits_and_moves(tmp_path):
    p = str(tmp_path / "f.h5")
    _make(p, 4)
    with h5py.File(p, "r") as f:
        offset = generation.locate(f)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert generation.read_at(fd, offset) == (4, 0)
        with h5py.File(p, "a") as f:
            VersionedHDF5File(f).delete_versions(["v1"])
        # A mutation that moves chunks counts twice: when it starts (moves) and when it ends.
        assert generation.read_at(fd, offset) == (6, 1)
    finally:
        os.close(fd)


def test_open_for_writing_waits_for_libhdf5_lock_then_names_holder(tmp_path):
    p = str(tmp_path / "f.h5")
    _make(p)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import h5py, time, sys; f = h5py.File({p!r}, 'r'); print('open', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(FileBusyError) as info:
            with open_for_writing(p, timeout=0.3):
                pass
        assert info.value.holder_pid == holder.pid
        assert "libhdf5's file lock" in str(info.value)
    finally:
        holder.kill()
        holder.communicate()


def test_path_commit_of_an_old_version_is_refused(tmp_path):
    """ds.vhdf5.commit(path=) of a Dataset opened from A, after B was committed on A: refused."""
    p = str(tmp_path / "f.h5")
    ds = xr.Dataset({"t": ("x", np.arange(10.0))})
    ds.vhdf5.commit("A", path=p)
    a = xr.open_dataset(p, engine="vhdf5").load()
    a.close()
    b = a.copy(deep=True)
    b["t"][0] = 100.0
    b.vhdf5.commit("B", path=p)
    a2 = a.copy(deep=True)
    a2["t"][1] = 7.0
    with pytest.raises(StaleVersionError, match="undo the versions since"):
        a2.vhdf5.commit("C", path=p)
    with h5py.File(p, "r") as f:
        assert VersionedHDF5File(f).versions == ["A", "B"]
    # force=True commits it as a branch from A, which becomes the current version
    a2.vhdf5.commit("C", path=p, force=True)
    with h5py.File(p, "r") as f:
        vf = VersionedHDF5File(f)
        assert vf.version_info("C").prev_version == "A" and vf.current_version == "C"
    latest = xr.open_dataset(p, engine="vhdf5").load()
    assert latest["t"].values[0] == 0.0 and latest["t"].values[1] == 7.0
    # opened from the current version: commits on top of it, as before
    c = latest.copy(deep=True)
    c["t"][2] = 9.0
    c.vhdf5.commit("D", path=p)
    with h5py.File(p, "r") as f:
        assert VersionedHDF5File(f).version_info("D").prev_version == "C"


_HELD_OPEN_KILL = """
import os, signal, sys, h5py, numpy as np
from xarray_vhdf5 import VersionedHDF5File
f = h5py.File(sys.argv[1], "a")
vf = VersionedHDF5File(f)
for name, i in (("a", 1), ("b", 2)):
    with vf.stage_version(name) as g:
        g["x"][i] = 1000 + i
print("committed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_killed_with_the_file_held_open_keeps_every_returned_commit(tmp_path):
    """Issue 17's repro: two commits on a file held open, then SIGKILL; a new process opens it."""
    p = str(tmp_path / "f.h5")
    _make(p, 1)
    run = subprocess.run([sys.executable, "-c", _HELD_OPEN_KILL, p], capture_output=True, text=True)
    assert run.returncode == -signal.SIGKILL and "committed" in run.stdout
    with h5py.File(p, "r") as f:
        vf = VersionedHDF5File(f)
        assert vf.versions == ["v0", "a", "b"]
        assert vf["b"]["x"][1] == 1001 and vf["b"]["x"][2] == 1002 and vf["a"]["x"][2] == 2
    ds = xr.open_dataset(p, engine="vhdf5")
    assert ds["x"].values[2] == 1002
    ds.close()
    with h5py.File(p, "a") as f:  # and the next commit works
        with VersionedHDF5File(f).stage_version("c") as g:
            g["x"][3] = 3.5


_COMMIT_LOOP = """
import sys, h5py, numpy as np
from xarray_vhdf5 import VersionedHDF5File
path, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version(f"w{i}") as g:
            g["x"][i % 100] = 1000.0 + i
print("done", flush=True)
"""


def test_an_open_dataset_never_blocks_a_writer_and_keeps_its_version(tmp_path):
    """Issue 17: a notebook holding xr.open_dataset(engine='vhdf5') made every commit fail."""
    p = str(tmp_path / "f.h5")
    _make(p)
    ds = xr.open_dataset(p, engine="vhdf5", chunks={})  # lazy, dask
    before = ds["x"].values.copy()
    run = subprocess.run([sys.executable, "-c", _COMMIT_LOOP, p, "5"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(ds["x"].values, before)  # still its version
    latest = xr.open_dataset(p, engine="vhdf5")
    assert latest["x"].values[4] == 1004.0
    ds.close()
    latest.close()


def test_a_dataset_survives_a_deletion_and_a_deleted_version_says_so(tmp_path):
    p = str(tmp_path / "f.h5")
    _make(p, 6)
    keep = xr.open_dataset(p, engine="vhdf5", version="v5")
    gone = xr.open_dataset(p, engine="vhdf5", version="v3")
    expected = keep["x"].values.copy()
    with h5py.File(p, "a") as f:
        VersionedHDF5File(f).delete_versions(["v1", "v3", "v4"])  # chunks move
    np.testing.assert_array_equal(keep["x"].values, expected)
    with pytest.raises(KeyError, match="was deleted while a Dataset read from it was open"):
        gone["x"].values
    keep.close()
    gone.close()


def test_verify_detects_a_chunk_changed_on_disk(tmp_path):
    p = str(tmp_path / "f.h5")
    with h5py.File(p, "w") as f:
        with VersionedHDF5File(f).stage_version("v0") as g:
            g.create_dataset("x", data=np.arange(100.0), chunks=(10,))
        raw = f["_version_data/x/raw_data"]
        offset = raw.id.get_chunk_info(0).byte_offset
    with open(p, "r+b") as fh:  # one float of the first chunk, still a valid float
        fh.seek(offset + 8)
        fh.write(np.float64(7.0).tobytes())
    plain = xr.open_dataset(p, engine="vhdf5")
    assert plain["x"].values[1] == 7.0  # read as stored: only the hash can tell
    plain.close()
    checked = xr.open_dataset(p, engine="vhdf5", verify=True)
    with pytest.raises(CorruptFileError, match="x"):
        checked["x"].values
    checked.close()


def test_a_dataset_of_a_version_deleted_and_committed_again_says_so(tmp_path):
    """Not the new version's points under the old name (after the deletion moved chunks)."""
    p = str(tmp_path / "f.h5")
    _make(p, 4)
    old = xr.open_dataset(p, engine="vhdf5", version="v2")
    with h5py.File(p, "a") as f:
        vf = VersionedHDF5File(f)
        vf.delete_versions(["v1", "v2"])
        with vf.stage_version("v2") as g:
            g["x"][:] = -7.0
    with pytest.raises(KeyError, match="was deleted while a Dataset read from it was open"):
        old["x"].values
    old.close()


def test_a_truncated_file_is_a_corrupt_file_error_naming_it(tmp_path):
    from xarray_vhdf5 import VersionedHDF5File as VF

    p = str(tmp_path / "f.h5")
    _make(p, 3)
    size = os.path.getsize(p)
    with open(p, "r+b") as fh:
        fh.truncate(size // 2)
    with pytest.raises(CorruptFileError, match="f.h5") as info:
        xr.open_dataset(p, engine="vhdf5")
    assert isinstance(info.value, OSError) and "truncated" in str(info.value)
    with pytest.raises(CorruptFileError):
        VF.open(p).versions


def test_a_reused_inode_gets_its_own_locks_while_the_deleted_files_are_held(tmp_path):
    """The registry is keyed by (device, inode): a file created where a deleted one's inode is
    reused must not be handed the deleted file's locks, still held by a reader left open.
    (Seen in the docs build: two examples' temporary ``coads.h5`` shared an inode.)"""
    from xarray_vhdf5._versions import locking

    old, new = tmp_path / "old.h5", tmp_path / "new.h5"
    old.write_bytes(b"x")
    new.write_bytes(b"y")
    held = locking.file_locks(old)
    with held.reading_bytes():
        st = os.stat(new)
        # what inode reuse does: the new file's key finds the locks of a path gone
        os.remove(old)
        with locking._REGISTRY_LOCK:
            locking._REGISTRY[(st.st_dev, st.st_ino)] = held
        got = locking.file_locks(new)
        assert got is not held and got.path == os.path.realpath(new)
        with got.writing():  # its descriptor opens the new file
            pass


def test_a_relative_path_after_a_chdir_names_the_new_file(tmp_path, monkeypatch):
    """``coads.h5`` in another folder is another file, even when its inode was reused."""
    from xarray_vhdf5._versions import locking

    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "f.h5").write_bytes(b"x")
    (second / "f.h5").write_bytes(b"y")
    monkeypatch.chdir(first)
    held = locking.file_locks("f.h5")
    with held.reading_bytes():
        os.remove(first / "f.h5")
        monkeypatch.chdir(second)
        st = os.stat("f.h5")
        with locking._REGISTRY_LOCK:  # what inode reuse does
            locking._REGISTRY[(st.st_dev, st.st_ino)] = held
            locking._LAST["f.h5"] = ((st.st_dev, st.st_ino), held)  # as a relative key would have it
        got = locking.file_locks("f.h5")
        assert got.path == os.path.realpath(second / "f.h5")
