"""A journaled handle journals its close when libhdf5 writes there (files with persistent free space).

libhdf5 writes a file's free-space managers when it closes a file created with
``fs_persist=True``, after the last mutation's flush. Unjournaled, a process killed
during those writes left files that no longer open ("invalid file space strategy");
``open_file``'s handles now journal that close (``_versions/mutation.py``).
"""

from __future__ import annotations

import os
import shutil

import h5py
import numpy as np

from xarray_vhdf5 import VersionedHDF5File, open_file
from xarray_vhdf5.testing._powercut import KillAtIO, in_forked_child

FS_PERSIST = {"fs_strategy": "fsm", "fs_persist": True, "fs_threshold": 1}


def test_a_kill_at_any_write_of_a_commit_and_its_close_loses_nothing(tmp_path):
    base = tmp_path / "base.h5"
    with h5py.File(base, "w", **FS_PERSIST) as f:
        with VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(1000.0), chunks=(100,))
    killed_in_close = 0
    # every fourth write (the suite stays under 5 minutes on 2 cores); every one with VHDF5_EVERY_KILL=1
    for n in range(1, 400, 1 if os.environ.get("VHDF5_EVERY_KILL") else 4):
        p = tmp_path / f"k{n}.h5"
        shutil.copyfile(base, p)

        def work(n=n, p=p):
            io = KillAtIO(n)
            f = open_file(p, io=io)
            io.arm()
            with VersionedHDF5File(f).stage_version("v2") as g:
                g["x"][5] = -1.0
            f.close()

        status = in_forked_child(work)
        if not os.WIFSIGNALED(status):
            assert os.WEXITSTATUS(status) == 0, "the commit failed without being killed"
            break  # every write of the commit and of the close was a kill point
        with open_file(p) as f:  # rolls back what the killed process left
            vf = VersionedHDF5File(f)
            np.testing.assert_array_equal(vf["v1"]["x"][:], np.arange(1000.0))
            if "v2" in vf.versions:  # the commit finished before the kill (during the close)
                killed_in_close += 1
                assert vf["v2"]["x"][5] == -1.0
        os.remove(p)
    assert n > 10 and killed_in_close >= 2  # the close of such a file writes several times
