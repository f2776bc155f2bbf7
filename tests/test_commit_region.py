"""``ds.vhdf5.commit(path=, region=..., mode=...)``: ``to_zarr``'s region writes and modes (issue 19)."""

from __future__ import annotations

import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (the accessor)
from xarray_vhdf5.errors import (
    HistoryExistsError,
    IncompatibleDataError,
    LabelsNotFoundError,
    NotVersionedError,
    StaleVersionError,
    UnsupportedError,
    ValueOverflowError,
)

T, NY, NX = 10, 6, 8


def _grid(seed: int = 0, t: int = T) -> xr.Dataset:
    """sst(time, lat, lon) float32 stored in (1, 3, 4) chunks (4 a day), distinct random values."""
    rng = np.random.default_rng(seed)
    ds = xr.Dataset(
        {
            "sst": (("time", "lat", "lon"), rng.normal(20, 2, (t, NY, NX)).astype("f4")),
            "count": (("time",), np.arange(t, dtype="i2")),
        },
        coords={"time": pd.date_range("2024-01-01", periods=t), "lat": np.arange(NY) * 1.5, "lon": np.arange(NX) * 2.0},
        attrs={"title": "grid"},
    )
    ds["sst"].encoding["chunks"] = (1, 3, 4)
    return ds


def _rows(path, name="sst") -> int:
    """Chunks stored in raw_data (all versions): its rows along axis 0 over the chunk's first side."""
    with h5py.File(path, "r") as f:
        raw = f[f"_version_data/{name}/raw_data"]
        return raw.shape[0] // raw.chunks[0]


def _versions(path) -> int:
    with h5py.File(path, "r") as f:
        return len([k for k in f["_version_data/versions"] if k != "__first_version__"])


def _current(path, **kw) -> xr.Dataset:
    with xr.open_dataset(path, engine="vhdf5", **kw) as ds:
        return ds.load()


@pytest.fixture
def stored(tmp_path):
    path = tmp_path / "grid.h5"
    base = _grid()
    base.vhdf5.commit("v0", path=path)
    return path, base


def test_a_region_writes_only_its_chunks(stored):
    path, base = stored
    part = _grid(seed=1).isel(time=slice(3, 5), lat=slice(0, 3)).drop_vars(["time", "lat", "lon", "count"])
    before = _rows(path)
    assert part.vhdf5.commit("v1", path=path, region={"time": slice(3, 5), "lat": slice(0, 3)}) == "v1"
    assert _rows(path) - before == 2 * 1 * 2  # 2 days x 1 lat chunk x 2 lon chunks, out of 40
    expected = base.copy(deep=True)
    expected["sst"][3:5, 0:3] = part["sst"].values
    xr.testing.assert_identical(_current(path), expected)
    xr.testing.assert_identical(_current(path, version="v0"), base)  # history kept


def test_a_partly_covered_chunk_is_read_and_rewritten_once(tmp_path):
    path = tmp_path / "grid.h5"
    base = _grid()
    base["sst"].encoding["chunks"] = (2, 6, 8)
    base.vhdf5.commit("v0", path=path)
    part = _grid(seed=2).isel(time=[4]).drop_vars(["lat", "lon", "count"])
    before = _rows(path)
    part.vhdf5.commit("v1", path=path, region="auto")
    assert _rows(path) - before == 1
    got = _current(path)["sst"].values
    np.testing.assert_array_equal(got[4], part["sst"].values[0])
    np.testing.assert_array_equal(np.delete(got, 4, axis=0), np.delete(base["sst"].values, 4, axis=0))


def test_region_auto_equals_the_explicit_slices(tmp_path):
    new = _grid(seed=3).isel(time=slice(6, 9), lon=slice(4, 8))
    results = []
    for region in ("auto", {"time": "auto", "lon": slice(4, 8)}, {"time": slice(6, 9), "lon": slice(4, None)}):
        path = tmp_path / f"{len(results)}.h5"
        _grid().vhdf5.commit("v0", path=path)
        new.drop_vars(["count"]).vhdf5.commit("v1", path=path, region=region)
        results.append(_current(path))
    expected = _grid()
    expected["sst"][6:9, :, 4:8] = new["sst"].values
    for got in results:
        xr.testing.assert_identical(got, expected)


def test_a_transposed_variable_is_written_in_stored_order(stored):
    path, _base = stored
    part = _grid(seed=4).isel(time=slice(0, 2)).drop_vars("count").transpose("lon", "lat", "time")
    part.vhdf5.commit("v1", path=path, region="auto")
    np.testing.assert_array_equal(_current(path)["sst"].values[:2], part["sst"].transpose("time", "lat", "lon"))


def test_region_auto_refuses_unknown_or_scattered_labels(stored):
    path, _ = stored
    later = _grid(seed=5, t=12).isel(time=slice(9, 12)).drop_vars("count")
    with pytest.raises(LabelsNotFoundError, match="Not all values of coordinate 'time'.*2 of 3 missing") as err:
        later.vhdf5.commit("x", path=path, region="auto")
    assert isinstance(err.value, KeyError)  # as to_zarr(region="auto")
    scattered = _grid(seed=5).isel(time=[1, 3]).drop_vars("count")
    with pytest.raises(IncompatibleDataError, match="non-contiguous"):
        scattered.vhdf5.commit("x", path=path, region="auto")
    assert _versions(path) == 1


def test_malformed_regions_are_refused_with_xarrays_messages(stored):
    path, base = stored
    part = base.isel(time=slice(0, 2)).drop_vars(["time", "lat", "lon"])
    with pytest.raises(ValueError, match="all keys in ``region`` are not in Dataset dimensions"):
        part.vhdf5.commit("x", path=path, region={"depth": slice(0, 1)})
    with pytest.raises(TypeError, match="must be slice objects"):
        part.vhdf5.commit("x", path=path, region={"time": [0, 1]})
    with pytest.raises(ValueError, match="step on all slices"):
        part.vhdf5.commit("x", path=path, region={"time": slice(0, 4, 2)})
    with pytest.raises(IncompatibleDataError, match=r"selects 1 of the 10 stored points .* Dataset has 2"):
        part.vhdf5.commit("x", path=path, region={"time": slice(9, 12)})
    with pytest.raises(ValueError, match="cannot set region unless mode='a', mode='r\\+'"):
        part.vhdf5.commit("x", path=path, region={"time": slice(0, 2)}, mode="w")
    with pytest.raises(ValueError, match="The only supported options for mode"):
        part.vhdf5.commit("x", path=path, mode="x")
    with pytest.raises(ValueError, match="cannot set append_dim unless mode='a'"):
        part.vhdf5.commit("x", path=path, append_dim="time", mode="r+")
    with pytest.raises(ValueError, match="same dimension in both"):
        part.vhdf5.commit("x", path=path, append_dim="time", region={"time": slice(0, 2)})
    with pytest.raises(UnsupportedError):
        part.vhdf5.commit("x", path=path, append_dim="time", region={"lat": slice(0, 6)})
    with pytest.raises(ValueError, match="prev_version"):
        part.vhdf5.commit("x", path=path, region={"time": slice(0, 2)}, prev_version="v0")
    assert _versions(path) == 1


def test_variables_outside_the_region_must_equal_the_stored_ones(stored):
    path, _base = stored
    part = _grid(seed=6).isel(time=slice(2, 4))  # lat and lon equal the stored ones: accepted, not written
    part.vhdf5.commit("v1", path=path, region="auto")
    moved = _grid(seed=6).isel(time=slice(2, 4)).assign_coords(lat=np.arange(NY) * 1.5 + 0.5)
    with pytest.raises(IncompatibleDataError, match=r"coordinate 'lat' differs .* first difference at position 0"):
        moved.vhdf5.commit("x", path=path, region={"time": slice(2, 4)})
    extra = part.assign(mask=(("lat", "lon"), np.ones((NY, NX), "i1")))
    with pytest.raises(IncompatibleDataError, match=r"\.drop_vars\(\['mask'\]\)"):
        extra.vhdf5.commit("x", path=path, region={"time": slice(2, 4)})
    relabelled = part.assign_coords(time=part["time"] + pd.Timedelta(days=1))
    with pytest.raises(IncompatibleDataError, match=r"coordinate 'time' differs from the stored one at time="):
        relabelled.vhdf5.commit("x", path=path, region={"time": slice(2, 4)})
    assert _versions(path) == 2


def test_a_region_write_adds_no_variable_and_r_plus_none_at_all(stored):
    path, base = stored
    part = base.isel(time=slice(0, 2)).assign(new=(("time",), [1.0, 2.0]))
    with pytest.raises(IncompatibleDataError, match=r"non-pre-existing variables \['new'\]"):
        part.vhdf5.commit("x", path=path, region="auto", mode="a")
    whole = base.assign(new=(("time",), np.arange(T, dtype="f8")))
    with pytest.raises(IncompatibleDataError, match="To allow writing new variables, set mode='a'"):
        whole.vhdf5.commit("x", path=path, mode="r+")
    with pytest.raises(IncompatibleDataError, match="different dimension sizes"):
        base.isel(lat=slice(0, 3)).drop_vars("lat").vhdf5.commit("x", path=path, mode="r+")
    with pytest.raises(IncompatibleDataError, match="different dimension names"):
        base.rename(lon="x").drop_vars("x").vhdf5.commit("x", path=path, mode="r+")
    assert _versions(path) == 1


def test_a_value_the_dtype_cannot_hold_commits_nothing(stored):
    path, base = stored
    part = base[["count"]].isel(time=slice(0, 2)).copy(deep=True).astype({"count": "i8"})
    part["count"][:] = [1, 2**40]
    with pytest.raises(ValueOverflowError):
        part.vhdf5.commit("x", path=path, region="auto")
    assert _versions(path) == 1
    part["count"][:] = [7, 8]
    part.vhdf5.commit("v1", path=path, region="auto")
    got = _current(path)["count"]
    assert got.dtype == np.dtype("i2")
    np.testing.assert_array_equal(got.values[:3], [7, 8, 2])


def test_mode_a_overwrites_and_adds_variables_on_top_of_the_current(stored):
    path, base = stored
    update = xr.Dataset(
        {"count": (("time",), np.arange(T, dtype="i2") * 10), "ice": (("time", "lat"), np.ones((T, NY), "f4"))},
        coords={"time": base["time"]},
        attrs={"source": "fix"},
    )
    update.vhdf5.commit("v1", path=path, mode="a")
    got = _current(path)
    xr.testing.assert_identical(got["sst"], base["sst"])  # kept, not rewritten
    np.testing.assert_array_equal(got["count"], np.arange(T) * 10)
    np.testing.assert_array_equal(got["ice"], 1.0)
    assert got.attrs == {"title": "grid", "source": "fix"}
    before = _rows(path)
    base[["sst"]].vhdf5.commit("v2", path=path, mode="a", allow_empty=True)  # the same values
    assert _rows(path) == before
    with pytest.raises(IncompatibleDataError, match="coordinate 'time' differs"):
        update.assign_coords(time=update["time"] + pd.Timedelta(days=1)).vhdf5.commit("x", path=path, mode="a")


def test_mode_w_minus_creates_and_refuses_a_history(tmp_path):
    path = tmp_path / "new.h5"
    _grid().vhdf5.commit("v0", path=path, mode="w-")
    with pytest.raises(HistoryExistsError, match="already holds versions") as err:
        _grid(seed=1).vhdf5.commit("v1", path=path, mode="w-")
    assert isinstance(err.value, FileExistsError)
    assert _versions(path) == 1


def test_mode_w_commits_exactly_the_dataset_and_keeps_history(stored):
    path, base = stored
    smaller = base[["sst"]].isel(time=slice(0, 5))
    smaller.vhdf5.commit("v1", path=path, mode="w")
    xr.testing.assert_identical(_current(path), smaller)
    xr.testing.assert_identical(_current(path, version="v0"), base)
    with xr.open_dataset(path, engine="vhdf5", version="v0") as old:  # a revert: v0 on top of v1
        with pytest.raises(StaleVersionError):
            old.vhdf5.commit("x", path=path)  # without mode: it would undo v1
        old.vhdf5.commit("v2", path=path, mode="w")
    xr.testing.assert_identical(_current(path), base)
    assert _versions(path) == 3


def test_r_plus_and_regions_need_an_existing_version(tmp_path):
    part = _grid().isel(time=slice(0, 2))
    with pytest.raises(FileNotFoundError):
        part.vhdf5.commit("x", path=tmp_path / "missing.h5", region="auto")
    empty = tmp_path / "empty.h5"
    h5py.File(empty, "w").close()
    with pytest.raises(NotVersionedError):
        part.vhdf5.commit("x", path=empty, mode="r+")
    part.vhdf5.commit("v0", path=empty, mode="a")  # "a" creates the first version
    xr.testing.assert_identical(_current(empty), part)


def test_a_region_of_a_group(tmp_path):
    path = tmp_path / "groups.h5"
    base = _grid()
    base.vhdf5.commit("v0", path=path, group="ocean")
    part = _grid(seed=7).isel(time=slice(5, 6)).drop_vars("count")
    part.vhdf5.commit("v1", path=path, group="ocean", region="auto")
    got = _current(path, group="ocean")
    np.testing.assert_array_equal(got["sst"].values[5], part["sst"].values[0])
    np.testing.assert_array_equal(got["sst"].values[:5], base["sst"].values[:5])


def test_strings_and_times_in_a_region(tmp_path):
    path = tmp_path / "flags.h5"
    ds = xr.Dataset(
        {
            "flag": (("time",), np.array(["ok", "ok", "bad", "ok"])),
            "when": (("time",), pd.date_range("2020-01-01", periods=4).values),
        },
        coords={"time": np.arange(4)},
    )
    ds.vhdf5.commit("v0", path=path)
    fix = ds.isel(time=[2]).copy(deep=True)
    fix["flag"] = fix["flag"].astype("<U5")
    fix["flag"][:] = "fixed"
    fix["when"][:] = np.datetime64("2021-05-05")
    fix.vhdf5.commit("v1", path=path, region="auto")
    got = _current(path)
    assert list(got["flag"].values) == ["ok", "ok", "fixed", "ok"]  # widened, not truncated to "fixe"
    assert got["when"].values[2] == np.datetime64("2021-05-05")
    assert got["when"].values[3] == np.datetime64("2020-01-04")
