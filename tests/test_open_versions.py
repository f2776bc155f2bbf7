"""open_versions: several versions as one Dataset stacked along ``version``, chunk reads shared."""

from __future__ import annotations

import time

import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5._backend.manifest import ChunkManifest
from xarray_vhdf5.errors import VersionNotFoundError
from xarray_vhdf5.xr._stacked import missing_value

STACK_COORDS = ["version", "version_name", "version_time"]


def _v1() -> xr.Dataset:
    rng = np.random.default_rng(5)
    ds = xr.Dataset(
        {
            "sst": (("time", "lat", "lon"), rng.normal(15, 4, size=(6, 20, 30)).astype("f4"), {"units": "degC"}),
            "flag": (("lat", "lon"), rng.integers(0, 4, size=(20, 30)).astype("i2")),
            "name": ("lat", np.array([f"s{i}" for i in range(20)], dtype=object)),
            "depth": ((), 5.0, {"units": "m"}),
        },
        coords={
            "time": ("time", np.datetime64("2000-01-01", "ns") + np.arange(6) * np.timedelta64(1, "D")),
            "lat": ("lat", np.linspace(-40, 40, 20)),
            "lon": ("lon", np.linspace(0, 290, 30)),
        },
    )
    ds["sst"].encoding["chunks"] = (1, 10, 30)
    ds["flag"].encoding["chunks"] = (10, 10)
    return ds


@pytest.fixture
def history(tmp_path):
    """v1; v2: QC edits and a new variable ``qc``; v3: three days appended, ``flag`` removed.

    Branch ``fix`` at v2, tag ``release`` at v1.
    """
    path = tmp_path / "h.h5"
    v1 = _v1()
    v1.vhdf5.commit("v1", path=path)
    v2 = v1.copy(deep=True)
    v2["sst"][2, 12, 3] = 40.0
    v2["flag"][0, 0] = 9
    v2["qc"] = (("time",), np.arange(6, dtype="f8"))
    v2.vhdf5.commit("v2", path=path)
    extra = v2.isel(time=slice(0, 3)).assign_coords(time=v2.time.values[-1] + np.arange(1, 4) * np.timedelta64(1, "D"))
    extra["sst"] = extra.sst + np.float32(1)  # new chunks, not copies of stored ones
    v3 = xr.concat(
        [v2, extra], dim="time", data_vars="minimal", coords="minimal", compat="override", join="outer"
    ).drop_vars("flag")
    v3["sst"].encoding["chunks"] = (1, 10, 30)
    v3.vhdf5.commit("v3", path=path)
    xv.create_branch(path, "fix", at="v2")
    xv.create_tag(path, "release", at="v1")
    return path


def _one(path, version, **kw) -> xr.Dataset:
    with xr.open_dataset(path, engine="vhdf5", version=version, **kw) as ds:
        return ds.load()


def _unpadded(stacked: xr.Dataset, label, like: xr.Dataset) -> xr.Dataset:
    """``stacked`` at ``label``, cut to ``like``'s sizes and variables (the padding removed)."""
    one = stacked.sel(version=label).drop_vars(STACK_COORDS)
    one = one.isel({d: slice(0, n) for d, n in like.sizes.items() if d in one.dims})
    return one[list(like.data_vars)]


@pytest.mark.parametrize("keys", [["v1", "v2", "v3"], ["release", "fix", "main"], [0, -1, "v3"]])
def test_each_version_as_opened_alone(history, keys):
    stacked = xv.open_versions(history, keys)
    assert stacked.sizes["version"] == 3
    assert list(stacked.version_name.values) == ["v1", "v2", "v3"]
    labels = [k if isinstance(k, str) else n for k, n in zip(keys, ["v1", "v2", "v3"])]
    assert list(stacked.version.values) == labels
    log = xv.xr.version_log_frame(history)
    expected_times = log.loc[["v1", "v2", "v3"], "timestamp"].dt.tz_localize(None).values.astype("M8[ns]")
    np.testing.assert_array_equal(stacked.version_time.values, expected_times)
    assert stacked.sizes["time"] == 9  # padded to v3's
    for label, name in zip(labels, ["v1", "v2", "v3"]):
        alone = _one(history, name)
        got = _unpadded(stacked, label, alone)
        for var in alone.data_vars:
            got_var = got[var]
            if alone[var].dtype != got_var.dtype:  # promoted for padding: values equal, as float
                got_var = got_var.astype(alone[var].dtype)
            xr.testing.assert_identical(got_var, alone[var])


def test_padding_and_promotion(history):
    stacked = xv.open_versions(history, ["v1", "v2", "v3"]).load()
    # appended days: NaN where v1 and v2 have no point
    assert np.isnan(stacked.sst.sel(version="v1").isel(time=slice(6, 9))).all()
    assert not np.isnan(stacked.sst.sel(version="v3")).any()
    # qc only in v2 and v3 (float: NaN in v1); flag, int16, removed in v3: float64 with NaN
    assert np.isnan(stacked.qc.sel(version="v1")).all()
    assert stacked.flag.dtype == np.float64
    assert np.isnan(stacked.flag.sel(version="v3")).all()
    assert stacked.flag.sel(version="v2")[0, 0] == 9
    # variables every version holds whole keep their dtype (sst float32, the vlen string name)
    assert stacked.sst.dtype == np.float32
    assert stacked.name.dtype == object and stacked.depth.dtype == np.float64
    assert stacked.depth.attrs["units"] == "m"
    assert missing_value(np.dtype("i4"))[0] == np.float64
    assert np.isnat(missing_value(np.dtype("M8[ns]"))[1])


def test_open_dataset_with_a_list_of_versions(history):
    via_engine = xr.open_dataset(history, engine="vhdf5", version=["v1", "v3"])
    direct = xv.open_versions(history, ["v1", "v3"])
    xr.testing.assert_identical(via_engine.load(), direct.load())
    chunked = xr.open_dataset(history, engine="vhdf5", version=["v1", "v3"], chunks={})
    assert chunked.sst.chunks == ((2,), (1,) * 9, (10, 10), (30,))
    xr.testing.assert_identical(chunked.load(), direct)


def test_dask_chunks(history):
    stacked = xv.open_versions(history, ["v1", "v2", "v3"], chunks={})
    assert stacked.sst.chunks == ((3,), (1,) * 9, (10, 10), (30,))  # the HDF5 chunks, versions in one block
    eager = xv.open_versions(history, ["v1", "v2", "v3"]).load()
    xr.testing.assert_identical(stacked.compute(), eager)
    by_time = xv.open_versions(history, ["v1", "v2", "v3"], chunks={"time": 4})
    assert by_time.sst.chunks[1] == (4, 4, 1)
    xr.testing.assert_identical(by_time.compute(), eager)


def test_lazy_indexing_matches_numpy(history):
    lazy = xv.open_versions(history, ["v1", "v2", "v3"])
    eager = lazy.load().copy()
    lazy = xv.open_versions(history, ["v1", "v2", "v3"])
    for sel in [
        dict(version=[2, 0], time=slice(8, 1, -3), lat=[19, 0, 5]),
        dict(version=1, lat=3),
        dict(time=[7, 2, 7], lon=slice(None, None, 7)),
    ]:
        xr.testing.assert_identical(lazy.sst.isel(sel).load(), eager.sst.isel(sel))
        xr.testing.assert_identical(
            lazy.flag.isel({k: v for k, v in sel.items() if k != "time"}).load(),
            eager.flag.isel({k: v for k, v in sel.items() if k != "time"}),
        )


def test_index_that_changes_between_versions(tmp_path):
    path = tmp_path / "relabel.h5"
    a = xr.Dataset({"v": ("x", np.arange(4.0))}, coords={"x": [0, 1, 2, 3]})
    a.vhdf5.commit("a", path=path)
    b = a.assign_coords(x=[0, 1, 2, 30])
    b.vhdf5.commit("b", path=path)
    stacked = xv.open_versions(path, ["a", "b"])
    assert "x" not in stacked.indexes
    assert stacked["version_x"].dims == ("version", "x")
    np.testing.assert_array_equal(stacked["version_x"].values, [[0, 1, 2, 3], [0, 1, 2, 30]])


def test_errors(history):
    with pytest.raises(ValueError, match="non-empty list"):
        xv.open_versions(history, [])
    with pytest.raises(ValueError, match="non-empty list"):
        xv.open_versions(history, "v1")
    with pytest.raises(VersionNotFoundError):
        xv.open_versions(history, ["v1", "nope"])
    with pytest.raises(ValueError, match="same label twice"):
        xv.open_versions(history, ["v1", "v1"])


def _count_chunk_reads(monkeypatch) -> list:
    """Patch ChunkManifest._chunk (each stored chunk read and decoded) to record what it reads."""
    reads = []
    original = ChunkManifest._chunk

    def counting(self, slot, where):
        reads.append((self.raw_data, int(self.rows[slot])))
        return original(self, slot, where)

    monkeypatch.setattr(ChunkManifest, "_chunk", counting)
    return reads


def test_shared_chunks_are_read_once(history, monkeypatch):
    reads = _count_chunk_reads(monkeypatch)
    stacked = xv.open_versions(history, ["v1", "v2", "v3", "fix", "release"])
    reads.clear()
    stacked.sst.load()
    # sst: v1 12 chunks; v2 one changed chunk; v3 the same 12 + 1 changed + 6 new (appended)
    assert len(reads) == len(set(reads)) == 12 + 1 + 6


def test_fifty_versions_sharing_most_chunks(tmp_path, monkeypatch):
    """50 versions of 100 chunks, each changing 10 of them: reads are the distinct chunks, not 50 x 100."""
    path = tmp_path / "many.h5"
    rng = np.random.default_rng(0)
    data = rng.normal(size=(100, 64)).astype("f8")
    ds = xr.Dataset({"a": (("x", "y"), data)})
    ds["a"].encoding["chunks"] = (1, 64)
    start = time.perf_counter()
    for v in range(50):
        if v:
            rows = rng.choice(100, 10, replace=False)
            data = data.copy()
            data[rows] += 1.0
        ds = ds.copy(data={"a": data})
        ds["a"].encoding["chunks"] = (1, 64)
        ds.vhdf5.commit(f"r{v}", path=path)
    committed = time.perf_counter() - start
    reads = _count_chunk_reads(monkeypatch)
    names = [f"r{v}" for v in range(50)]
    stacked = xv.open_versions(path, names)
    start = time.perf_counter()
    values = stacked.a.values
    elapsed = time.perf_counter() - start
    distinct = 100 + 49 * 10
    assert len(reads) == len(set(reads)) == distinct, (len(reads), distinct)
    np.testing.assert_array_equal(values[-1], data)
    # per-version opens read every chunk of every version
    reads.clear()
    start = time.perf_counter()
    for name in names[::10]:
        with xr.open_dataset(path, engine="vhdf5", version=name) as one:
            np.testing.assert_array_equal(one.a.values, values[names.index(name)])
    per_version = (time.perf_counter() - start) * 10
    assert len(reads) == 5 * 100
    print(
        f"\n50 versions x 100 chunks: {distinct} chunk reads shared (not 5000); load {elapsed:.3f} s, "
        f"50 single opens ~{per_version:.3f} s; commits {committed:.1f} s"
    )


def test_dimensions_that_differ_are_refused(tmp_path):
    path = tmp_path / "dims.h5"
    xr.Dataset({"v": ("x", np.arange(3.0))}).vhdf5.commit("a", path=path)
    xr.Dataset({"v": ("y", np.arange(3.0))}).vhdf5.commit("b", path=path)
    with pytest.raises(xv.IncompatibleDataError, match="dimensions"):
        xv.open_versions(path, ["a", "b"])


def test_verify_and_scale_factor_per_version(tmp_path):
    """Each version decodes with its own attributes, and verify=True checks the shared chunks."""
    path = tmp_path / "packed.h5"
    raw = np.arange(12, dtype="i2").reshape(3, 4)
    a = xr.Dataset({"p": (("x", "y"), raw, {"scale_factor": 0.5, "units": "m"})})
    a["p"].encoding.update(chunks=(1, 4))
    a.vhdf5.commit("a", path=path)
    with xr.open_dataset(path, engine="vhdf5", mask_and_scale=False) as stored:
        b = stored.load().copy()
    b["p"].attrs["scale_factor"] = 2.0  # same stored chunks, decoded otherwise
    b.vhdf5.commit("b", path=path)
    stacked = xv.open_versions(path, ["a", "b"], verify=True)
    for name in ("a", "b"):
        xr.testing.assert_identical(stacked.p.sel(version=name).drop_vars(STACK_COORDS), _one(path, name).p)
    np.testing.assert_array_equal(stacked.p.values[1], 4 * stacked.p.values[0])
