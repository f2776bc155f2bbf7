"""Kill a journaled commit at each of its writes, on a file created with (argv[1] given) or without fs_persist.

Measured 2026-11-26: before journaled closes, 5 of 59 fs_persist files no longer opened
(libhdf5 writes the free-space managers at close, after the last mutation's flush), 0 of
59 default files; with the close journaled (_versions/mutation.py), 0 of 59 either way.
"""

import os
import shutil
import signal
import sys

import h5py
import numpy as np

from xarray_vhdf5 import VersionedHDF5File, open_file
from xarray_vhdf5._versions.journal import OsIO

KW = dict(fs_strategy="fsm", fs_persist=True, fs_threshold=1) if len(sys.argv) > 1 else {}
base = "/tmp/kt_base.h5"
if os.path.exists(base):
    os.remove(base)
with h5py.File(base, "w", **KW) as f:
    with VersionedHDF5File(f).stage_version("v1") as g:
        g.create_dataset("x", data=np.arange(1000.0), chunks=(100,))
bad = 0
for n in range(1, 60):
    p = f"/tmp/kt_{n}.h5"
    shutil.copy(base, p)
    pid = os.fork()
    if pid == 0:

        class Killer(OsIO):
            count = 0
            kill_at = n

            def pwrite(self, fd, data, offset):
                Killer.count += 1
                if Killer.count == Killer.kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                return super().pwrite(fd, data, offset)

        try:
            with open_file(p, io=Killer()) as f:
                with VersionedHDF5File(f).stage_version("v2") as g:
                    g["x"][5] = -1
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    try:
        with open_file(p) as f:
            vf = VersionedHDF5File(f)
            assert vf["v1"]["x"][5] == 5.0
    except Exception as e:  # noqa: BLE001 any failure to open or read counts as a damaged file
        bad += 1
        print(n, type(e).__name__, e)
    os.remove(p)
print("damaged", bad)
