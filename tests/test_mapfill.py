"""``fill_chunk_maps`` / ``vhdf5 fill-maps``: chunk maps for versions versioned-hdf5 committed.

Before the fill, every read of such a version decodes its mappings in
libhdf5; after it, opening a version of a dataset of at least MIN_CHUNKS
chunks takes its stored map, and ``read_versions`` takes the map logs, for
every dataset, as for this package's own commits. The maps must equal what
libhdf5 decodes, the file must stay versioned-hdf5's, and a second fill must
store nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

import h5py
import numpy as np
import pytest
import versioned_hdf5
import xarray as xr
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xarray_vhdf5 as xv
from xarray_vhdf5._backend.chunkmap import mapped_starts
from xarray_vhdf5._versions import chunkmaps, mapfill, reader_dataset, reader_history
from xarray_vhdf5._versions.check import check_file
from xarray_vhdf5._versions.history import version_log
from xarray_vhdf5.cli import cli

VERSIONS = [f"v{k}" for k in range(1, 6)]


def _history(path) -> dict[str, dict[str, np.ndarray]]:
    """Five versions by versioned-hdf5: ``x`` grows past MIN_CHUNKS chunks, ``small`` keeps 10, ``g/y``
    is a 2-d dataset of 80 chunks; returns each version's data, by version and path."""
    rng = np.random.default_rng(3)
    x, small, y = np.arange(500.0), np.zeros(100, "i4"), rng.standard_normal((80, 6)).astype("f4")
    expected = {}
    with h5py.File(path, "w") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        for k, name in enumerate(VERSIONS):
            with vf.stage_version(name) as g:
                if k == 0:
                    g.create_dataset("x", data=x, chunks=(5,))
                    g.create_dataset("small", data=small, chunks=(10,), compression="gzip")
                    g.create_group("g").create_dataset("y", data=y, chunks=(1, 6))
                else:
                    x = np.concatenate([x, np.full(50, float(k))])
                    x[7 * k] = -k
                    g["x"].resize(x.shape)
                    g["x"][:] = x
                    small[k] = k
                    g["small"][k] = k
                    if k % 2:
                        y[k] += 1
                        g["g/y"][k] = y[k]
            expected[name] = {"x": x.copy(), "small": small.copy(), "g/y": y.copy()}
    return expected


def _no_decoding(monkeypatch) -> list:
    """Record every decoding of a virtual dataset's mappings by the readers (and let it happen)."""
    used: list = []
    for module in (reader_dataset, reader_history):
        real = module.resolve_manifest

        def spy(*a, _real=real, **k):
            used.append(a[0].name)
            return _real(*a, **k)

        monkeypatch.setattr(module, "resolve_manifest", spy)
    real_decoded = reader_history._decoded
    monkeypatch.setattr(reader_history, "_decoded", lambda *a: used.append(a) or real_decoded(*a))
    return used


def test_fill_stores_the_maps_libhdf5_decodes_and_readers_take_them(tmp_path, monkeypatch):
    path = tmp_path / "h.h5"
    expected = _history(path)
    with h5py.File(path, "r") as f:
        assert all(chunkmaps.load(f, v, "x") is None for v in VERSIONS)  # versioned-hdf5 stores none
    with monkeypatch.context() as patched:
        before = _no_decoding(patched)
        with xv.VersionedHDF5File.open(path) as reader:
            reader.read_versions("x", 35, VERSIONS)
            reader["v1"]["g/y"][0]
        assert len(before) >= len(VERSIONS) + 1  # every version of x decoded, and g/y's

    report = xv.fill_chunk_maps(path)
    assert (report.versions, report.stored, report.present, report.skipped) == (5, 15, 0, {})

    with h5py.File(path, "r") as f:
        for v in VERSIONS:
            for name in ("x", "g/y"):
                layout = chunkmaps.load(f, v, name)
                assert layout is not None, (v, name)
                vds = f[f"_version_data/versions/{v}/{name}"]
                raw = f[f"_version_data/{name}/raw_data"]
                np.testing.assert_array_equal(layout.starts, mapped_starts(vds, vds.shape, raw.chunks, raw))
            assert chunkmaps.load(f, v, "small") is None  # 10 chunks: the file's map log only

    used = _no_decoding(monkeypatch)
    with xv.VersionedHDF5File.open(path) as reader:
        for v in VERSIONS:
            np.testing.assert_array_equal(reader[v]["x"][()], expected[v]["x"])
            np.testing.assert_array_equal(reader[v]["g/y"][()], expected[v]["g/y"])
        # x and g/y from their stored maps; only the 10-chunk dataset is decoded on open, as ever
        assert sorted(used) == [f"/_version_data/versions/{v}/small" for v in VERSIONS]
        used.clear()
        np.testing.assert_array_equal(reader.read_versions("x", 35, VERSIONS), [expected[v]["x"][35] for v in VERSIONS])
        np.testing.assert_array_equal(
            reader.read_versions("small", 3, VERSIONS), [expected[v]["small"][3] for v in VERSIONS]
        )
        np.testing.assert_array_equal(
            reader.read_versions("g/y", np.s_[3, :2], VERSIONS), [expected[v]["g/y"][3, :2] for v in VERSIONS]
        )
    assert used == []  # the map logs: the dataset's own for x and g/y, the file's for small


def test_a_second_fill_stores_nothing_and_versioned_hdf5_keeps_the_file(tmp_path):
    path = tmp_path / "h.h5"
    expected = _history(path)
    xv.fill_chunk_maps(path)
    again = xv.fill_chunk_maps(path)
    assert (again.stored, again.present) == (0, 15)

    with h5py.File(path, "r+") as f:  # versioned-hdf5 reads every version and commits on top
        vf = versioned_hdf5.VersionedHDF5File(f)
        for v in VERSIONS:
            np.testing.assert_array_equal(vf[v]["x"][()], expected[v]["x"])
        with vf.stage_version("v6") as g:
            g["x"][0] = 99.0
    third = xv.fill_chunk_maps(path)
    assert (third.stored, third.present) == (3, 15)  # v6's three datasets
    with xv.VersionedHDF5File.open(path) as reader:
        assert reader["v6"]["x"][0] == 99.0
        np.testing.assert_array_equal(reader["v6"]["x"][1:], expected["v5"]["x"][1:])


def test_our_own_commits_have_every_map_already(tmp_path, monkeypatch):
    """Found by name: no virtual dataset of the file is opened (its mappings would be decoded)."""
    path = tmp_path / "ours.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        for k in range(3):
            with vf.stage_version(f"v{k}") as g:
                if k == 0:
                    g.create_dataset("x", data=np.arange(700.0), chunks=(10,))
                    g.create_dataset("s", data=np.arange(30), chunks=(10,))
                else:
                    g["x"][k] = -1.0

    def opened(*a):
        raise AssertionError("a virtual dataset was opened")

    monkeypatch.setattr(mapfill, "version_dataset_layout", opened)
    report = xv.fill_chunk_maps(path)
    assert (report.stored, report.present, report.skipped) == (0, 6, {})


def test_variable_length_strings_are_skipped_with_the_reason(tmp_path):
    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("names", data=np.array(["a", "bb", "ccc"], dtype=object), dtype=h5py.string_dtype())
            g.create_dataset("x", data=np.arange(10.0), chunks=(5,))
    report = xv.fill_chunk_maps(path)
    assert report.stored == 1
    assert list(report.skipped) == ["v1/names"]
    assert "variable-length" in report.skipped["v1/names"]


def test_the_command_line(tmp_path):
    path = tmp_path / "h.h5"
    _history(path)
    result = CliRunner().invoke(cli, ["fill-maps", str(path)])
    assert result.exit_code == 0, result.output
    assert "5 versions; stored 15 chunk maps, 0 were there already" in result.output
    result = CliRunner().invoke(cli, ["fill-maps", str(path)])
    assert "stored 0 chunk maps, 15 were there already" in result.output


def test_a_file_that_is_not_versioned_is_refused(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    before = path.read_bytes()
    with pytest.raises(xv.NotVersionedError, match="plain.h5' is not a versioned file"):
        xv.fill_chunk_maps(path)
    assert path.read_bytes() == before  # left byte for byte
    result = CliRunner().invoke(cli, ["fill-maps", str(path)])
    assert result.exit_code != 0
    assert "versioned" in result.output.lower()


def test_batches_release_the_lock_between_them(tmp_path, monkeypatch):
    path = tmp_path / "h.h5"
    expected = _history(path)
    monkeypatch.setattr(mapfill, "BATCH_SECONDS", 0.0)  # one version a batch
    opened = []
    real = mapfill.open_for_writing
    monkeypatch.setattr(mapfill, "open_for_writing", lambda p: opened.append(p) or real(p))
    report = xv.fill_chunk_maps(path)
    assert (report.versions, report.stored) == (5, 15)
    assert len(opened) == 5  # a handle and a mutation a version: the WRITE lock free between them
    with xv.VersionedHDF5File.open(path) as reader:
        np.testing.assert_array_equal(reader.read_versions("x", 35), [expected[v]["x"][35] for v in VERSIONS])


def test_sigkill_at_random_instants_of_a_fill_loses_nothing(tmp_path, monkeypatch):
    """A fill killed anywhere leaves every version as versioned-hdf5 wrote it, the file whole, and the
    next fill finishes the work."""
    base = tmp_path / "base.h5"
    expected = _history(base)
    monkeypatch.setattr(mapfill, "BATCH_SECONDS", 0.0)  # many commit points to land between
    rng = np.random.default_rng(11)
    outcomes = []
    for trial in range(8):
        path = tmp_path / f"k{trial}.h5"
        shutil.copy(base, path)
        pid = os.fork()
        if pid == 0:
            try:
                xv.fill_chunk_maps(path)
            finally:
                os._exit(0)
        time.sleep(float(rng.uniform(0.0, 0.1)))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        assert check_file(str(path)).ok
        with h5py.File(path, "r") as f:  # versioned-hdf5 reads every version as written
            vf = versioned_hdf5.VersionedHDF5File(f)
            for v in VERSIONS:
                np.testing.assert_array_equal(vf[v]["x"][()], expected[v]["x"])
        report = xv.fill_chunk_maps(path)
        outcomes.append(report.present)
        assert report.stored + report.present == 15 and report.skipped == {}
        with xv.VersionedHDF5File.open(path) as reader:
            for v in VERSIONS:
                np.testing.assert_array_equal(reader[v]["g/y"][()], expected[v]["g/y"])
            np.testing.assert_array_equal(reader.read_versions("x", 35), [expected[v]["x"][35] for v in VERSIONS])
    assert len(set(outcomes)) > 1  # the kills landed at different points of the fill


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("edit"), st.integers(0, 10**6)),
            st.tuples(st.just("grow"), st.integers(1, 40)),
            st.tuples(st.just("delete"), st.integers(0, 10**6)),
            st.tuples(st.just("fill"), st.just(0)),
        ),
        min_size=2,
        max_size=9,
    )
)
def test_histories_of_versioned_hdf5_with_fills_between(tmp_path_factory, steps):
    """versioned-hdf5 edits, grows and deletes; fills come between. Every read equals versioned-hdf5's,
    and every map a reader would take equals libhdf5's decoding (a deletion's moved chunks included)."""
    path = tmp_path_factory.mktemp("h") / "h.h5"
    x = np.arange(700.0)
    with h5py.File(path, "w") as f:
        with versioned_hdf5.VersionedHDF5File(f).stage_version("v0") as g:
            g.create_dataset("x", data=x, chunks=(10,))
            g.create_dataset("s", data=np.arange(30), chunks=(10,))
    names = ["v0"]
    for k, (op, n) in enumerate(steps, 1):
        if op == "fill":
            xv.fill_chunk_maps(path)
            continue
        with h5py.File(path, "r+") as f:
            vf = versioned_hdf5.VersionedHDF5File(f)
            if op == "delete":
                if len(names) > 1:
                    victim = names[n % (len(names) - 1)]  # never the current version
                    versioned_hdf5.delete_versions(f, [victim])
                    names.remove(victim)
                continue
            with vf.stage_version(f"v{k}") as g:
                if op == "grow":
                    x = np.concatenate([x, np.full(n * 5, float(k))])
                    g["x"].resize(x.shape)
                    g["x"][-n * 5 :] = k
                else:
                    x[n % x.size] = -k
                    g["x"][n % x.size] = -k
                    g["s"][n % 30] = k
            names.append(f"v{k}")
    xv.fill_chunk_maps(path)
    with h5py.File(path, "r") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        want = {v: (vf[v]["x"][()], vf[v]["s"][()]) for v in names}
        for v in names:
            layout = chunkmaps.load(f, v, "x")  # the last fill stored every version's (stale ones again)
            assert layout is not None, v
            vds, raw = f[f"_version_data/versions/{v}/x"], f["_version_data/x/raw_data"]
            np.testing.assert_array_equal(layout.starts, mapped_starts(vds, vds.shape, raw.chunks, raw))
    with xv.VersionedHDF5File.open(path) as reader:
        for v in names:
            np.testing.assert_array_equal(reader[v]["x"][()], want[v][0])
            np.testing.assert_array_equal(reader[v]["s"][()], want[v][1])
        np.testing.assert_array_equal(reader.read_versions("x", 3, names), [want[v][0][3] for v in names])
        np.testing.assert_array_equal(reader.read_versions("s", 7, names), [want[v][1][7] for v in names])
    decoded = path.parent / "decoded.h5"  # the log from the maps, against the log decoded
    shutil.copy(path, decoded)
    with h5py.File(decoded, "r+") as f:
        if "__vhdf5__/chunk_maps" in f:
            del f["__vhdf5__/chunk_maps"]
    with h5py.File(path, "r") as f, h5py.File(decoded, "r") as g:
        assert version_log(f, records=False) == version_log(g, records=False)


def test_a_deletion_by_versioned_hdf5_after_a_fill_is_noticed_and_filled_again(tmp_path, monkeypatch):
    """versioned-hdf5's deletion compacts raw_data (chunks move) and writes a new hash table: the maps
    filled before no longer hold, readers decode instead, and the next fill stores them anew."""
    path = tmp_path / "h.h5"
    expected = _history(path)
    xv.fill_chunk_maps(path)
    with h5py.File(path, "r+") as f:
        versioned_hdf5.delete_versions(f, ["v1", "v2"])
    kept = VERSIONS[2:]
    with h5py.File(path, "r") as f:
        assert all(chunkmaps.load(f, v, "x") is None for v in kept)  # stale: not taken
    with xv.VersionedHDF5File.open(path) as reader:
        for v in kept:
            np.testing.assert_array_equal(reader[v]["x"][()], expected[v]["x"])
    for v in kept:  # the xarray engine too
        with xr.open_dataset(path, engine="vhdf5", version=v) as ds:
            np.testing.assert_array_equal(ds["x"].values, expected[v]["x"])
    report = xv.fill_chunk_maps(path)
    assert (report.versions, report.stored, report.present) == (3, 9, 0)
    for v in kept:
        with xr.open_dataset(path, engine="vhdf5", version=v) as ds:
            np.testing.assert_array_equal(ds["x"].values, expected[v]["x"])
        with xr.open_dataset(path, engine="vhdf5", version=v, group="g") as ds:
            np.testing.assert_array_equal(ds["y"].values, expected[v]["g/y"])
    used = _no_decoding(monkeypatch)
    with xv.VersionedHDF5File.open(path) as reader:
        for v in kept:
            np.testing.assert_array_equal(reader[v]["x"][()], expected[v]["x"])
        used.clear()
        np.testing.assert_array_equal(reader.read_versions("x", 35, kept), [expected[v]["x"][35] for v in kept])
    assert used == []


def test_the_log_takes_stored_maps_and_agrees_with_decoding(tmp_path, monkeypatch):
    """``version_states`` (the computed log, ``vhdf5 diff``'s states) from the stored maps equals the one
    decoded from the mappings: xarray commits with coordinates, dimension scales and an attribute change,
    then versioned-hdf5 commits filled by ``fill_chunk_maps``."""
    import pandas as pd

    from xarray_vhdf5._versions import states

    path = tmp_path / "sst.h5"
    rng = np.random.default_rng(5)
    for t in range(70):  # sst reaches 70 chunks of (1, 4, 5)
        day = xr.Dataset(
            {"sst": (("time", "lat", "lon"), rng.random((1, 4, 5), dtype=np.float32), {"units": "degC"})},
            coords={"time": pd.date_range("2000-01-01", periods=1) + pd.Timedelta(days=t), "lat": np.arange(4.0)},
        )
        day["sst"].encoding["chunks"] = (1, 4, 5)
        day.vhdf5.commit(f"d{t}", path=path, append_dim="time")
    with xr.open_dataset(path, engine="vhdf5") as ds:
        edited = ds.load()
    edited["sst"].attrs["units"] = "K"
    edited.vhdf5.commit("attrs", path=path)
    with h5py.File(path, "r+") as f:  # two versions by versioned-hdf5: no maps until the fill
        vf = versioned_hdf5.VersionedHDF5File(f)
        for k in range(2):
            with vf.stage_version(f"vh{k}") as g:
                g["sst"][k, 0, 0] = -1.0
    assert xv.fill_chunk_maps(path).stored > 0
    decoded = tmp_path / "decoded.h5"
    shutil.copy(path, decoded)
    with h5py.File(decoded, "r+") as f:
        del f["__vhdf5__/chunk_maps"]

    opened = []
    real = states.dataset_state
    monkeypatch.setattr(states, "dataset_state", lambda d: opened.append(d.name.rsplit("/", 1)[1]) or real(d))
    with h5py.File(path, "r") as f, h5py.File(decoded, "r") as g:
        names = [n for n in f["_version_data/versions"] if n != "__first_version__"]
        for name in names:
            mine = states.version_states(f[f"_version_data/versions/{name}"])
            theirs = states.version_states(g[f"_version_data/versions/{name}"])
            assert sorted(mine) == sorted(theirs), name
            for p, (a, rows_a) in mine.items():
                b, rows_b = theirs[p]
                assert (a.shape, a.dtype, a.chunks, a.raw_path, a.mapping) == (
                    b.shape,
                    b.dtype,
                    b.chunks,
                    b.raw_path,
                    b.mapping,
                ), (name, p)
                assert states.changed_attrs(a.attrs, b.attrs) == [], (name, p)
                np.testing.assert_array_equal(rows_a, rows_b)
        assert version_log(f, records=False) == version_log(g, records=False)
    assert "sst" in opened  # the decoded copy opened it
    opened.clear()
    with h5py.File(path, "r") as f:
        states.version_states(f["_version_data/versions/vh1"])
    assert "sst" not in opened  # from its stored map: not opened


def test_datasets_outside_the_format_are_skipped_with_the_reason(tmp_path):
    """Virtual datasets other code put in a version group: one without raw_data of its name, one in place
    of a versioned dataset but without its ``chunks``/``raw_data`` attributes."""
    path = tmp_path / "h.h5"
    _history(path)
    with h5py.File(path, "r+") as f:
        layout = h5py.VirtualLayout(shape=(10,), dtype="i4")
        layout[:] = h5py.VirtualSource(f["_version_data/small/raw_data"])[:10]
        v2 = f["_version_data/versions/v2"]
        v2.create_virtual_dataset("foreign", layout)
        del v2["small"]
        v2.create_virtual_dataset("small", layout)
    report = xv.fill_chunk_maps(path)
    assert report.stored == 14  # all but v2's small
    assert sorted(report.skipped) == ["v2/foreign", "v2/small"]
    assert "with a hash table" in report.skipped["v2/foreign"]
    assert "is not a versioned dataset" in report.skipped["v2/small"]
