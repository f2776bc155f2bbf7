"""A file replaced at its path (``vhdf5 repack``) never takes a commit into the old, unlinked copy.

``repack`` writes a compact copy and moves it over the file. A writer that was waiting
for the file's lock meanwhile, or a handle opened before, holds the old inode: a
commit through it would return and be lost. :func:`open_file` opens the new file
instead, and a mutation through an old handle raises ``StaleVersionError``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import threading

import h5py
import numpy as np
import pytest

from xarray_vhdf5 import StaleVersionError, VersionedHDF5File, open_file, repack


def _versions(path) -> list[str]:
    with h5py.File(path, "r") as f:
        return sorted(k for k in f["_version_data/versions"] if not k.startswith("__"))


@pytest.fixture
def history(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as h:
        vf = VersionedHDF5File(h)
        for i in range(3):
            with vf.stage_version(f"v{i}") as g:
                if "x" in g:
                    g["x"][:] = np.arange(100.0) + i
                else:
                    g.create_dataset("x", data=np.arange(100.0), chunks=(10,))
    return path


def test_open_file_waiting_for_a_replaced_file_opens_the_new_one(history, tmp_path):
    # Play repack's part by hand: hold libhdf5's lock of the old file, move a copy over it, let go.
    copy = tmp_path / "copy.h5"
    shutil.copy(history, copy)
    old = os.open(history, os.O_RDWR)
    fcntl.flock(old, fcntl.LOCK_EX)
    result: dict = {}

    def writer():
        try:
            with open_file(history, "a", timeout=30) as h:
                with VersionedHDF5File(h).stage_version("late") as g:
                    g["x"][:5] = -3
            result["ok"] = True
        except BaseException as exc:  # noqa: BLE001 (reported by the assertion below)
            result["error"] = exc

    t = threading.Thread(target=writer)
    t.start()
    t.join(0.3)
    assert t.is_alive(), "the writer did not wait for the lock"
    os.replace(copy, history)
    fcntl.flock(old, fcntl.LOCK_UN)
    os.close(old)
    t.join(30)
    assert result == {"ok": True}
    assert _versions(history) == ["late", "v0", "v1", "v2"]
    with h5py.File(history, "r") as f:
        np.testing.assert_array_equal(VersionedHDF5File(f)["late"]["x"][:5], -3)


def _commit_after_replacing(h, history, replacement, match: str) -> None:
    """Move ``replacement`` over ``history`` while ``h`` is open, then check a commit through ``h`` is refused."""
    try:
        vf = VersionedHDF5File(h)
        os.replace(replacement, history)
        with pytest.raises(StaleVersionError, match=match):
            with vf.stage_version("lost") as g:
                g["x"][:5] = -3
    finally:
        h.close()
    assert _versions(history) == ["v0", "v1", "v2"]


@pytest.mark.parametrize("opener", ["open_file", "h5py"])
def test_a_handle_opened_before_a_repack_refuses_to_commit(history, opener):
    repacked = str(history) + ".repacked"
    repack(history, repacked)  # made first: repack waits for the handles that have the file open
    h = open_file(history, "a") if opener == "open_file" else h5py.File(history, "a", locking=False)
    _commit_after_replacing(h, history, repacked, "(was replaced|was changed by another process) since")


def test_a_mutation_through_a_replaced_handle_is_refused_even_when_the_counters_agree(history, tmp_path):
    """The write counters of the copy may equal the handle's (a byte copy); the inode may not."""
    copy = tmp_path / "copy.h5"
    shutil.copy(history, copy)
    _commit_after_replacing(open_file(history, "a"), history, copy, "was replaced since this h5py file opened it")
