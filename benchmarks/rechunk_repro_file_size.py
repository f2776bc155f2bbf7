"""Reproducer: ``rechunk`` on a plain ``h5py.File`` doubles the file; ``vhdf5 rechunk`` does not (issue 22).

``xarray_vhdf5._versions.rechunk.rechunk`` documents ``f`` as "VersionedHDF5File or
h5py.File" and the history as rewritten "into the old raw_data's space". Given
``h5py.File(path, "r+")`` the file ends at about twice its size (measured in
``bench_rechunk.py``: 2.20 GB -> 4.52 GB uncompressed, 0.90 GB -> 1.77 GB gzip);
the CLI, which opens the file with ``versions.mutation.open_file``, ends at
about its size. Usage::

    python benchmarks/rechunk_repro_file_size.py   # prints both sizes for a 100 MB record
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions.rechunk import rechunk

with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "src.h5")
    with h5py.File(src, "w") as f:
        with VersionedHDF5File(f).stage_version("v0") as g:
            ds = g.create_dataset("tas", shape=(96, 360, 720), chunks=(1, 360, 720), dtype="f4")
            for t in range(0, 96, 16):
                ds[t : t + 16] = np.random.default_rng(t).standard_normal((16, 360, 720), dtype=np.float32)
    a, b = os.path.join(tmp, "a.h5"), os.path.join(tmp, "b.h5")
    shutil.copyfile(src, a)
    shutil.copyfile(src, b)
    with h5py.File(a, "r+") as f:
        rechunk(f, "tas", (32, 16, 16), max_mem="60MB")
    vhdf5 = str(Path(sys.executable).with_name("vhdf5"))
    subprocess.run(
        [vhdf5, "rechunk", b, "tas", "--chunks", "32,16,16", "--max-mem", "60MB"], check=True, stdout=subprocess.DEVNULL
    )
    size = os.path.getsize(src)
    print(f"source {size / 1e6:.1f} MB")
    print(f"rechunk(h5py.File(path, 'r+')): {os.path.getsize(a) / 1e6:.1f} MB ({os.path.getsize(a) / size:.2f}x)")
    print(f"vhdf5 rechunk:                  {os.path.getsize(b) / 1e6:.1f} MB ({os.path.getsize(b) / size:.2f}x)")
