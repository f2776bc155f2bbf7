"""How-to: check a file after a crash and repair it. Run by docs/conf.py."""

import subprocess
import sys

# [start-setup]
import h5py
import numpy as np
import xarray as xr

import xarray_vhdf5  # noqa: F401
from xarray_vhdf5 import VersionedHDF5File

with h5py.File("data.h5", "w") as f:  # a plain h5py handle: not journaled
    vf = VersionedHDF5File(f)
    for n in range(1, 13):
        with vf.stage_version(f"v{n}") as g:
            if n == 1:
                g.create_dataset("x", data=np.zeros(1000), chunks=(100,))
            g["x"][:100] = n
# [end-setup]

# [start-tear]
# What a process killed while libhdf5 flushed that handle can leave: the versions
# group's object header torn (here: 16 bytes of it overwritten). Every version is
# still in the file, but none can be listed through the group.
with h5py.File("data.h5", "r") as f:
    at = h5py.h5o.get_info(f["_version_data/versions"].id).addr  # the header's address
with open("data.h5", "r+b") as fh:
    fh.seek(at + 8)
    fh.write(b"\xa5" * 16)
# [end-tear]

# [start-open]
try:  # a read-only h5py handle cannot repair: it says so, and what to do
    with h5py.File("data.h5", "r") as f:
        VersionedHDF5File(f)
except OSError as err:  # CorruptFileError, an OSError
    print(type(err).__name__, str(err)[:200], "...")
# [end-open]


def vhdf5(*args: str) -> int:
    """The ``vhdf5`` command, as from a shell."""
    done = subprocess.run([sys.executable, "-m", "xarray_vhdf5", *args], capture_output=True, text=True)
    print(f"$ vhdf5 {' '.join(args)}  (exit {done.returncode})")
    print(done.stdout.rstrip())
    return done.returncode


# [start-check]
vhdf5("check", "data.h5")  # exit 1: what is wrong, in plain words
# [end-check]

# [start-repair]
import warnings

from xarray_vhdf5.errors import RepairedFileWarning

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", RepairedFileWarning)
    ds = xr.open_dataset("data.h5", engine="vhdf5")  # repairs the file first, then reads
print(ds["x"].values[:3], ds.encoding["vhdf5_version"])
print(str(caught[0].message)[:400], "...")
# [end-repair]

# [start-after]
with VersionedHDF5File.open("data.h5") as reader:
    print(reader.versions[-3:], reader.read_versions("x", 0)[-3:])
vhdf5("repack", "data.h5")  # a compact copy, without the parked damaged group
print(xr.open_dataset("data.h5", engine="vhdf5")["x"].values[:3])
# [end-after]
assert vhdf5("check", "data.h5") == 0
