"""repack(): the same versions, values, attributes and refs in a compact file; never a lost original."""

from __future__ import annotations

import importlib
import os
import shutil

import h5py
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import xarray_vhdf5
from xarray_vhdf5 import VersionedHDF5File, create_branch, create_tag, delete_versions, list_branches, list_tags
from xarray_vhdf5._versions.check import check_file
from xarray_vhdf5._versions.delete import delete_keeping_space, persists_free_space
from xarray_vhdf5._versions.repack import TEMP_SUFFIX, repack, repack_plan
from xarray_vhdf5.cli._main import cli

ROWS = 1024
#: The module (``xarray_vhdf5._versions.repack`` is the function, as ``merge`` is).
repack_mod = importlib.import_module("xarray_vhdf5._versions.repack")


def _data(i: int) -> np.ndarray:
    return np.round(np.random.default_rng(i).normal(0, 1, 4 * ROWS), 2)


def _history(path, n: int, versions=None) -> None:
    """Versions v{i} for i in ``versions`` (default range(n)): x rewritten whole, s (strings) and g/y sometimes."""
    h5py.File(path, "w").close()
    for i in range(n) if versions is None else versions:
        with h5py.File(path, "a") as h:
            vf = VersionedHDF5File(h)
            with vf.stage_version(f"v{i}", timestamp=np.datetime64("2024-01-01") + np.timedelta64(i, "D")) as g:
                if "x" not in g:
                    g.create_dataset("x", data=_data(i), chunks=(ROWS,), compression="gzip", shuffle=True)
                    g.create_dataset(
                        "s", data=np.array(["a", "bb", ""] * 3, dtype=object), chunks=(4,), dtype=h5py.string_dtype()
                    )
                    g.create_group("g").create_dataset("y", data=np.arange(10, dtype="i4"), chunks=(3,), fillvalue=-1)
                    g["x"].attrs["units"] = "K"
                else:
                    g["x"][:] = _data(i)
                    if i % 3 == 0:
                        g["s"][0] = f"s{i}"
                        g["g/y"][i % 10] = i
                g.attrs["step"] = i


def _snapshot(path) -> dict:
    """Everything a version is: its attributes, parent, timestamp; each dataset's values and attributes."""
    out = {}
    with h5py.File(path, "r") as h:
        versions = h["_version_data/versions"]
        out["current"] = versions.attrs["current_version"]
        for name in versions:
            group = versions[name]
            entry = {"attrs": {k: repr(v) for k, v in group.attrs.items()}}

            def visit(rel, obj, entry=entry, group=group):
                if isinstance(obj, h5py.Dataset):
                    attrs = {}
                    for k, v in obj.attrs.items():
                        if k in ("DIMENSION_LIST", "REFERENCE_LIST"):
                            continue
                        attrs[k] = repr(v)
                    if "DIMENSION_LIST" in obj.attrs:
                        attrs["DIMENSION_LIST"] = [[h[r].name for r in axis] for axis in obj.attrs["DIMENSION_LIST"]]
                    entry[rel] = (
                        obj.dtype.str,
                        obj.shape,
                        obj[()].tobytes() if obj.dtype.kind != "O" else repr(obj[()].tolist()),
                        attrs,
                        obj.fillvalue if obj.dtype.kind != "O" else None,
                    )

            group.visititems(visit)
            out[name] = entry
    out["branches"], out["tags"] = list_branches(path), list_tags(path)
    return out


def test_repack_keeps_every_version_and_gives_the_bytes_back(tmp_path):
    path = tmp_path / "f.h5"
    _history(path, 12)
    create_branch(path, "qc", at="v7")
    create_tag(path, "paper", at="v4")
    with h5py.File(path, "a") as h:
        delete_keeping_space(h, [f"v{i}" for i in (1, 3, 5, 8, 9, 11)])
    before = _snapshot(path)
    plan = repack_plan(path)
    assert plan.size_after is None and plan.garbage_bytes > 0
    size = path.stat().st_size
    report = repack(path)
    assert report.size_before == size and report.size_after == path.stat().st_size < size
    assert report.chunk_bytes == plan.chunk_bytes
    assert _snapshot(path) == before
    assert check_file(path, rehash=True).problems == []
    with h5py.File(path, "r") as h:
        assert not persists_free_space(h)  # fs_persist files are not kill-safe under the journal
        assert h["_version_data/x/raw_data"].shape[0] == h["_version_data/x/hash_table"].attrs["largest_index"] * ROWS
    assert not os.path.exists(str(path) + TEMP_SUFFIX)


def test_repacked_file_is_as_small_as_a_fresh_one(tmp_path):
    path, fresh = tmp_path / "f.h5", tmp_path / "fresh.h5"
    _history(path, 20)
    with h5py.File(path, "a") as h:
        delete_versions(h, [f"v{i}" for i in range(1, 20, 2)])
    _history(fresh, 20, versions=range(0, 20, 2))
    report = repack(path)
    assert report.size_after <= 1.05 * fresh.stat().st_size
    with h5py.File(path, "r") as h:
        vf = VersionedHDF5File(h)
        for i in range(0, 20, 2):
            np.testing.assert_array_equal(vf[f"v{i}"]["x"][:], _data(i))


def test_versioned_hdf5_reads_commits_and_deletes_a_repacked_file(tmp_path):
    versioned_hdf5 = pytest.importorskip("versioned_hdf5")
    path = tmp_path / "f.h5"
    _history(path, 6)
    repack(path)
    with h5py.File(path, "r+") as h:
        vf = versioned_hdf5.VersionedHDF5File(h)
        np.testing.assert_array_equal(vf["v5"]["x"][:], _data(5))
        with vf.stage_version("r1") as g:
            g["x"][:ROWS] = 3.0
        vf.close()
    with h5py.File(path, "r+") as h:
        versioned_hdf5.delete_versions(h, ["v2"])
    with h5py.File(path, "r") as h:
        vf = VersionedHDF5File(h)
        want = _data(5)
        want[:ROWS] = 3.0
        np.testing.assert_array_equal(vf["r1"]["x"][:], want)
        np.testing.assert_array_equal(vf["v3"]["x"][:], _data(3))


def test_netcdf_view_and_scales_survive(tmp_path):
    path = tmp_path / "nc.h5"
    rng = np.random.default_rng(0)
    for i in range(4):
        xr.Dataset(
            {"sst": (("time", "lat"), rng.normal(size=(3, 40)).astype("f4"))},
            coords={"time": np.arange(3) + i, "lat": np.linspace(-80, 80, 40)},
            attrs={"title": f"t{i}"},
        ).vhdf5.commit(f"v{i}", path=path)
    xarray_vhdf5.expire(path, keep_last=2)
    want = {v: xr.open_dataset(path, engine="vhdf5", version=v).load() for v in ("v2", "v3")}
    repack(path)
    for v, ds in want.items():
        with xr.open_dataset(path, engine="vhdf5", version=v) as got:
            xr.testing.assert_identical(got.load(), ds)
    with xr.open_dataset(path) as plain:  # netCDF-C, the root view of the current version
        assert plain.attrs["title"] == "t3" and plain.sst.dims == ("time", "lat")
        np.testing.assert_array_equal(plain.sst.values, want["v3"].sst.values)


def test_a_failed_repack_leaves_the_original(tmp_path, monkeypatch):
    path = tmp_path / "f.h5"
    _history(path, 4)
    before = path.read_bytes()
    calls = []

    def boom(*args):
        calls.append(1)
        raise KeyboardInterrupt  # as a kill would stop it (the file system keeps what was written)

    monkeypatch.setattr(repack_mod, "_copy_raw_data", boom)
    with pytest.raises(KeyboardInterrupt):
        repack(path)
    assert calls and path.read_bytes() == before
    assert not os.path.exists(str(path) + TEMP_SUFFIX)
    monkeypatch.undo()
    # a temporary file left by a killed repack is replaced by the next one
    shutil.copy(path, str(path) + TEMP_SUFFIX)
    assert repack(path).size_after > 0 and not os.path.exists(str(path) + TEMP_SUFFIX)


def test_repack_to_another_path_and_errors(tmp_path):
    path, out = tmp_path / "f.h5", tmp_path / "out.h5"
    _history(path, 3)
    before = path.read_bytes()
    report = repack(path, out)
    assert path.read_bytes() == before and report.out == str(out)
    assert _snapshot(out) == _snapshot(path)
    with pytest.raises(FileNotFoundError):
        repack(tmp_path / "missing.h5")
    h5py.File(tmp_path / "plain.h5", "w").close()
    with pytest.raises(xarray_vhdf5.NotVersionedError):
        repack(tmp_path / "plain.h5")


def test_cli_repack_and_expire(tmp_path):
    path = tmp_path / "f.h5"
    _history(path, 8)
    runner = CliRunner()
    result = runner.invoke(cli, ["expire", str(path), "--keep-last", "3"])
    assert result.exit_code == 0, result.output
    assert "deleted 5 versions" in result.output
    size = path.stat().st_size
    result = runner.invoke(cli, ["repack", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would copy" in result.output and path.stat().st_size == size
    result = runner.invoke(cli, ["repack", str(path)])
    assert result.exit_code == 0, result.output
    assert path.stat().st_size < size and "repacked" in result.output
    with h5py.File(path, "r") as h:
        assert sorted(h["_version_data/versions"]) == ["__first_version__", "v5", "v6", "v7"]
    result = runner.invoke(cli, ["expire", str(path)])
    assert result.exit_code != 0 and "older-than" in result.output


# -- modify_metadata in place ------------------------------------------------------------


def _big(path, n=2_000_000):
    with h5py.File(path, "w") as h:
        vf = VersionedHDF5File(h)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.random.default_rng(0).random(n), chunks=(2**14,))
        with vf.stage_version("v1") as g:
            g["x"][:100] = 5.0


def _want(version, n=2_000_000):
    x = np.random.default_rng(0).random(n)
    if version == "v1":
        x[:100] = 5.0
    return x


def test_modify_metadata_through_a_journaled_handle_does_not_double_the_file(tmp_path):
    path = tmp_path / "m.h5"
    _big(path)
    size = path.stat().st_size
    with xarray_vhdf5.open_file(path) as h:
        report = xarray_vhdf5.modify_metadata(h, "x", chunks=(2**15,))
    assert report.chunks_after == -(-2_000_000 // 2**15) + 1  # v0's chunks, and v1's first one
    assert path.stat().st_size <= 1.1 * size
    assert sorted(os.listdir(tmp_path)) == ["m.h5"]  # no side file, no journal
    with h5py.File(path, "r") as h:
        vf = VersionedHDF5File(h)
        assert h["_version_data/x/raw_data"].chunks == (2**15,)
        for v in ("v0", "v1"):
            np.testing.assert_array_equal(vf[v]["x"][:], _want(v))
    assert check_file(path, rehash=True).problems == []


def test_a_failed_modify_in_place_rolls_the_file_back(tmp_path, monkeypatch):
    path = tmp_path / "m.h5"
    _big(path, 200_000)
    before = path.read_bytes()
    metadata = importlib.import_module("xarray_vhdf5._versions.metadata")
    real = metadata._OneSourceRewriter.version
    calls = []

    def fail_second(self, vds):
        calls.append(vds.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, vds)

    monkeypatch.setattr(metadata._OneSourceRewriter, "version", fail_second)
    h = xarray_vhdf5.open_file(path)
    with pytest.raises(KeyboardInterrupt):
        xarray_vhdf5.modify_metadata(h, "x", chunks=(2**15,))
    h.close()
    assert len(calls) == 2 and path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.h5"]


def test_modifying_a_dimension_scale_keeps_the_file_readable_by_netcdf(tmp_path):
    path = tmp_path / "nc.h5"
    for i in range(2):
        xr.Dataset(
            {"sst": (("time", "lat"), np.full((3, 40), i, "f4"))},
            coords={"time": np.arange(3) + i, "lat": np.linspace(-80, 80, 40)},
        ).vhdf5.commit(f"v{i}", path=path)
    with xarray_vhdf5.open_file(path) as h:
        xarray_vhdf5.modify_metadata(h, "time", chunks=(2,))
    with h5py.File(path, "a") as h:
        xarray_vhdf5.modify_metadata(h, "lat", chunks=(16,))
    with xr.open_dataset(path) as plain:
        assert plain.sst.dims == ("time", "lat")
        np.testing.assert_array_equal(plain.time.values, np.arange(3) + 1)
    with xr.open_dataset(path, engine="vhdf5", version="v0") as ds:
        np.testing.assert_array_equal(ds.time.values, np.arange(3))
        np.testing.assert_array_equal(ds.lat.values, np.linspace(-80, 80, 40))
