"""expire(): which versions go, against a pure-Python model; every kept version reads as before."""

from __future__ import annotations

import datetime as dt

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xarray_vhdf5 import VersionedHDF5File, create_branch, create_tag, list_branches, list_tags, open_file
from xarray_vhdf5._versions import expire
from xarray_vhdf5._versions.check import check_file

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
FIRST = "__first_version__"


def _values(i: int) -> np.ndarray:
    return np.arange(40, dtype="f8") * 1000 + i


def _write(path, n: int, branch_at: int | None = None, tag_at: int | None = None) -> dict:
    """``n`` versions v0..v{n-1}, one a day, each with new values; a branch and a tag optionally.

    Returns the model: name -> (timestamp, values, parent).
    """
    model = {}
    with h5py.File(path, "w") as h:
        vf = VersionedHDF5File(h)
        prev = None
        for i in range(n):
            ts = T0 + dt.timedelta(days=i)
            with vf.stage_version(f"v{i}", timestamp=ts) as g:
                if "x" in g:
                    g["x"][:] = _values(i)
                else:
                    g.create_dataset("x", data=_values(i), chunks=(10,))
            model[f"v{i}"] = (ts, _values(i), prev or FIRST)
            prev = f"v{i}"
    if branch_at is not None:
        create_branch(path, "qc", at=f"v{branch_at}")
    if tag_at is not None:
        create_tag(path, "paper", at=f"v{tag_at}")
    return model


def _expected(model, older_than, keep_last, needed) -> set[str]:
    names = sorted(model, key=lambda n: model[n][0])
    doomed = set(names if keep_last is None else names[: max(0, len(names) - keep_last)])
    if older_than is not None:
        doomed = {n for n in doomed if model[n][0] < older_than}
    return doomed - needed


def _check_survivors(path, model, doomed):
    with h5py.File(path, "r") as h:
        vf = VersionedHDF5File(h)
        versions = h["_version_data/versions"]
        kept = sorted(set(versions) - {FIRST})
        assert kept == sorted(set(model) - doomed)
        for name in kept:
            np.testing.assert_array_equal(vf[name]["x"][:], model[name][1])
            parent = model[name][2]
            while parent in doomed:  # re-parented to the nearest surviving ancestor
                parent = model[parent][2]
            got = versions[name].attrs["prev_version"]
            assert (got.decode() if isinstance(got, bytes) else got) == parent


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 8),
    days=st.none() | st.integers(0, 9),
    keep_last=st.none() | st.integers(0, 9),
    branch_at=st.none() | st.integers(0, 7),
    tag_at=st.none() | st.integers(0, 7),
)
def test_expire_deletes_what_the_model_says(tmp_path_factory, n, days, keep_last, branch_at, tag_at):
    if days is None and keep_last is None:
        keep_last = 2
    branch_at = None if branch_at is None or branch_at >= n else branch_at
    tag_at = None if tag_at is None or tag_at >= n else tag_at
    path = tmp_path_factory.mktemp("exp") / "f.h5"
    model = _write(path, n, branch_at, tag_at)
    older_than = None if days is None else T0 + dt.timedelta(days=days)
    needed = {f"v{n - 1}"} | {f"v{i}" for i in (branch_at, tag_at) if i is not None}
    doomed = _expected(model, older_than, keep_last, needed)
    report = expire(str(path), older_than=older_than, keep_last=keep_last)
    assert set(report.deleted) == doomed
    _check_survivors(path, model, doomed)
    assert list_branches(path)["main"] == f"v{n - 1}"
    if branch_at is not None:
        assert list_branches(path)["qc"] == f"v{branch_at}"
    if tag_at is not None:
        assert list_tags(path) == {"paper": f"v{tag_at}"}


def test_keep_tags_false_deletes_tagged_versions_and_their_tags(tmp_path):
    path = tmp_path / "f.h5"
    model = _write(path, 5, branch_at=1, tag_at=2)
    report = expire(path, keep_last=1, keep_tags=False)
    assert report.deleted == ["v0", "v2", "v3"]
    assert list_tags(path) == {}
    _check_survivors(path, model, {"v0", "v2", "v3"})


def test_keep_branches_false_moves_a_branch_to_a_survivor(tmp_path):
    path = tmp_path / "f.h5"
    model = _write(path, 5, branch_at=2, tag_at=1)
    report = expire(path, older_than=T0 + dt.timedelta(days=3), keep_branches=False)
    assert report.deleted == ["v0", "v2"]  # v1 tagged; v3, v4 not old enough
    assert list_branches(path)["qc"] == "v1"  # nearest surviving ancestor of v2
    _check_survivors(path, model, {"v0", "v2"})


def test_expire_frees_chunks_and_writes_nothing_when_nothing_expires(tmp_path):
    path = tmp_path / "f.h5"
    _write(path, 6)
    before = path.read_bytes()
    report = expire(path, older_than=T0)  # nothing older than the first version
    assert report.deleted == [] and path.read_bytes() == before
    report = expire(path, keep_last=2)
    assert report.deleted == ["v0", "v1", "v2", "v3"]
    assert report.freed_chunks == 16  # 4 chunks of each deleted version's new values


def test_expire_on_open_handles(tmp_path):
    path = tmp_path / "f.h5"
    model = _write(path, 4)
    with open_file(path) as h:
        vf = VersionedHDF5File(h)
        assert expire(vf, keep_last=1).deleted == ["v0", "v1", "v2"]
        np.testing.assert_array_equal(vf["v3"]["x"][:], model["v3"][1])
        assert vf.current_version == "v3"
    with h5py.File(path, "r") as h, pytest.raises(PermissionError):
        expire(h, keep_last=0)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, ValueError),
        ({"keep_last": -1}, ValueError),
        ({"keep_last": 1.5}, TypeError),
        ({"keep_last": True}, TypeError),
        ({"older_than": 3}, TypeError),
    ],
)
def test_bad_rules(tmp_path, kwargs, error):
    path = tmp_path / "f.h5"
    _write(path, 2)
    with pytest.raises(error):
        expire(path, **kwargs)


# -- space: the bytes of expired versions go to the next commits --------------------------


def _full_versions(path, n, start=0, persist=False, create=True):
    """Versions v{start}..v{start+n-1}, each rewriting all of ``x`` (8 chunks of 32 KiB); one session each."""
    if create:
        kw = {"fs_strategy": "fsm", "fs_persist": True, "fs_threshold": 1} if persist else {}
        h5py.File(path, "w", **kw).close()
    for i in range(start, start + n):
        with h5py.File(path, "a") as h:
            vf = VersionedHDF5File(h)
            with vf.stage_version(f"v{i}") as g:
                x = np.random.default_rng(i).random(8 * 4096)
                if "x" in g:
                    g["x"][:] = x
                else:
                    g.create_dataset("x", data=x, chunks=(4096,))


@pytest.mark.parametrize("persist", [False, True])
def test_expired_bytes_are_reused_by_the_next_commits(tmp_path, persist):
    import shutil

    path, twin = tmp_path / "f.h5", tmp_path / "twin.h5"
    _full_versions(path, 12, persist=persist)
    shutil.copy(path, twin)
    report = expire(path, keep_last=6)
    assert report.freed_chunks == 6 * 8
    with h5py.File(path, "r") as h:
        raw = h["_version_data/x/raw_data"]
        kept_rows = 6 * 8 * 4096
        # a file that forgets freed bytes keeps them as raw_data rows past largest_index
        assert raw.shape[0] == (kept_rows if persist else 12 * 8 * 4096)
        assert h["_version_data/x/hash_table"].attrs["largest_index"] == 6 * 8
    assert check_file(path, rehash=True).problems == []
    size, size_twin = path.stat().st_size, twin.stat().st_size
    _full_versions(path, 6, start=12, create=False)
    _full_versions(twin, 6, start=12, create=False)
    grown, grown_twin = path.stat().st_size - size, twin.stat().st_size - size_twin
    assert grown_twin >= 6 * 8 * 32768
    assert grown <= 0.1 * grown_twin
    with h5py.File(path, "r") as h:
        vf = VersionedHDF5File(h)
        for i in range(6, 18):
            np.testing.assert_array_equal(vf[f"v{i}"]["x"][:], np.random.default_rng(i).random(8 * 4096))


def test_versioned_hdf5_commits_and_deletes_over_freed_rows(tmp_path):
    versioned_hdf5 = pytest.importorskip("versioned_hdf5")
    path = tmp_path / "f.h5"
    _full_versions(path, 6)
    expire(path, keep_last=2)
    with h5py.File(path, "r+") as h:
        vf = versioned_hdf5.VersionedHDF5File(h)
        np.testing.assert_array_equal(vf["v5"]["x"][:], np.random.default_rng(5).random(8 * 4096))
        with vf.stage_version("r1") as g:
            g["x"][:4096] = 7.0
        vf.close()
    with h5py.File(path, "r+") as h:
        versioned_hdf5.delete_versions(h, ["v4"])
    with h5py.File(path, "r") as h:
        vf = VersionedHDF5File(h)
        want = np.random.default_rng(5).random(8 * 4096)
        np.testing.assert_array_equal(vf["v5"]["x"][:], want)
        want[:4096] = 7.0
        np.testing.assert_array_equal(vf["r1"]["x"][:], want)


@pytest.mark.parametrize("keep_freed", [False, True])
def test_rebuilt_versions_keep_their_dimension_scales(tmp_path, keep_freed):
    """Deletion rebuilds the virtual datasets of versions mapping moved chunks: attachments must follow.

    Before, the rebuilt datasets kept references to the objects they replaced
    (freed), and a null-padded ``CLASS``: netCDF-C refused the whole file.
    """
    import xarray as xr

    from xarray_vhdf5._versions.delete import delete_keeping_space

    path = tmp_path / "nc.h5"
    rng = np.random.default_rng(0)
    for i in range(6):
        xr.Dataset(
            {"sst": (("time", "lat"), rng.normal(size=(3, 40)).astype("f4"))},
            coords={"time": np.arange(3) + i, "lat": np.linspace(-80, 80, 40)},
        ).vhdf5.commit(f"v{i}", path=path)
    with h5py.File(path, "a") as h:
        report = delete_keeping_space(h, ["v0", "v1", "v4"], keep_freed=keep_freed)
    assert report.datasets["time"].rebuilt  # the case: rebuilt scales and variables
    with h5py.File(path, "r") as h:
        for v in ("v2", "v3", "v5"):
            group = h[f"_version_data/versions/{v}"]
            assert h5py.h5ds.is_scale(group["time"].id)
            targets = [[h[r].name for r in axis] for axis in group["sst"].attrs["DIMENSION_LIST"]]
            assert targets == [[f"{group.name}/time"], [f"{group.name}/lat"]]
    with xr.open_dataset(path) as plain:  # netCDF-C through the root view (the current version)
        assert plain.sst.dims == ("time", "lat")
        np.testing.assert_array_equal(plain.time.values, np.arange(3) + 5)
