"""``store.version_refs`` and ``vhdf5 refs``: a version as a kerchunk reference set, read without libhdf5.

Two files: the NOAA COADS subset committed through xarray over three versions
(deflate+shuffle as the engine writes it, lzf, no compression, fletcher32, a
scalar, variable-length and fixed-width strings, a subgroup), and one written
through the h5py-like API in a fresh interpreter (hdf5plugin's Zstandard and
Blosc, deflate+shuffle+fletcher32 on big-endian ints, incompressible chunks that
HDF5 stored with deflate skipped, grown datasets whose new chunks the version
does not map, fill values zarr's would not give, phony dimensions). Every
version's reference set is read through fsspec's reference file system, from
the file (``file``) and from a copy in fsspec's memory file system, with
``xr.open_dataset(..., engine="zarr")``, and compared with ``engine="vhdf5"``
(``assert_identical``). A child process with h5py made unimportable reads the
reference set of a copy, proving that no libhdf5 is needed.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import fsspec
import h5py
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import xarray_vhdf5
from xarray_vhdf5.cli._main import cli
from xarray_vhdf5.errors import UnsupportedError, VersionNotFoundError
from xarray_vhdf5.store import UnreferencedArrayWarning, version_refs

DATA = os.path.join(os.path.dirname(xarray_vhdf5.__file__), "data", "coads_sst_airt.nc")
NOAA_VERSIONS = ("v1", "v2", "v3")
MIXED_VERSIONS = ("m1", "m2", "m3")


def _write_noaa(path: str) -> None:
    src = xr.open_dataset(DATA, decode_times=False).load()
    v1 = src.isel(TIME=slice(0, 3))
    v1["AIRT"].encoding = {"compression": "lzf"}
    v1.vhdf5.commit("v1", path=path)
    v2 = src.isel(TIME=slice(0, 6))
    v2["AIRT"].encoding = {"compression": "lzf"}
    v2["SST"] = v2["SST"] + 1
    v2["station"] = xr.Variable((), np.float64(42.5), {"units": "m"})
    v2["label"] = xr.Variable(("COADSY",), np.array([f"y{i}" * (i % 4) for i in range(90)], dtype=object))
    v2["code"] = xr.Variable(("COADSX",), np.array([b"ab", b"", b"xyz"] * 60, "S3"))
    v2["count"] = xr.Variable(("COADSX",), np.arange(180, dtype="i4"), encoding={"compression": None})
    v2["check"] = xr.Variable(
        ("COADSY", "COADSX"),
        np.arange(90 * 180, dtype="f8").reshape(90, 180),
        encoding={"fletcher32": True, "zlib": True, "shuffle": True},
    )
    v2.vhdf5.commit("v2", path=path)
    sub = src.isel(TIME=slice(6, 8))[["SST"]]
    sub.attrs = {"title": "a subgroup"}
    sub.vhdf5.commit("v3", path=path, group="sub")


def _write_mixed(path: str) -> None:
    """Written in a fresh interpreter (see test_manifest.test_hdf5plugin_filters_decode why)."""
    import hdf5plugin

    rng = np.random.default_rng(5)
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("m1") as g:
            g.create_dataset("plain", data=np.arange(30.0), chunks=(8,), fillvalue=1.5)
            g.create_dataset("ints", data=np.arange(10, dtype="i8"), chunks=(4,), fillvalue=-1, compression="gzip")
            g.create_dataset(
                "gz",
                data=rng.random((20, 13)).round(2).astype("f4"),
                chunks=(6, 5),
                compression="gzip",
                shuffle=True,
                fillvalue=np.nan,
            )
            g["gz"].attrs["_FillValue"] = np.float32(np.nan)
            g.create_dataset("zeros", data=np.arange(1, 11, dtype="i4"), chunks=(5,), compression="gzip")
            g.create_dataset(
                "fl",
                data=rng.integers(0, 60000, (14, 9)).astype(">u2"),
                chunks=(6, 5),
                compression="gzip",
                shuffle=True,
                fletcher32=True,
                fillvalue=3,
            )
            g.create_dataset(
                "zs", data=rng.random((40, 7)).round(1).astype("f4"), chunks=(16, 7), **hdf5plugin.Zstd(clevel=3)
            )
            # Blosc cannot shrink the random rows' chunk: HDF5 stores it with the filter skipped
            bl = np.concatenate(
                [np.tile(np.arange(5, dtype="i2"), (64, 1)), rng.integers(-(2**15), 2**15, (33, 5)).astype("i2")]
            )
            g.create_dataset(
                "bl", data=bl, chunks=(32, 5), **hdf5plugin.Blosc(cname="lz4", shuffle=hdf5plugin.Blosc.SHUFFLE)
            )
            g.create_dataset("rnd", data=rng.random(64), chunks=(16,), compression="gzip")
            g.create_dataset("lz", data=rng.random((9, 10)) < 0.3, chunks=(3, 4), compression="lzf")
            g.create_dataset("sub/t", data=np.arange(12, dtype="i4").reshape(3, 4), chunks=(2, 2), compression="gzip")
            g["sub/t"].attrs["units"] = "K"
        with vf.stage_version("m2") as g:  # grown: the new chunks are not mapped
            g["plain"].resize((50,))
            g["ints"].resize((20,))
            g["gz"].resize((26, 13))
            g["zeros"].resize((20,))
            g["zs"][0, 0] = 7.0
        with vf.stage_version("m3") as g:  # shrunk into a partial edge chunk; one chunk back to the fill
            g["gz"].resize((17, 10))
            g["gz"][0:6, 0:5] = np.nan
            g["fl"][13, 8] = 1


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("refs")
    noaa, mixed = str(folder / "noaa.h5"), str(folder / "mixed.h5")
    _write_noaa(noaa)
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
        f"import test_store_refs; test_store_refs._write_mixed({mixed!r})"
    )
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"noaa": noaa, "mixed": mixed}


def open_refs(refs: dict, protocol: str = "file", group: str | None = None) -> xr.Dataset:
    """``xr.open_dataset`` of a reference set through fsspec's reference file system.

    The root group without the consolidated ``.zmetadata`` (every document read on its
    own); a subgroup through ``.zmetadata``: without it zarr's ``FsspecStore`` lists
    ``/sub`` in the reference file system, whose keys have no leading slash, and
    finds no arrays.
    """
    return xr.open_dataset(
        "reference://",
        engine="zarr",
        group=group,
        decode_times=False,
        backend_kwargs={
            "consolidated": group is not None,
            "storage_options": {"fo": refs, "remote_protocol": protocol},
        },
    )


def expected(path: str, version: str, group: str | None = None) -> xr.Dataset:
    return xr.open_dataset(path, engine="vhdf5", version=version, group=group, decode_times=False).load()


#: HDF5 filter id -> the numcodecs id a reference set names.
NUMCODECS_IDS = {1: "zlib", 2: "shuffle", 3: "fletcher32"}


def manifest_of(path: str, version: str, name: str):
    """The chunk manifest of dataset ``name`` of ``version``."""
    reader = xarray_vhdf5.VersionedHDF5File.open(path)
    try:
        return reader[version][name].manifest
    finally:
        reader.close()


def filters_of(path: str, version: str, name: str) -> tuple:
    """raw_data's filter pipeline of dataset ``name`` (HDF5's encoding order)."""
    return manifest_of(path, version, name).filters


def filter_masks(path: str, version: str, name: str) -> np.ndarray:
    """HDF5's filter mask of each stored chunk of dataset ``name``."""
    return manifest_of(path, version, name).filter_masks


def kinds(refs: dict) -> dict[str, set[str]]:
    """Per array, what its chunk values are: ``range`` ([url, offset, length]) or ``inline``."""
    out: dict[str, set[str]] = {}
    for key, value in refs["refs"].items():
        name, _, last = key.rpartition("/")
        if last.startswith("."):
            continue
        out.setdefault(name, set()).add("range" if isinstance(value, list) else "inline")
    return out


@pytest.mark.parametrize("version", NOAA_VERSIONS)
def test_noaa_versions_read_through_local_refs(files, version):
    path = files["noaa"]
    refs = version_refs(path, version, inline_threshold=0)
    assert refs["version"] == 1
    got = open_refs(refs).load()
    xr.testing.assert_identical(got, expected(path, version))
    zarray = json.loads(refs["refs"]["SST/.zarray"])
    assert zarray["compressor"]["id"] == "zlib" and zarray["filters"] == [{"id": "shuffle", "elementsize": 4}]
    assert zarray["fill_value"] == "NaN"
    assert json.loads(refs["refs"]["SST/.zattrs"])["_ARRAY_DIMENSIONS"] == ["TIME", "COADSY", "COADSX"]
    by_kind = kinds(refs)
    assert by_kind["SST"] == {"range"}
    assert by_kind["AIRT"] == {"inline"}  # lzf: decoded, inlined
    assert json.loads(refs["refs"]["AIRT/.zarray"])["compressor"] is None
    if version == "v2":
        assert by_kind["count"] == {"range"} and by_kind["check"] == {"range"}
        check = json.loads(refs["refs"]["check/.zarray"])  # in raw_data's pipeline order, checksum last
        assert check["compressor"] is None
        assert [c["id"] for c in check["filters"]] == [NUMCODECS_IDS[f[0]] for f in filters_of(path, version, "check")]
        assert by_kind["label"] == {"inline"} and by_kind["station"] == {"inline"}
        assert json.loads(refs["refs"]["station/.zarray"])["shape"] == []


def test_noaa_subgroup(files):
    path = files["noaa"]
    refs = version_refs(path, "v3", group="sub", inline_threshold=0)
    xr.testing.assert_identical(open_refs(refs).load(), expected(path, "v3", group="sub"))
    whole = version_refs(path, "v3", inline_threshold=0)
    assert "sub/.zgroup" in whole["refs"] and "sub/SST/.zarray" in whole["refs"]
    xr.testing.assert_identical(open_refs(whole, group="sub").load(), expected(path, "v3", group="sub"))


@pytest.mark.parametrize("version", MIXED_VERSIONS)
def test_filters_and_fill_values(files, version):
    path = files["mixed"]
    refs = version_refs(path, version, inline_threshold=0)
    xr.testing.assert_identical(open_refs(refs).load(), expected(path, version))
    xr.testing.assert_identical(open_refs(refs, group="sub").load(), expected(path, version, group="sub"))
    meta = {k.split("/")[0]: json.loads(v) for k, v in refs["refs"].items() if k.endswith(".zarray")}
    assert meta["zs"]["compressor"]["id"] == "zstd" and meta["bl"]["compressor"]["id"] == "blosc"
    assert meta["plain"]["compressor"] is None and meta["plain"]["filters"] is None
    assert meta["fl"]["dtype"] == ">u2"
    by_kind = kinds(refs)
    assert by_kind["zs"] == {"range"} and by_kind["fl"] == {"range"} and by_kind["rnd"] == {"range"}
    assert by_kind["lz"] == {"inline"}
    # chunks stored with Blosc skipped (filter mask 1): inlined, encoded again; the others are ranges
    masks = filter_masks(path, version, "bl")
    assert 0 < np.count_nonzero(masks) < masks.size
    assert sum(
        k.startswith("bl/") and not isinstance(v, list)
        for k, v in refs["refs"].items()
        if not k.endswith((".zarray", ".zattrs"))
    ) == np.count_nonzero(masks)
    for name in ("plain", "ints", "gz", "zeros"):  # unmapped chunks: omitted when fill_value reads as them
        unmapped = np.argwhere(manifest_of(path, version, name).slots < 0)
        assert (version == "m1") == (unmapped.size == 0)
        keys = [f"{name}/" + ".".join(map(str, index)) for index in unmapped.tolist()]
        if name in ("plain", "ints"):  # HDF5 fill 1.5 and -1, no _FillValue: zarr's null reads 0
            assert meta[name]["fill_value"] is None
            assert all(isinstance(refs["refs"][k], str) for k in keys)
        else:  # HDF5 fill 0 without _FillValue, NaN with _FillValue NaN
            assert meta[name]["fill_value"] == {"zeros": None, "gz": "NaN"}[name]
            assert not set(keys) & set(refs["refs"])


def test_memory_copy_without_the_file(files, tmp_path):
    """A copy of the file's bytes in fsspec's memory file system; the file itself moved away."""
    original = files["mixed"]
    path = str(tmp_path / "moved.h5")
    with open(original, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    want = {v: expected(path, v) for v in MIXED_VERSIONS}
    refs = {v: version_refs(path, v, url="memory://refs-test/copy.h5", inline_threshold=0) for v in MIXED_VERSIONS}
    memory = fsspec.filesystem("memory")
    with open(path, "rb") as fh:
        memory.pipe("/refs-test/copy.h5", fh.read())
    os.remove(path)
    try:
        for v in MIXED_VERSIONS:
            assert all(
                value[0] == "memory://refs-test/copy.h5"
                for value in refs[v]["refs"].values()
                if isinstance(value, list)
            )
            xr.testing.assert_identical(open_refs(refs[v], protocol="memory").load(), want[v])
    finally:
        memory.rm("/refs-test", recursive=True)


def as_text(var: xr.Variable) -> list:
    """A variable's dtype kind (strings: ``"U"``, as zarr's StringDType or numpy's), shape and values' reprs."""
    kind = "U" if var.dtype.kind in "TUO" else var.dtype.str
    return [kind, list(var.shape), [repr(x) for x in np.asarray(var.values).ravel().tolist()]]


def test_child_without_h5py_reads_refs(files, tmp_path):
    """h5py (so libhdf5) cannot be imported in the reading process."""
    path = files["noaa"]
    refs_path = tmp_path / "v2.json"
    refs_path.write_text(json.dumps(version_refs(path, "v2")))
    want = expected(path, "v2")
    code = (
        "import sys, json; sys.modules['h5py'] = None; sys.modules['netCDF4'] = None\n"
        "import warnings; warnings.simplefilter('ignore')\n"
        "import numpy as np, xarray as xr\n"
        + inspect.getsource(as_text)
        + f"ds = xr.open_dataset('reference://', engine='zarr', decode_times=False, backend_kwargs="
        f"{{'consolidated': True, 'storage_options': {{'fo': {str(refs_path)!r}, 'remote_protocol': 'file'}}}})\n"
        "out = {k: as_text(v) for k, v in ds.variables.items()}\n"
        "assert 'h5py' not in sys.modules or sys.modules['h5py'] is None\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got == {k: as_text(v) for k, v in want.variables.items()}


def test_inline_threshold_and_limits(files):
    path = files["noaa"]
    small = version_refs(path, "v2")  # kerchunk's 100 bytes: tiny stored chunks inline
    everything = version_refs(path, "v2", inline_threshold=10**9)
    assert kinds(everything)["SST"] == {"inline"}
    for refs in (small, everything):
        xr.testing.assert_identical(open_refs(refs).load(), expected(path, "v2"))
    with pytest.raises(UnsupportedError, match="AIRT.*lzf.*max_inline_bytes=10000"):
        version_refs(path, "v2", max_inline_bytes=10000)
    with pytest.warns(UnreferencedArrayWarning, match="AIRT"):
        skipped = version_refs(path, "v2", max_inline_bytes=10000, unreferenced="skip")
    assert not any(k.startswith("AIRT/") for k in skipped["refs"])
    xr.testing.assert_identical(open_refs(skipped).load(), expected(path, "v2").drop_vars("AIRT"))
    with pytest.raises(ValueError, match="unreferenced"):
        version_refs(path, "v2", unreferenced="ignore")
    with pytest.raises(VersionNotFoundError):
        version_refs(path, "nope")


def test_cli_refs(files, tmp_path):
    path = files["noaa"]
    out = tmp_path / "refs.json"
    result = CliRunner().invoke(
        cli, ["refs", path, "--version", "v3", "--group", "sub", "-o", str(out), "--url", "memory://cli/copy.h5"]
    )
    assert result.exit_code == 0, result.output
    refs = json.loads(out.read_text())
    assert refs == version_refs(path, "v3", group="sub", url="memory://cli/copy.h5")
    memory = fsspec.filesystem("memory")
    with open(path, "rb") as fh:
        memory.pipe("/cli/copy.h5", fh.read())
    try:
        xr.testing.assert_identical(open_refs(refs, protocol="memory").load(), expected(path, "v3", group="sub"))
    finally:
        memory.rm("/cli", recursive=True)
    result = CliRunner().invoke(cli, ["refs", path, "--version", "nope", "-o", str(out)])
    assert result.exit_code == 1 and "nope" in result.output
