"""The read store (``VersionStore``) against the ``vhdf5`` engine and h5py, version by version.

Oracles: ``xr.open_dataset(path, engine="vhdf5", version=v)`` for
``xr.open_zarr(VersionStore(path, version=v))`` (``assert_identical``), and
h5py's read of the version's virtual dataset for every array of
``zarr.open_group(store)``; for the chunks a store passes through, h5py's
``read_direct_chunk`` of raw_data at the offset the virtual dataset maps.
Files: the NOAA samples and the package's COADS subset over several
versions (appends, edits), hand-made files of every dtype and filter,
files written by versioned-hdf5 2.6, hypothesis-drawn Datasets. Then
pickling and dask workers, commits and deletions while a store reads, and
bad input. The kit's conformance tests are in ``test_store_conformance.py``.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import given, settings
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import xarray_vhdf5
from xarray_vhdf5.errors import (
    CorruptFileError,
    DatasetNotFoundError,
    NotHDF5Error,
    NotVersionedError,
    VersionNotFoundError,
)
from xarray_vhdf5.store import VersionStore
from xarray_vhdf5.testing.strategies import datasets, rngs

VERSIONS = "_version_data/versions"
PACKAGE_DATA = Path(xarray_vhdf5.__file__).parent / "data"
PROTO = default_buffer_prototype()
NETCDF_DIM_ONLY = b"This is a netCDF dimension but not a netCDF variable"
# zarr-python warns for fixed-length byte strings (no Zarr v3 spec yet) and for numcodecs.* codecs
# (numcodecs=True): both expected where a test reads such arrays, and filtered only there.
UNSTABLE_DTYPE = "ignore::zarr.errors.UnstableSpecificationWarning"
NUMCODECS_CODECS = "ignore:Numcodecs codecs are not in the Zarr version 3 specification:zarr.errors.ZarrUserWarning"


# -- oracles --------------------------------------------------------------------------------------
def _mapped_chunks(vds) -> dict[tuple[int, ...], tuple[str, tuple[int, ...]]]:
    """Chunk index -> (raw_data path, offset in raw_data) from h5py's ``virtual_sources()``."""
    chunks = vds.chunks or tuple(vds.attrs["chunks"])
    out = {}
    for m in vds.virtual_sources():
        (vstart, vend), (sstart, _) = m.vspace.get_select_bounds(), m.src_space.get_select_bounds()
        for index in np.ndindex(*(-(-(e + 1 - s) // c) for s, e, c in zip(vstart, vend, chunks))):
            start = tuple(s + i * c for s, i, c in zip(vstart, index, chunks))
            out[tuple(p // c for p, c in zip(start, chunks))] = (
                m.dset_name,
                tuple(ss + (p - s) for ss, p, s in zip(sstart, start, vstart)),
            )
    return out


def _is_dimension_only(obj) -> bool:
    return bytes(np.asarray(obj.attrs.get("NAME", b""))).startswith(NETCDF_DIM_ONLY)


def _expected(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if value.dtype.kind == "O":  # variable-length strings: zarr's are str
        value = np.array([v.decode() if isinstance(v, bytes) else v for v in value.reshape(-1)], dtype=object).reshape(
            value.shape
        )
    return value.reshape(shape) if value.shape != shape else value  # a scalar: one point, 0-d


def assert_arrays_match_h5py(path, version: str, group: str | None = None, **store_kwargs) -> None:
    """Every array of ``zarr.open_group(store)`` equals h5py's read of its dataset; no dataset is missing."""
    zg = zarr.open_group(VersionStore(path, version=version, group=group, **store_kwargs), mode="r")
    arrays = {name: node for name, node in zg.members(max_depth=None) if isinstance(node, zarr.Array)}
    with h5py.File(path, "r") as f:
        root = f[f"{VERSIONS}/{version}/{group}" if group else f"{VERSIONS}/{version}"]
        names = []
        root.visititems(
            lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and not _is_dimension_only(o) else None
        )
        assert sorted(arrays) == sorted(names)
        for name, arr in arrays.items():
            got = arr[...]
            expected = _expected(root[name][()], arr.shape)
            if expected.dtype.kind == "O":
                got = np.asarray(got, dtype=object)
            else:
                assert got.dtype == expected.dtype.newbyteorder("="), name
                endian = arr.metadata.codecs[0].to_dict().get("configuration", {}).get("endian")
                if expected.dtype.itemsize > 1 and expected.dtype.kind != "S":  # chunks served as stored
                    assert endian == ("big" if expected.dtype.byteorder == ">" else "little"), name
            np.testing.assert_array_equal(got, expected, err_msg=f"{name} of {version}")


def assert_same_as_engine(path, version, group: str | None = None, **kwargs) -> None:
    """``open_zarr`` (numpy-backed: dask reads are test_dask_processes_read_the_store) == the engine."""
    with (
        xr.open_zarr(VersionStore(path, version=version, group=group), chunks=None, **kwargs) as z,
        xr.open_dataset(path, engine="vhdf5", version=version, group=group, **kwargs) as e,
    ):
        xr.testing.assert_identical(z.load(), e.load())


def _key_bytes(store: VersionStore, key: str) -> bytes | None:
    got = sync(store.get(key, PROTO))
    return None if got is None else got.to_bytes()


# -- NOAA files and the package's COADS subset over several versions ------------------------------
SOURCES = [
    "coads_climatology.cdf",
    "esku_heat_budget.cdf",
    "etopo20.cdf",
    "ocean_atlas_subset.nc",
    "coads_sst_airt.nc",
]  # etopo5.cdf (37 MB) left out: the same layout as etopo20, 4 s more


@pytest.mark.parametrize(
    "name",
    # esku_heat_budget.cdf (4 s, its 100 variables) in the slow run: the suite stays under 5 minutes
    [pytest.param(n, marks=pytest.mark.slow) if n == "esku_heat_budget.cdf" else n for n in SOURCES],
)
def test_noaa_versions_read_as_the_engine(noaa_dir, tmp_path, name):
    """First half of the records, the rest appended, then a staged edit: each version agrees."""
    source = PACKAGE_DATA / name if name == "coads_sst_airt.nc" else noaa_dir / name
    with xr.open_dataset(source, decode_times=False) as src:
        src = src.load()
    path = tmp_path / "noaa.h5"
    first = next(iter(src.data_vars))
    if "TIME" in src.dims:
        src.isel(TIME=slice(0, 6)).vhdf5.commit("v1", path=path)
        # staged append (commit(append_dim=) decodes the stored times: year zero fails there)
        with xr.open_dataset(path, engine="vhdf5", decode_times=False) as opened:
            opened.vhdf5.stage().vhdf5.append(src.isel(TIME=slice(6, None)), "TIME").vhdf5.commit("v2")
    else:
        src.isel({src[first].dims[0]: slice(0, 20)}).vhdf5.commit("v1", path=path)
        src.vhdf5.commit("v2", path=path)
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as opened:
        staged = opened.vhdf5.stage()
        staged[first][(slice(0, 2),) * staged[first].ndim] = 42.0
        staged.attrs["history"] = "edited in a test"
        staged.vhdf5.commit("v3", message="patch")
    for version in ("v1", "v2", "v3"):
        assert_same_as_engine(path, version, decode_times=False)
    assert_arrays_match_h5py(path, "v3")  # h5py's reads of every array: the last version (time budget)
    with xr.open_zarr(VersionStore(path, version="v3"), decode_times=False) as z:
        assert z.attrs["history"] == "edited in a test"
        assert (z[first].values[(slice(0, 2),) * z[first].ndim] == 42.0).all()
    with xr.open_zarr(VersionStore(path, version="v1"), decode_times=False) as z:
        assert z.sizes[src[first].dims[0]] < src.sizes[src[first].dims[0]]


# -- dtypes, strings, scalars, groups ---------------------------------------------------------------
@pytest.fixture
def kinds_file(tmp_path) -> Path:
    """Through netCDF-4 (char arrays, as xarray writes them) and committed: every kind of variable.

    ``v1`` at the root; ``v2`` the same in-memory Dataset (no char arrays) in group ``g/h``.
    """
    ds = xr.Dataset(
        {
            "flag": ("time", np.array([b"ok", b"bad", b"ok", b"ok", b"nan", b"ok"])),
            "label": ("time", np.array(["aé", "b", "c", "d", "e", "f"])),
            "note": ("time", np.array(["x", "yy", "zzz", "w", "", "u"], dtype=object)),
            "sst": ("time", np.array([1.5, np.nan, 3.0, 4.0, 5.0, 6.0]), {"units": "K"}),
            "mask": ("time", np.array([True, False] * 3)),
            "i1": (("time", "x"), np.arange(12, dtype="i1").reshape(6, 2)),
            "u4": ("x", np.array([1, 2**31], dtype=">u4")),
            "f4be": ("x", np.array([1.5, -2.5], dtype=">f4")),
            "i8be": ("x", np.array([-(2**40), 7], dtype=">i8")),
            "depth": ((), 3.25, {"positive": "down"}),
            "station": ((), "Ocean Station Papa"),
            "when": ("time", np.arange(6).astype("datetime64[D]").astype("datetime64[ns]")),
        },
        coords={"time": np.arange(6)},
        attrs={"title": "kinds", "levels": np.array([1, 2]), "scale": 1.5, "flag_values": np.array([0, 1], "i1")},
    )
    nc = tmp_path / "kinds.nc"
    ds.to_netcdf(
        nc,
        engine="netcdf4",
        encoding={
            "flag": {"dtype": "S1"},
            "label": {"dtype": "S1", "_Encoding": "utf-8"},
            "sst": {"_FillValue": -1e34},
            "i1": {"_FillValue": -1},
        },
    )
    path = tmp_path / "kinds.h5"
    with xr.open_dataset(nc, engine="netcdf4") as src:
        src.load().vhdf5.commit("v1", path=path)
    ds.vhdf5.commit("v2", path=path, group="g/h")
    return path


@pytest.mark.filterwarnings(UNSTABLE_DTYPE)  # char arrays (S1) and fixed-width byte strings
@pytest.mark.parametrize("kwargs", [{}, {"decode_cf": False}, {"mask_and_scale": False}])
def test_kinds_of_variables(kinds_file, kwargs):
    for version, group in [("v1", None), ("v2", None), ("v2", "g/h"), ("v2", "g")]:
        assert_same_as_engine(kinds_file, version, group, **kwargs)


@pytest.mark.filterwarnings(UNSTABLE_DTYPE)
def test_kinds_arrays_match_h5py(kinds_file):
    assert_arrays_match_h5py(kinds_file, "v1")
    assert_arrays_match_h5py(kinds_file, "v2", group="g/h")
    zg = zarr.open_group(VersionStore(kinds_file, version="v1"), mode="r")
    assert zg["depth"].shape == () and zg["depth"][()] == 3.25
    assert zg["station"].shape == () and zg["station"][()] == "Ocean Station Papa"
    big = zarr.open_group(VersionStore(kinds_file, version="v2", group="g/h"), mode="r")
    assert big["u4"].metadata.codecs[0].endian.value == "big"  # big-endian chunks served as stored
    assert zg["flag"].metadata.dimension_names == ("time", "string3")
    assert zg["mask"].dtype == np.dtype("i1") and zg["mask"].attrs["dtype"] == "bool"  # CF-encoded, as netCDF
    assert zg["i8be"][0] == -(2**40)


def test_dtypes_of_h5py_datasets(tmp_path):
    """Datasets made through the h5py-like API: the dtypes xarray's writers would CF-encode away."""
    values = {
        "b": np.array([True, False, True]),
        "i1": np.array([-1, 0, 1], "i1"),
        "u8": np.array([0, 2**63, 2**64 - 1], "u8"),
        "f2": np.array([0.5, -1, 65504], "f2"),
        "c16": np.array([1 + 2j, -0.5j, 3]),
        "f8be": np.array([1.5, 2, -3], ">f8"),
        "i4be": np.array([-(2**31), 0, 2**31 - 1], ">i4"),
        "s5": np.array([b"ab", b"", b"12345"]),
    }
    path = tmp_path / "dtypes.h5"
    with h5py.File(path, "w") as f:
        with xarray_vhdf5.VersionedHDF5File(f).stage_version("v1") as g:
            for name, data in values.items():
                g.create_dataset(name, data=data, chunks=(2,), fillvalue=data[0])
        with xarray_vhdf5.VersionedHDF5File(f).stage_version("v2") as g:
            for name, data in values.items():
                g[name][1:] = data[0]  # chunk 1 is all fill value now: unmapped
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=zarr.errors.UnstableSpecificationWarning)  # S5
        for version in ("v1", "v2"):
            assert_arrays_match_h5py(path, version)
            assert_same_as_engine(path, version)
        zg = zarr.open_group(VersionStore(path, version="v2"), mode="r")
        for name, data in values.items():
            assert zg[name].fill_value == data[0] and zg[name].dtype == data.dtype.newbyteorder("=")
            assert zg[name][2] == data[0]


@pytest.mark.filterwarnings(UNSTABLE_DTYPE)
def test_fill_values_of_strings(tmp_path):
    """``_FillValue`` on byte strings, char arrays and vlen strings: open_zarr opens them, unmasked.

    xarray's Zarr v3 reader cannot decode a string ``_FillValue`` (``FillValueCoder``);
    the store leaves it out (_metadata's docstring), so those variables read as the engine
    reads them with ``mask_and_scale=False``, without that attribute; the rest as the engine.
    """
    ds = xr.Dataset(
        {
            "flag": ("t", np.array([b"ok", b"-", b"no"])),
            "s": ("t", np.array([b"ab", b"zz", b"c"])),
            "o": ("t", np.array(["a", "-", "b"], dtype=object)),
            "f": ("t", np.array([1.0, np.nan, 2])),
        }
    )
    nc, path = tmp_path / "fv.nc", tmp_path / "fv.h5"
    ds.to_netcdf(
        nc,
        engine="netcdf4",
        encoding={
            "flag": {"dtype": "S1", "_FillValue": b"-"},
            "s": {"_FillValue": b"zz"},
            "o": {"_FillValue": "-", "dtype": str},
            "f": {"_FillValue": -9.0},
        },
    )
    with xr.open_dataset(nc, engine="netcdf4") as src:
        src.load().vhdf5.commit("v1", path=path)
    strings = ["flag", "s", "o"]
    for kwargs in ({}, {"decode_cf": False}):
        with (
            xr.open_zarr(VersionStore(path, version="v1"), chunks=None, **kwargs) as z,
            xr.open_dataset(path, engine="vhdf5", version="v1", **kwargs) as e,
            xr.open_dataset(path, engine="vhdf5", version="v1", mask_and_scale=False, **kwargs) as raw,
        ):
            xr.testing.assert_identical(z.drop_vars(strings), e.drop_vars(strings))
            for name in strings:
                expected = raw[name].copy()
                assert "_FillValue" in expected.attrs
                del expected.attrs["_FillValue"]
                xr.testing.assert_identical(z[name], expected)
    zg = zarr.open_group(VersionStore(path, version="v1"), mode="r")
    with h5py.File(path, "r") as f:
        for name, fill in (("flag", b"-"), ("s", b"z")):  # char arrays: one char, kept as zarr's fill_value
            assert zg[name].fill_value == f[f"{VERSIONS}/v1/{name}"].fillvalue == fill
            assert "_FillValue" not in zg[name].attrs


# -- filters: which pass through, byte for byte ------------------------------------------------------
FILTERS = {
    "none": {},
    "gzip": {"compression": "gzip", "compression_opts": 6},
    "gzip_shuffle_fletcher32": {"compression": "gzip", "shuffle": True, "fletcher32": True},
    "shuffle": {"shuffle": True},
    "fletcher32": {"fletcher32": True},
    "lzf": {"compression": "lzf"},
    "scaleoffset": {"scaleoffset": 0},
}
#: Codecs after ``bytes`` with numcodecs=True (without: none of the numcodecs.* ones; decoded).
PASSING = {
    "none": [],
    "gzip": ["numcodecs.zlib"],
    "gzip_shuffle_fletcher32": ["numcodecs.shuffle", "numcodecs.zlib", "numcodecs.fletcher32"],
    "shuffle": ["numcodecs.shuffle"],
    "fletcher32": ["numcodecs.fletcher32"],
    "lzf": None,
    "scaleoffset": None,
}


@pytest.fixture
def filters_file(tmp_path) -> Path:
    """One (23, 11) int32 dataset per filter, chunks (5, 4) with edge chunks; v2 edits, grows, blanks a chunk."""
    rng = np.random.default_rng(7)
    data = rng.integers(-1000, 1000, (23, 11)).astype("i4")
    data[5:10, 4:8] = 0  # chunk (1, 1): all fill value
    path = tmp_path / "filters.h5"
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            for name, options in FILTERS.items():
                g.create_dataset(name, data=data, chunks=(5, 4), fillvalue=0, **options)
        with vf.stage_version("v2") as g:
            for name in FILTERS:
                g[name].resize((27, 11))
                g[name][23:, :] = 9
                g[name][0, 0] = 12345
                g[name][10:15, 0:4] = 0
    return path


@pytest.mark.filterwarnings(NUMCODECS_CODECS)
@pytest.mark.parametrize("numcodecs", [False, True])
def test_filters_read_right_and_pass_through(filters_file, numcodecs):
    for version in ("v1", "v2"):
        assert_arrays_match_h5py(filters_file, version, numcodecs=numcodecs)
        assert_same_as_engine(filters_file, version)
        store = VersionStore(filters_file, version=version, numcodecs=numcodecs, coalesce_bytes=None)
        zg = zarr.open_group(store, mode="r")
        with h5py.File(filters_file, "r") as f:
            for name in FILTERS:
                codecs = [c.to_dict()["name"] for c in zg[name].metadata.codecs]
                passing = PASSING[name]
                if passing is not None and not numcodecs:
                    passing = passing if not passing else None  # numcodecs.* only when asked
                assert codecs == ["bytes"] + (passing or []), name
                vds = f[f"{VERSIONS}/{version}/{name}"]
                mapped = _mapped_chunks(vds)
                for index, (raw, offset) in mapped.items():
                    key = f"{name}/c/" + "/".join(map(str, index))
                    got = _key_bytes(store, key)
                    mask, stored = f[raw].id.read_direct_chunk(offset)
                    if passing is not None:  # passed through: exactly the file's bytes
                        assert mask == 0 and got == bytes(stored), key
                    else:  # decoded: the chunk's points, uncompressed
                        assert len(got) == 5 * 4 * 4, key
                for index in np.ndindex(*zg[name].cdata_shape):
                    if index not in mapped:  # all fill value: no key, zarr fills
                        got = _key_bytes(store, f"{name}/c/" + "/".join(map(str, index)))
                        if name == "scaleoffset":  # read through libhdf5: every chunk of the grid served
                            assert got == bytes(5 * 4 * 4)
                        else:
                            assert got is None, (name, index)


@pytest.mark.filterwarnings(NUMCODECS_CODECS)
def test_chunks_with_a_skipped_filter_read_right(filters_file):
    """A chunk stored with deflate skipped (filter mask bit set, as HDF5 does for an optional filter)."""
    expected = {}
    with h5py.File(filters_file, "r+") as f:
        for name, bit in (("gzip", 0b1), ("gzip_shuffle_fletcher32", 0b10)):
            expected[name] = f[f"{VERSIONS}/v2/{name}"][()]
            vds = f[f"{VERSIONS}/v2/{name}"]
            raw, offset = _mapped_chunks(vds)[(2, 1)]
            mask, stored = f[raw].id.read_direct_chunk(offset)
            assert mask == 0
            if name == "gzip":
                rewritten = zlib.decompress(stored)
            else:  # fletcher32 checks the shuffled, deflated bytes: recompute it over the undeflated ones
                from numcodecs import Fletcher32

                rewritten = bytes(Fletcher32().encode(zlib.decompress(bytes(stored)[:-4])))
            f[raw].id.write_direct_chunk(offset, rewritten, bit)
    with h5py.File(filters_file, "r") as f:  # the file is valid HDF5: libhdf5 reads it as before
        for name, values in expected.items():
            np.testing.assert_array_equal(f[f"{VERSIONS}/v2/{name}"][()], values)
    for numcodecs in (False, True):
        assert_arrays_match_h5py(filters_file, "v2", numcodecs=numcodecs)
    store = VersionStore(filters_file, version="v2", numcodecs=True)
    got = _key_bytes(store, "gzip/c/2/1")  # re-encoded to the array's one codec list
    np.testing.assert_array_equal(
        np.frombuffer(zlib.decompress(got), "<i4").reshape(5, 4), expected["gzip"][10:15, 4:8]
    )
    assert_same_as_engine(filters_file, "v2")


def _check_plugin_filters(path: str) -> None:
    """The body of test_hdf5plugin_zstd_blosc_pass_through, run in a fresh interpreter (see there)."""
    import hdf5plugin
    import numcodecs

    codec_of = {"zstd": {"id": "zstd"}, "blosc": {"id": "blosc"}, "blosc_zstd": {"id": "blosc"}}
    data = np.round(np.random.default_rng(3).random((40, 30)), 1).astype("f4")
    data[:16] = np.arange(16 * 30).reshape(16, 30) % 5  # compressible rows: filters not skipped there
    filters = {
        "zstd": hdf5plugin.Zstd(clevel=5),
        "blosc": hdf5plugin.Blosc(cname="lz4", shuffle=1),
        "blosc_zstd": hdf5plugin.Blosc(cname="zstd", clevel=3, shuffle=2),
        "lz4": hdf5plugin.LZ4(),
    }
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            for name, options in filters.items():
                g.create_dataset(name, data=data, chunks=(16, 8), **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store = VersionStore(path, version="v1", coalesce_bytes=None)
        zg = zarr.open_group(store, mode="r")
        with h5py.File(path, "r") as f:
            for name in filters:
                np.testing.assert_array_equal(zg[name][...], data)
                codecs = [c.to_dict()["name"] for c in zg[name].metadata.codecs]
                assert codecs == (["bytes"] if name == "lz4" else ["bytes", name.split("_")[0]]), codecs
                vds = f[f"{VERSIONS}/v1/{name}"]
                masks = []
                for index, (raw, offset) in _mapped_chunks(vds).items():
                    got = _key_bytes(store, f"{name}/c/" + "/".join(map(str, index)))
                    mask, stored = f[raw].id.read_direct_chunk(offset)
                    masks.append(mask)
                    if name == "lz4":
                        assert len(got) == 16 * 8 * 4
                    elif mask == 0:  # passed through
                        assert got == bytes(stored), (name, index)
                    else:  # HDF5 skipped the filter (could not shrink the chunk): the store encodes it
                        assert bytes(numcodecs.get_codec(codec_of[name]).decode(got)) == bytes(stored)
                assert 0 in masks and (name != "blosc" or 1 in masks), (name, masks)  # blosc lz4: both kinds
        assert_same_as_engine(path, "v1")


def test_hdf5plugin_zstd_blosc_pass_through(tmp_path):
    """zstd and blosc chunks are served as stored (Zarr v3 codecs); lz4 decoded.

    In a fresh interpreter, as tests/test_manifest.py does: once netCDF4-python is
    imported by any test module of the worker, hdf5plugin's filters fail to load.
    """
    pytest.importorskip("hdf5plugin")
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
        f"import test_store_read; test_store_read._check_plugin_filters({str(tmp_path / 'p.h5')!r})"
    )
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


# -- files written by versioned-hdf5 2.6 (no _ARRAY_DIMENSIONS: phony dimensions) ------------------
def test_versioned_hdf5_files(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import versioned_hdf5
    path = tmp_path / "theirs.h5"
    with h5py.File(path, "w") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        with vf.stage_version("r0") as g:
            g.create_dataset("a", data=np.arange(100.0).reshape(10, 10), chunks=(4, 4), fillvalue=-1.0)
            g.create_dataset("b", data=np.arange(10, dtype="i2"), chunks=(3,), compression="gzip", compression_opts=2)
            g.create_dataset(
                "s", data=np.array(["x", "yy", "zzz"], dtype=object), dtype=h5py.string_dtype(), chunks=(2,)
            )
            g.create_group("sub").create_dataset("c", data=np.ones((5, 7), "u2"), chunks=(2, 3))
        with vf.stage_version("r1") as g:
            g["a"].resize((12, 10))
            g["a"][10:, :] = 7
            g["b"][2] = 100
            g["s"][1] = "changed"
        with vf.stage_version("r2") as g:
            g["a"].resize((6, 10))
    for version in ("r0", "r1", "r2"):
        for group in (None, "sub"):
            assert_same_as_engine(path, version, group)
            assert_arrays_match_h5py(path, version, group)
        with xr.open_zarr(VersionStore(path, version=version)) as z:
            assert z["a"].dims == ("phony_dim_0", "phony_dim_1")
    with xr.open_zarr(VersionStore(path, version="r1")) as z:
        assert z["s"].values.tolist() == ["x", "changed", "zzz"] and z.sizes["phony_dim_0"] == 12


# -- hypothesis: drawn Datasets over two versions ---------------------------------------------------
@pytest.mark.filterwarnings(UNSTABLE_DTYPE)
@settings(max_examples=12)
@given(drawn=datasets(), rng=rngs())
def test_drawn_datasets(tmp_path_factory, drawn, rng):
    ds, encoding = drawn
    path = tmp_path_factory.mktemp("drawn") / "d.h5"
    for name, enc in encoding.items():
        ds[name].encoding.update(enc)
    ds.vhdf5.commit("v1", path=path)
    edited = ds.copy(deep=True)
    for name, var in edited.data_vars.items():  # a second version: a point rewritten, an attribute
        if var.size:
            var.values[np.unravel_index(rng.integers(var.size), var.shape)] = var.values.reshape(-1)[0]
        var.attrs["edited"] = name
    edited.vhdf5.commit("v2", path=path)
    for version in ("v1", "v2"):
        assert_same_as_engine(path, version)
        assert_arrays_match_h5py(path, version)


# -- pickling, dask workers --------------------------------------------------------------------------
@pytest.fixture
def small(tmp_path) -> Path:
    path = tmp_path / "small.h5"
    for k in range(3):
        _next(path, k)
    return path


def _next(path, k: int) -> None:
    """Commit version ``v<k>``: ``x`` is ``arange(40) + 100 k`` in chunks of 10."""
    ds = xr.Dataset({"x": ("t", np.arange(40.0) + 100 * k)}, coords={"t": np.arange(40)})
    ds["x"].encoding["chunksizes"] = (10,)
    ds.vhdf5.commit(f"v{k}", path=path)


@pytest.mark.parametrize("opened", [True, False])
def test_pickled_store_pins_the_version(small, opened):
    store = VersionStore(small)  # the current version, v2
    if opened:
        zarr.open_group(store, mode="r")
    blob = pickle.dumps(store)
    _next(small, 3)
    copy = pickle.loads(blob)
    assert copy.version == "v2" and copy == store
    with xr.open_zarr(copy) as z:
        assert z["x"].values[0] == 200.0
    with xr.open_zarr(VersionStore(small)) as z:  # a new store: the new current version
        assert z["x"].values[0] == 300.0


def test_pickled_store_pins_a_relative_version(small):
    blob = pickle.dumps(VersionStore(small, version=-1))  # the parent of the current version: v1
    _next(small, 3)
    with xr.open_zarr(pickle.loads(blob)) as z:
        assert z["x"].values[0] == 100.0


def test_dask_processes_read_the_store(small):
    import dask

    store = VersionStore(small, version="v1", coalesce_bytes=None)  # a task per stored chunk
    with dask.config.set(scheduler="processes", num_workers=2):
        assert os.getpid() not in dask.compute(*(dask.delayed(os.getpid)() for _ in range(2)))
        with xr.open_zarr(store, chunks={}) as z:
            assert z["x"].chunks == ((10, 10, 10, 10),)
            _next(small, 3)  # committed while the graph is built: the workers still read v1
            got = z.load()
    with xr.open_dataset(small, engine="vhdf5", version="v1") as e:
        xr.testing.assert_identical(got, e.load())


# -- commits and deletions while a store reads -------------------------------------------------------
def test_reads_survive_a_commit_and_a_deletion(tmp_path):
    path = tmp_path / "moving.h5"
    rng = np.random.default_rng(1)
    for k in range(4):
        xr.Dataset({"x": (("t", "y"), rng.random((20, 9)))}).vhdf5.commit(f"v{k}", path=path)
    with xr.open_dataset(path, engine="vhdf5", version="v2") as e:
        expected = e.load()
    store = VersionStore(path, version="v2")
    z = xr.open_zarr(store, chunks={})
    zg = zarr.open_group(store, mode="r")
    np.testing.assert_array_equal(zg["x"][:5], expected["x"].values[:5])  # chunks located once
    with h5py.File(path, "r") as f:
        before = f["_version_data/x/raw_data"].shape[0]
    _next_commit = xr.Dataset({"x": (("t", "y"), rng.random((20, 9)))})
    _next_commit.vhdf5.commit("v4", path=path)
    with h5py.File(path, "a") as f:
        xarray_vhdf5.VersionedHDF5File(f).delete_versions(["v0", "v1"])  # their chunks go, v2's move
    with h5py.File(path, "r") as f:
        assert f["_version_data/x/raw_data"].shape[0] < before + 20  # compacted
    np.testing.assert_array_equal(zg["x"][...], expected["x"].values)
    xr.testing.assert_identical(z.load(), expected)
    assert_same_as_engine(path, "v2")
    z.close()


_MOVER = """
import sys, numpy as np
from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions.mutation import open_for_writing
path = sys.argv[1]
for i, old in enumerate(["v0", "v1", "loop0", "loop1", "loop2"]):
    with open_for_writing(path, timeout=60) as f:  # deleting frees rows below the last ones: they move
        VersionedHDF5File(f).delete_versions([old])
    with open_for_writing(path, timeout=60) as f:
        with VersionedHDF5File(f).stage_version(f"loop{i}") as g:
            g["x"][:] = np.arange(1000.0) * (i + 7)
"""


def test_reads_during_commits_and_deletions_in_another_process(tmp_path):
    """v2 read again and again while another process commits and deletes v0, v1, ... (v2's chunks move)."""
    path = tmp_path / "busy.h5"
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        for k in range(3):
            with vf.stage_version(f"v{k}") as g:
                if k == 0:
                    g.create_dataset("x", data=np.zeros(1000), chunks=(50,))
                g["x"][:] = np.arange(1000.0) + 1000 * k
    expected = np.arange(1000.0) + 2000
    store = VersionStore(path, version="v2")
    zg = zarr.open_group(store, mode="r")
    np.testing.assert_array_equal(zg["x"][...], expected)
    with h5py.File(path, "r") as f:
        before = _mapped_chunks(f[f"{VERSIONS}/v2/x"])
    child = subprocess.Popen([sys.executable, "-c", _MOVER, str(path)], stderr=subprocess.PIPE, text=True)
    reads = 0
    try:
        while child.poll() is None:
            np.testing.assert_array_equal(zg["x"][...], expected)
            np.testing.assert_array_equal(np.frombuffer(_key_bytes(store, "x/c/3"), "<f8"), expected[150:200])
            reads += 1
    finally:
        err = child.communicate(timeout=120)[1]
    assert child.returncode == 0, err[-3000:]
    assert reads > 0, reads
    with h5py.File(path, "r") as f:
        assert sorted(f[VERSIONS]) == ["__first_version__", "loop3", "loop4", "v2"]
        after = _mapped_chunks(f[f"{VERSIONS}/v2/x"])
    assert after != before  # v2's chunks moved to other rows of raw_data
    np.testing.assert_array_equal(zg["x"][...], expected)
    assert_same_as_engine(path, "v2")


def test_a_deleted_version_says_so(small):
    store = VersionStore(small, version="v1")
    zg = zarr.open_group(store, mode="r")
    with h5py.File(small, "a") as f:
        xarray_vhdf5.VersionedHDF5File(f).delete_versions(["v1"])
    with pytest.raises(KeyError, match="deleted"):
        zg["x"][...]


# -- bad input ----------------------------------------------------------------------------------------
def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.h5"):
        zarr.open_group(VersionStore(tmp_path / "nope.h5"), mode="r")


def test_not_hdf5(noaa_dir):
    with pytest.raises(NotHDF5Error):
        sync(VersionStore.open(noaa_dir / "etopo20.cdf"))


def test_not_versioned(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(NotVersionedError):
        xr.open_zarr(VersionStore(path))


def test_unknown_version(small):
    with pytest.raises(VersionNotFoundError, match="v9"):
        xr.open_zarr(VersionStore(small, version="v9"))
    with pytest.raises(VersionNotFoundError):
        xr.open_zarr(VersionStore(small, version=7))


def test_unknown_group(kinds_file):
    with pytest.raises(DatasetNotFoundError, match="nope"):
        xr.open_zarr(VersionStore(kinds_file, version="v2", group="nope"))
    with pytest.raises(DatasetNotFoundError, match="sst"):
        xr.open_zarr(VersionStore(kinds_file, version="v1", group="sst"))


def test_unknown_group_is_a_key_error(kinds_file):
    with pytest.raises(KeyError, match="nope"):
        xr.open_zarr(VersionStore(kinds_file, version="v2", group="nope"))
    with pytest.raises(KeyError, match="not a group"):
        xr.open_zarr(VersionStore(kinds_file, version="v1", group="sst"))


def test_verify_detects_a_changed_chunk(tmp_path):
    small = tmp_path / "plain.h5"  # unfiltered, so a changed byte still decodes
    with h5py.File(small, "w") as f:
        with xarray_vhdf5.VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(40.0) + 100, chunks=(10,))
    store = VersionStore(small, version="v1", verify=True)
    np.testing.assert_array_equal(zarr.open_group(store, mode="r")["x"][...], np.arange(40.0) + 100)
    with h5py.File(small, "r") as f:
        vds = f[f"{VERSIONS}/v1/x"]
        raw, offset = _mapped_chunks(vds)[(1,)]
        info = f[raw].id.get_chunk_info_by_coord(offset)
    with open(small, "r+b") as fh:  # one float of chunk 1, still a valid float
        fh.seek(info.byte_offset)
        fh.write(np.float64(-1.0).tobytes())
    with pytest.raises(CorruptFileError, match="x"):
        zarr.open_group(VersionStore(small, version="v1", verify=True), mode="r")["x"][10:20]
    got = zarr.open_group(VersionStore(small, version="v1"), mode="r")["x"][10:20]  # unverified: as stored
    assert got[0] == -1.0


def test_attributes_json_cannot_hold(tmp_path):
    """Attribute values outside JSON take the documented forms (``json_value``): the engine differs there."""
    path = tmp_path / "attrs.h5"
    with h5py.File(path, "w") as f:
        with xarray_vhdf5.VersionedHDF5File(f).stage_version("v1") as g:
            d = g.create_dataset("x", data=np.arange(4.0), chunks=(2,))
            d.attrs.update(
                {
                    "_ARRAY_DIMENSIONS": ["t"],
                    "bad": np.bytes_(b"a\xff"),
                    "c": np.complex128(1 + 2j),
                    "names": np.array([b"a", b"b"]),
                    "nan": np.float32("nan"),
                    "empty": np.array([], "i4"),
                    "big": np.uint64(2**64 - 1),
                    "vlen": "h\xe9llo",
                }
            )
    attrs = xr.open_zarr(VersionStore(path, version="v1"), chunks=None)["x"].attrs
    assert attrs["bad"] == "a\udcff" and attrs["c"] == [1.0, 2.0] and attrs["names"] == ["a", "b"]
    assert np.isnan(attrs["nan"]) and attrs["empty"] == [] and attrs["big"] == 2**64 - 1
    assert attrs["vlen"] == "h\xe9llo"


def test_wrong_argument_types(small):
    with pytest.raises(TypeError, match="takes a path"):
        VersionStore(3)


def test_read_only_store_refuses_writes(small):
    store = VersionStore(small, version="v1")
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_group(store, mode="r")["x"][0] = 5.0
    with xr.open_dataset(small, engine="vhdf5", version="v1") as e:
        assert e["x"].values[0] == 100.0
