"""How-to: QC on a branch, merged back; a tag for a paper. Run by docs/conf.py at every build."""

# [start-setup]
from importlib import resources

import xarray as xr

import xarray_vhdf5 as xv

coads = resources.files("xarray_vhdf5") / "data" / "coads_sst_airt.nc"
xr.open_dataset(coads, decode_times=False).vhdf5.commit("received", path="coads.h5")
xv.create_branch("coads.h5", "qc")  # at the current version
# [end-setup]


def open_version(version=None):
    return xr.open_dataset("coads.h5", engine="vhdf5", version=version, decode_times=False)


# [start-qc]
qc = open_version("qc").vhdf5.stage()
box = {"TIME": -1, "COADSY": slice(40, 50), "COADSX": slice(60, 70)}
qc["SST"][box] = qc["SST"][box].values + 0.5  # a cold bias corrected
qc.vhdf5.commit("qc-bias", message="SST +0.5 degC on a 10x10 patch")  # moves qc, not main
# [end-qc]

# [start-main]
main = open_version().vhdf5.stage()
main["AIRT"][0, 45, 60] = 20.0  # main goes on meanwhile
main.vhdf5.commit("airt-fix", message="AIRT: one station re-read")
# [end-main]

# [start-merge]
report = xv.merge("coads.h5", "qc", version="merged")  # three-way, chunk by chunk
print(report)
xv.create_tag("coads.h5", "paper-2026")  # main's version, for good
print("branches:", xv.list_branches("coads.h5"))
print("tags:", xv.list_tags("coads.h5"))
# [end-merge]

merged = open_version("paper-2026")
received = open_version("received")
assert float(merged["AIRT"][0, 45, 60]) == 20.0
sst_delta = (merged["SST"] - received["SST"]).isel(TIME=-1, COADSY=slice(40, 50), COADSX=slice(60, 70))
assert abs(float(sst_delta.mean()) - 0.5) < 1e-5

# [start-conflict]
for branch, value in (("qc", 1.0), ("main", 2.0)):
    staged = open_version(branch).vhdf5.stage()
    staged["SST"][0, 45, 100] = value
    staged.vhdf5.commit(f"edit-on-{branch}")
try:
    xv.merge("coads.h5", "qc")
except xv.ConflictError as error:
    print("conflict:", {path: points.tolist() for path, points in error.points.items()})
xv.merge("coads.h5", "qc", version="qc-wins", resolve="theirs")
print(float(open_version()["SST"][0, 45, 100]))
# [end-conflict]
assert float(open_version()["SST"][0, 45, 100]) == 1.0
