"""How-to: read a file while another process commits to it. Run by docs/conf.py."""

import subprocess
import sys

# [start-setup]
import numpy as np
import xarray as xr

import xarray_vhdf5  # noqa: F401
from xarray_vhdf5 import VersionedHDF5File, open_file

with open_file("data.h5") as f:  # every commit journaled
    with VersionedHDF5File(f).stage_version("v1") as g:
        g.create_dataset("x", data=np.zeros(10_000), chunks=(1000,))
# [end-setup]

# [start-writer]
WRITER = """
import sys
from xarray_vhdf5 import VersionedHDF5File, open_file

for n in range(2, 6):
    with open_file(sys.argv[1]) as f:          # takes the file's write lock
        with VersionedHDF5File(f).stage_version(f"v{n}") as g:
            g["x"][:1000] = n
"""
# [end-writer]

# [start-read]
with VersionedHDF5File.open("data.h5") as reader:  # holds no HDF5 handle between calls
    x = reader["v1"]["x"]
    # another process commits four versions while the reader is open
    subprocess.run([sys.executable, "-c", WRITER, "data.h5"], check=True)
    print(reader.versions)  # the versions now
    print(x[:3], reader["v5"]["x"][:3])  # v1 as it was; the newest version
    # [end-read]
    assert list(reader.versions)[-1] == "v5" and x[0] == 0

# [start-xarray]
ds = xr.open_dataset("data.h5", engine="vhdf5", version="v3")  # lazy, no handle kept
subprocess.run([sys.executable, "-c", WRITER.replace("range(2, 6)", "range(6, 8)"), "data.h5"], check=True)
print(float(ds["x"][0]), ds.vhdf5.version)  # still v3's points
print(xr.open_dataset("data.h5", engine="vhdf5").vhdf5.version)  # a new open sees v7
# [end-xarray]
assert float(ds["x"][0]) == 3.0
