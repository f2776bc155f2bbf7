"""xarray workflows side by side: open + load a version, stage/edit/commit, append with dask chunks.

Run: ``pytest benchmarks/bench_xr.py --benchmark-only -p no:cacheprovider -o addopts=""``

Data: ``sst``, a (64, 180, 360) float32 variable (t, lat, lon) with a float64
``time`` coordinate, HDF5 chunks (8, 180, 360) (8 chunks of 2 MiB, 16.6 MB).
The versioned file holds 10 versions written from xarray (``r1``: the data;
``r2``..``r10``: one chunk rewritten each); the plain file is the same data as
``to_netcdf(engine="h5netcdf")`` writes it, same chunks. Groups:

- ``xr: open_dataset + load``: version ``r5``, whole, as numpy in memory:
  ``xarray_vhdf5`` (``xr.open_dataset(engine="vhdf5", version="r5").load()``),
  ``h5netcdf version group`` (``xr.open_dataset(engine="h5netcdf",
  group="/_version_data/versions/r5").load()``: a netCDF tool reading the version),
  ``versioned_hdf5`` (h5py level: ``VersionedHDF5File(f)["r5"]`` ``sst`` and ``time``
  read, on a file it wrote itself with the same data), ``h5netcdf``
  (``xr.open_dataset(plain, engine="h5netcdf").load()``) and ``h5py`` (``sst`` and
  ``time`` of the plain file);
- ``xr: stage + edit one chunk + commit``: open the current version, stage it,
  assign one whole chunk (8, 180, 360) of new values (``staged["sst"].variable[...] =``),
  commit; ``versioned_hdf5``: ``stage_version`` + the same assignment; ``h5py``: the
  plain file opened ``"r+"`` and the chunk written (no history);
- ``xr: append one step + commit``: one (1, 180, 360) step more per round;
  ``xarray_vhdf5 dask``: ``xr.open_dataset(engine="vhdf5", chunks={})`` (dask chunks =
  HDF5 chunks), ``xr.concat`` with the step, ``ds.vhdf5.commit(path=...)`` (the
  streaming dask commit: every chunk hashed, only the new one written);
  ``xarray_vhdf5 staged``: ``stage()`` + ``vhdf5.append`` + ``commit()``;
  ``versioned_hdf5``: ``stage_version`` + ``resize`` + one step (``sst`` and ``time``);
  ``h5py``: the same on the plain file (xarray's ``to_netcdf`` has no append along a
  dimension: plain h5py is the equivalent).

Each round of the edit and append groups adds a version (the file grows by one
version per round; 10 rounds). Every group checks the final data against numpy.
"""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (registers the engine and the .vhdf5 accessor)

SHAPE = (64, 180, 360)
CHUNKS = (8, 180, 360)
N_EDITS = 9  # versions r2..r10
READ = "r5"
ROUNDS = 10
BASELINES = ("versioned_hdf5", "h5netcdf", "h5py")


def _dataset(sst: np.ndarray, t0: int = 0) -> xr.Dataset:
    var = xr.Variable(("time", "lat", "lon"), sst)
    var.encoding["chunks"] = CHUNKS
    return xr.Dataset({"sst": var}, coords={"time": np.arange(t0, t0 + len(sst), dtype="f8")})


def _edit_block(k: int) -> tuple[slice, np.ndarray]:
    """The k-th edit: chunk ``k % 8`` along time, all values ``k``."""
    c = k % (SHAPE[0] // CHUNKS[0])
    return slice(c * CHUNKS[0], (c + 1) * CHUNKS[0]), np.full(CHUNKS, k, dtype="f4")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Paths of the versioned files (xarray_vhdf5's, versioned_hdf5's), the plain file, and the models per version."""
    from versioned_hdf5 import VersionedHDF5File

    d = tmp_path_factory.mktemp("xr")
    data = np.random.default_rng(5).standard_normal(SHAPE).astype("f4")
    models = {"r1": data.copy()}
    ours = str(d / "ours.h5")
    _dataset(data).vhdf5.commit("r1", path=ours)
    current = data.copy()
    for k in range(1, N_EDITS + 1):
        with xr.open_dataset(ours, engine="vhdf5") as ds:
            staged = ds.vhdf5.stage()
            rows, block = _edit_block(1000 + k)
            staged["sst"].variable[rows] = block
            current[rows] = block
            staged.vhdf5.commit(f"r{k + 1}")
            staged.close()
        models[f"r{k + 1}"] = current.copy()
    theirs = str(d / "theirs.h5")
    with h5py.File(theirs, "w") as f:
        vf = VersionedHDF5File(f)
        for name, model in models.items():
            with vf.stage_version(name) as g:
                if name == "r1":
                    g.create_dataset("sst", data=model, chunks=CHUNKS)
                    g.create_dataset("time", data=np.arange(SHAPE[0], dtype="f8"), chunks=(CHUNKS[0],))
                else:
                    g["sst"][()] = model
    plain = str(d / "plain.nc")
    _dataset(current).to_netcdf(
        plain,
        engine="h5netcdf",
        encoding={"sst": {"chunksizes": CHUNKS}, "time": {"chunksizes": (CHUNKS[0],)}},
        unlimited_dims=["time"],
    )
    with h5py.File(plain, "r") as f:
        assert f["sst"].chunks == CHUNKS
    return {"ours": ours, "theirs": theirs, "plain": plain, "models": models, "dir": d}


# -- open + load ----------------------------------------------------------------------------
def _load_ours(p):
    with xr.open_dataset(p["ours"], engine="vhdf5", version=READ) as ds:
        return ds.load()["sst"].values


def _load_version_group(p):
    with xr.open_dataset(p["ours"], engine="h5netcdf", group=f"/_version_data/versions/{READ}") as ds:
        return ds.load()["sst"].values


def _load_theirs(p):
    from versioned_hdf5 import VersionedHDF5File

    with h5py.File(p["theirs"], "r") as f:
        g = VersionedHDF5File(f)[READ]
        g["time"][()]
        return g["sst"][()]


def _load_h5netcdf(p):
    with xr.open_dataset(p["plain"], engine="h5netcdf") as ds:
        return ds.load()["sst"].values


def _load_h5py(p):
    with h5py.File(p["plain"], "r") as f:
        f["time"][()]
        return f["sst"][()]


LOADERS = {
    "xarray_vhdf5": _load_ours,
    "h5netcdf version group": _load_version_group,
    "versioned_hdf5": _load_theirs,
    "h5netcdf": _load_h5netcdf,
    "h5py": _load_h5py,
}


@pytest.mark.parametrize("impl", list(LOADERS))
def test_open_and_load(benchmark, record, files, impl):
    benchmark.group = "xr: open_dataset + load of a version (64,180,360) f4"
    out = benchmark(LOADERS[impl], files)
    expected = files["models"]["r10"] if impl in ("h5netcdf", "h5py") else files["models"][READ]
    np.testing.assert_array_equal(out, expected)
    record(benchmark, benchmark.group, impl, baseline=impl in BASELINES)


# -- stage + edit one chunk + commit ----------------------------------------------------------
def _copy(files, key, tmp_path):
    dst = str(tmp_path / f"{key}.h5")
    shutil.copyfile(files[key], dst)
    return dst


@pytest.mark.parametrize("impl", ("xarray_vhdf5", "versioned_hdf5", "h5py"))
def test_stage_edit_commit(benchmark, record, files, tmp_path, impl):
    benchmark.group = "xr: stage + edit one chunk + commit"
    path = _copy(files, {"xarray_vhdf5": "ours", "versioned_hdf5": "theirs", "h5py": "plain"}[impl], tmp_path)
    model = files["models"]["r10"].copy()
    counter = iter(range(1, 10**6))

    def setup():
        k = next(counter)
        rows, block = _edit_block(k)
        model[rows] = block
        return (k, rows, block), {}

    if impl == "xarray_vhdf5":

        def edit(k, rows, block):
            with xr.open_dataset(path, engine="vhdf5") as ds:
                staged = ds.vhdf5.stage()
                staged["sst"].variable[rows] = block
                staged.vhdf5.commit(f"e{k}")
                staged.close()

    elif impl == "versioned_hdf5":
        from versioned_hdf5 import VersionedHDF5File

        def edit(k, rows, block):
            with h5py.File(path, "r+") as f:
                with VersionedHDF5File(f).stage_version(f"e{k}") as g:
                    g["sst"][rows] = block

    else:

        def edit(k, rows, block):
            with h5py.File(path, "r+") as f:
                f["sst"][rows] = block

    benchmark.pedantic(edit, setup=setup, rounds=ROUNDS, iterations=1)
    if impl == "h5py":
        with h5py.File(path, "r") as f:
            np.testing.assert_array_equal(f["sst"][()], model)
    else:
        with h5py.File(path, "r") as f:
            versions = f["_version_data/versions"]
            assert versions.attrs["current_version"] == f"e{ROUNDS}"
            np.testing.assert_array_equal(versions[f"e{ROUNDS}"]["sst"][()], model)
    record(benchmark, benchmark.group, impl, baseline=impl in BASELINES)


# -- append one step + commit -----------------------------------------------------------------
@pytest.mark.parametrize("impl", ("xarray_vhdf5 dask", "xarray_vhdf5 staged", "versioned_hdf5", "h5py"))
def test_append_with_dask_chunks(benchmark, record, files, tmp_path, impl):
    benchmark.group = "xr: append one (1,180,360) step + commit"
    path = _copy(files, {"versioned_hdf5": "theirs", "h5py": "plain"}.get(impl, "ours"), tmp_path)
    rng = np.random.default_rng(9)
    steps = rng.standard_normal((ROUNDS, 1, *SHAPE[1:])).astype("f4")
    model = [files["models"]["r10"]]
    counter = iter(range(10**6))

    def setup():
        k = next(counter)
        model.append(steps[k])
        return (k,), {}

    if impl == "xarray_vhdf5 dask":

        def append(k):
            ds = xr.open_dataset(path, engine="vhdf5", chunks={})
            grown = xr.concat([ds, _dataset(steps[k], SHAPE[0] + k).chunk({"time": CHUNKS[0]})], "time")
            grown.vhdf5.commit(f"a{k}", path=path)
            ds.close()

    elif impl == "xarray_vhdf5 staged":

        def append(k):
            with xr.open_dataset(path, engine="vhdf5") as ds:
                staged = ds.vhdf5.stage().vhdf5.append(_dataset(steps[k], SHAPE[0] + k), dim="time")
                staged.vhdf5.commit(f"a{k}")
                staged.close()

    elif impl == "versioned_hdf5":
        from versioned_hdf5 import VersionedHDF5File

        def append(k):
            with h5py.File(path, "r+") as f:
                with VersionedHDF5File(f).stage_version(f"a{k}") as g:
                    n = g["sst"].shape[0]
                    g["sst"].resize((n + 1, *SHAPE[1:]))
                    g["sst"][n] = steps[k][0]
                    g["time"].resize((n + 1,))
                    g["time"][n] = SHAPE[0] + k

    else:

        def append(k):
            with h5py.File(path, "r+") as f:
                n = f["sst"].shape[0]
                f["sst"].resize(n + 1, axis=0)
                f["sst"][n] = steps[k][0]
                f["time"].resize(n + 1, axis=0)
                f["time"][n] = SHAPE[0] + k

    benchmark.pedantic(append, setup=setup, rounds=ROUNDS, iterations=1)
    expected = np.concatenate(model)
    times = np.arange(SHAPE[0] + ROUNDS, dtype="f8")
    if impl == "h5py":
        with h5py.File(path, "r") as f:
            np.testing.assert_array_equal(f["sst"][()], expected)
            np.testing.assert_array_equal(f["time"][()], times)
    elif impl == "versioned_hdf5":
        from versioned_hdf5 import VersionedHDF5File

        with h5py.File(path, "r") as f:
            g = VersionedHDF5File(f)[f"a{ROUNDS - 1}"]
            np.testing.assert_array_equal(g["sst"][()], expected)
            np.testing.assert_array_equal(g["time"][()], times)
    else:
        with xr.open_dataset(path, engine="vhdf5") as ds:
            assert ds.vhdf5.version == f"a{ROUNDS - 1}"
            np.testing.assert_array_equal(ds["sst"].values, expected)
            np.testing.assert_array_equal(ds["time"].values, times)
    record(benchmark, benchmark.group, impl, baseline=impl in BASELINES)
