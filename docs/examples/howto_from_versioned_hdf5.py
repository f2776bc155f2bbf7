"""How-to: work on a file versioned-hdf5 wrote. Run by docs/conf.py."""

import subprocess
import sys

# [start-setup]
import h5py
import numpy as np
import versioned_hdf5

with h5py.File("archive.h5", "w") as f:  # versioned-hdf5 2.6, as an existing pipeline writes
    vf = versioned_hdf5.VersionedHDF5File(f)
    with vf.stage_version("2024-06-01") as g:
        g.create_dataset("sst", data=np.full((365, 90, 180), 15.0, "f4"), chunks=(1, 90, 180))
    with vf.stage_version("2024-06-02") as g:
        g["sst"][152] = 16.5
# [end-setup]

# [start-read]
import xarray as xr

import xarray_vhdf5
from xarray_vhdf5 import VersionedHDF5File

old = xr.open_dataset("archive.h5", engine="vhdf5", version="2024-06-01")
print(old["sst"].dims, float(old["sst"][152, 0, 0]))  # no dimension names stored: phony ones
with VersionedHDF5File.open("archive.h5") as reader:  # h5py-level, never blocks a writer
    print(reader.versions, reader.read_versions("sst", (152, 0, 0)))
# [end-read]


def vhdf5(*args: str) -> None:
    """The ``vhdf5`` command, as from a shell."""
    done = subprocess.run([sys.executable, "-m", "xarray_vhdf5", *args], capture_output=True, text=True)
    print(f"$ vhdf5 {' '.join(args)}")
    print(done.stdout.rstrip())
    assert done.returncode == 0, done.stderr


# [start-fill]
vhdf5("fill-maps", "archive.h5")  # once: what this package's commits store beside each version
report = xarray_vhdf5.fill_chunk_maps("archive.h5")  # the same from Python; nothing left to do
print(report.stored, report.present)
# [end-fill]

# [start-commit]
with h5py.File("archive.h5", "r+") as f:  # versioned-hdf5's API, this package's commit
    with VersionedHDF5File(f).stage_version("2024-06-03") as g:
        g["sst"][153] = 17.0

staged = xr.open_dataset("archive.h5", engine="vhdf5").vhdf5.stage()  # the current version, lazy
staged["sst"][153, :10, :10] = 14.0
staged.vhdf5.commit("2024-06-03-qc", message="QC fix")  # writes the one changed chunk
staged.close()
# [end-commit]

# [start-back]
with h5py.File("archive.h5", "r") as f:  # versioned-hdf5 reads every version back
    vf = versioned_hdf5.VersionedHDF5File(f)
    print(sorted(vf.versions), vf.current_version, vf["2024-06-03-qc"]["sst"][153, :2, 0])
vhdf5("log", "archive.h5")
# [end-back]
