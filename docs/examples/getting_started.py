"""Getting started: a first versioned file, opened with xarray, a commit, the log.

Run by docs/conf.py at every build (docs/getting-started.md shows it piece by piece).
"""

# [start-first-file]
import numpy as np
import pandas as pd
import xarray as xr

import xarray_vhdf5  # registers engine="vhdf5" and the .vhdf5 accessor

rng = np.random.default_rng(0)
ds = xr.Dataset(
    {"sst": (("time", "lat", "lon"), (15 + rng.standard_normal((3, 90, 180))).astype("float32"))},
    coords={
        "time": pd.date_range("2024-06-01", periods=3),
        "lat": np.arange(-89.0, 90.0, 2.0),
        "lon": np.arange(-179.0, 180.0, 2.0),
    },
)
ds["sst"].attrs["units"] = "degC"
ds.vhdf5.commit("2024-06-03", path="sst.h5", message="first three days")
# [end-first-file]

# [start-open]
latest = xr.open_dataset("sst.h5", engine="vhdf5")  # lazy: nothing read yet
print(latest.vhdf5.version, dict(latest.sizes))
print(float(latest["sst"][0, 0, 0]))
# [end-open]
assert latest.vhdf5.version == "2024-06-03"
xr.testing.assert_equal(latest, ds)

# [start-commit]
staged = latest.vhdf5.stage()  # editable, still lazy
staged["sst"][0, :10, :10] = 15.0  # stages only the touched chunk
staged.vhdf5.commit("qc-1", message="QC: reset a 10x10 patch of day 1")

old = xr.open_dataset("sst.h5", engine="vhdf5", version="2024-06-03")
new = xr.open_dataset("sst.h5", engine="vhdf5")
print(new.vhdf5.version, float(old["sst"][0, 0, 0]), float(new["sst"][0, 0, 0]))
# [end-commit]
assert float(new["sst"][0, 0, 0]) == 15.0
assert float(old["sst"][0, 0, 0]) == float(ds["sst"][0, 0, 0])

# [start-log]
log = xarray_vhdf5.xr.version_log_frame("sst.h5")
print(log[["parent", "message", "new_chunks", "new_bytes"]])
# [end-log]
assert list(log.index) == ["2024-06-03", "qc-1"]

# The same log from the command line, as `vhdf5 log sst.h5` prints it.
from click.testing import CliRunner  # noqa: E402

from xarray_vhdf5.cli._main import cli  # noqa: E402

result = CliRunner().invoke(cli, ["log", "sst.h5"])
assert result.exit_code == 0, result.output
print("---- vhdf5 log sst.h5")
print(result.output, end="")
