"""``backend.manifest``: a version's dataset read with ``os.pread`` after one resolve step.

Files are written by this package and by versioned-hdf5 2.6.0 over four versions
(edits, growing and shrinking resizes through partial edge chunks, a chunk set back
to the fill value, regions grown into fill value) for 1-3 dimensional datasets of
ints, floats, bools, fixed-width bytes, a compound dtype and big-endian uint16, with
no filter, gzip, gzip+shuffle, lzf and fletcher32 (alone and with gzip+shuffle).
Every read through the manifest is compared byte for byte with libhdf5's reading of
the same virtual dataset (h5py), or, for keys h5py does not take (negative steps,
unsorted or repeated indices), with numpy outer indexing of h5py's whole read.
Then the fill values of unmapped and unallocated chunks (a hand-made virtual
dataset), hdf5plugin's filters, unsupported datasets, the errors on damaged files
and pickling.
"""

from __future__ import annotations

import multiprocessing
import operator
import os
import pickle
import subprocess
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xarray_vhdf5
from xarray_vhdf5._backend.manifest import ChunkManifest
from xarray_vhdf5._backend.manifest_resolve import chunk_addresses, resolve_manifest
from xarray_vhdf5.errors import CorruptFileError, UnsupportedError
from xarray_vhdf5.testing.strategies import outer_indices

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import versioned_hdf5

COMPOUND = np.dtype([("a", "<i4"), ("b", "<f8")])
VERSIONS = ("v1", "v2", "v3", "v4")
LIBRARIES = {"xarray_vhdf5": xarray_vhdf5, "versioned_hdf5": versioned_hdf5}


def specs() -> dict[str, tuple[np.ndarray, tuple[int, ...], dict]]:
    """name -> (first version's data, chunks, create_dataset keywords)."""
    rng = np.random.default_rng(7)
    compound = np.zeros((11, 6), COMPOUND)
    compound["a"] = rng.integers(-5, 5, compound.shape)
    compound["b"] = rng.random(compound.shape)
    return {
        "i1d": (
            np.tile(rng.integers(-9, 9, 7), 6)[:40].astype("<i8"),
            (7,),  # repeated chunks
            dict(compression="gzip", fillvalue=-1),
        ),
        "f2d": (rng.random((23, 17)).astype("<f4"), (5, 4), dict(compression="gzip", shuffle=True, fillvalue=1.5)),
        "b3d": (rng.random((9, 10, 5)) < 0.2, (3, 4, 2), dict(compression="lzf", fillvalue=False)),
        "s2d": (
            rng.choice(np.array([b"", b"ab", b"xyz123"], "S6"), (13, 8)),
            (4, 3),
            dict(fletcher32=True, fillvalue=b""),
        ),
        "c2d": (compound, (4, 4), {}),
        "n3d": (rng.random((9, 7, 5)).astype(">f8"), (4, 3, 5), dict(fillvalue=-2.5)),  # no filter, big-endian
        "u2d": (
            rng.integers(0, 60000, (14, 9)).astype(">u2"),
            (6, 5),
            dict(fletcher32=True, compression="gzip", shuffle=True, fillvalue=3),
        ),
    }


def write_history(lib, path) -> None:
    """Four versions of every dataset of :func:`specs` written by ``lib``."""
    sp = specs()
    with h5py.File(path, "w") as f:
        vf = lib.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            for name, (data, chunks, kw) in sp.items():
                g.create_dataset(name, data=data, chunks=chunks, **kw)
        with vf.stage_version("v2") as g:  # an edit; grow axis 0, shrink the last axis
            for name, (data, _, _) in sp.items():
                d = g[name]
                shape = (*d.shape[:-1], d.shape[-1] - 2) if d.ndim > 1 else d.shape
                d.resize((shape[0] + 5, *shape[1:]))
                d[(0,) * d.ndim] = data.flat[1]
        with vf.stage_version("v3") as g:  # shrink axis 0 to a partial edge chunk; one chunk back to fill
            for name, (_, chunks, _) in sp.items():
                d = g[name]
                d.resize((d.shape[0] - 8, *d.shape[1:]))
                d[tuple(slice(0, c) for c in chunks)] = d.fillvalue
        with vf.stage_version("v4") as g:  # grow every axis: the new points read as fill value
            for name in sp:
                g[name].resize(tuple(n + 3 for n in g[name].shape))


@pytest.fixture(scope="module")
def histories(tmp_path_factory):
    """(library, version, dataset) -> (h5py virtual dataset, manifest resolved with verify=True)."""
    files, out = [], {}
    for label, lib in LIBRARIES.items():
        path = tmp_path_factory.mktemp("manifest") / f"{label}.h5"
        write_history(lib, path)
        f = h5py.File(path, "r")
        files.append(f)
        for version in VERSIONS:
            for name in specs():
                vds = f[f"_version_data/versions/{version}/{name}"]
                out[label, version, name] = vds, resolve_manifest(vds, verify=True)
    yield out
    for f in files:
        f.close()


def outer_reference(full: np.ndarray, key: tuple) -> np.ndarray:
    """``full`` indexed axis by axis (ints drop their axis): what h5py does, for any key."""
    index, kept = [], []
    key = key + (slice(None),) * (full.ndim - len(key))
    for k, n in zip(key, full.shape):
        index.append(np.arange(n)[k] if isinstance(k, (slice, np.ndarray)) else np.array([np.arange(n)[k]]))
        kept.append(isinstance(k, (slice, np.ndarray)))
    return full[np.ix_(*index)].reshape([len(i) for i, keep in zip(index, kept) if keep])


def h5py_takes(key: tuple) -> bool:
    """Whether h5py (libhdf5) reads ``key``: positive steps, strictly increasing non-empty arrays."""
    for k in key:
        if isinstance(k, slice) and k.step is not None and k.step < 0:
            return False
        if isinstance(k, np.ndarray) and (k.size == 0 or np.any(k < 0) or np.any(np.diff(k) <= 0)):
            return False
    return True


def expected(vds: h5py.Dataset, key: tuple) -> np.ndarray:
    """What libhdf5 reads for ``key`` (a 0-d array where h5py gives a scalar)."""
    return np.asarray(vds[key] if h5py_takes(key) else outer_reference(vds[()], key), dtype=vds.dtype)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@settings(max_examples=300)
@given(data=st.data())
def test_read_equals_libhdf5_for_random_keys(histories, data):
    where = data.draw(st.sampled_from(sorted(histories)))
    vds, manifest = histories[where]
    key = data.draw(outer_indices(vds.shape))
    # verify=False: chunks without filters take the read into one reused buffer
    assert_same(manifest.read(key, verify=data.draw(st.booleans())), expected(vds, key))


@pytest.mark.parametrize("library", LIBRARIES)
def test_every_version_reads_whole_and_verified(histories, library):
    for version in VERSIONS:
        for name in specs():
            vds, manifest = histories[library, version, name]
            assert manifest.supported, manifest.reason
            assert_same(manifest.read((), verify=True), vds[()])
            assert_same(manifest[...], vds[()])


def test_history_covers_fill_chunks_edges_and_filters(histories):
    """The scenario has what it claims: unmapped chunks, edge chunks, a chunk mapped
    several times (deduplicated) and every filter."""
    _, v4 = histories["xarray_vhdf5", "v4", "f2d"]
    assert np.count_nonzero(v4.slots < 0) > 0
    assert any(n % c for n, c in zip(v4.shape, v4.chunks))
    for library in LIBRARIES:
        _, repeated = histories[library, "v2", "i1d"]
        assert 1 < repeated.rows.size < np.count_nonzero(repeated.slots >= 0)
    names = {histories["versioned_hdf5", "v1", n][1].filter_names for n in specs()}
    assert names == {
        ("deflate",),
        ("shuffle", "deflate"),
        ("lzf",),
        ("fletcher32",),
        (),
        ("shuffle", "deflate", "fletcher32"),
    }


@pytest.mark.parametrize(
    "key",
    [
        (slice(3, 3),),
        (slice(None), slice(5, 2)),
        (np.array([], np.intp),),
        (2, slice(4, 4)),
        (slice(None, None, -1), np.array([], np.intp)),
        (slice(10, 2, 3), 1),
    ],
)
def test_empty_selections_have_the_right_shape(histories, key):
    vds, manifest = histories["xarray_vhdf5", "v2", "f2d"]
    want = outer_reference(vds[()], key)
    assert want.size == 0
    assert_same(manifest.read(key), want)


def test_keys_with_ellipsis_negative_ints_and_boolean_vectors(histories):
    vds, manifest = histories["versioned_hdf5", "v2", "b3d"]
    mask = np.arange(vds.shape[1]) % 3 == 0
    assert_same(manifest.read((Ellipsis, -1)), vds[..., -1])
    assert_same(manifest.read((-2, mask)), vds[-2, np.flatnonzero(mask)])
    assert_same(manifest.read(1), vds[1])


@pytest.mark.parametrize(
    "key, match",
    [
        ((40, 0), "out of bounds"),
        ((np.array([0]), np.array([1])), "at most one"),
        ((np.zeros((2, 2), int),), "1-d integer"),
        ((0, 0, 0), "too many"),
    ],
)
def test_bad_keys_raise_index_error(histories, key, match):
    _, manifest = histories["xarray_vhdf5", "v1", "f2d"]
    with pytest.raises(IndexError, match=match):
        manifest.read(key)


def test_unmapped_and_unallocated_chunks_read_their_fill_values(tmp_path):
    """Unmapped: the virtual dataset's fill value; mapped to a raw_data chunk never
    written: raw_data's fill value (what libhdf5 returns for both)."""
    path = tmp_path / "hand.h5"
    with h5py.File(path, "w") as f:
        raw = f.create_dataset(
            "_version_data/x/raw_data",
            shape=(30,),
            chunks=(10,),
            maxshape=(None,),
            dtype="i4",
            fillvalue=7,
            compression="gzip",
        )
        raw[0:10] = np.arange(10)  # rows 10:30 are never written: chunks 1 and 2 unallocated
        src = h5py.VirtualSource(".", raw.name, shape=raw.shape, dtype=raw.dtype)
        layout = h5py.VirtualLayout(shape=(35,), dtype="i4")
        layout[0:10], layout[10:20], layout[30:35] = src[0:10], src[10:20], src[20:25]
        vds = f.create_virtual_dataset("_version_data/versions/v1/x", layout, fillvalue=-5)
        vds.attrs["chunks"], vds.attrs["raw_data"] = np.array([10]), raw.name
    with h5py.File(path, "r") as f:
        vds = f["_version_data/versions/v1/x"]
        manifest = resolve_manifest(vds)
        want = np.r_[np.arange(10), [7] * 10, [-5] * 10, [7] * 5].astype("i4")
        assert_same(vds[()], want)
        assert_same(manifest.read(()), want)
        assert_same(manifest.read(slice(None, None, -3)), want[::-3])
        assert manifest.nbytes.tolist()[1:] == [0, 0]


def test_a_mapping_past_raw_data_or_a_missing_raw_data_is_corrupt(tmp_path):
    path = tmp_path / "past.h5"
    with h5py.File(path, "w") as f:
        raw = f.create_dataset(
            "_version_data/x/raw_data", data=np.arange(20, dtype="i4"), chunks=(10,), maxshape=(None,)
        )
        layout = h5py.VirtualLayout(shape=(10,), dtype="i4")
        layout[0:10] = h5py.VirtualSource(".", raw.name, shape=(40,), dtype=raw.dtype)[30:40]
        for name, source in [("x", raw.name), ("y", "/_version_data/y/raw_data")]:
            vds = f.create_virtual_dataset(f"_version_data/versions/v1/{name}", layout)
            vds.attrs["chunks"], vds.attrs["raw_data"] = np.array([10]), source
    with h5py.File(path, "r") as f:
        for name, match in [
            ("x", "past the end of /_version_data/x/raw_data"),
            ("y", "names raw_data /_version_data/y/raw_data, which is missing"),
        ]:
            with pytest.raises(CorruptFileError, match=match) as err:
                resolve_manifest(f[f"_version_data/versions/v1/{name}"])
            assert err.value.path == str(path) and f"/_version_data/versions/v1/{name}" in str(err.value)


def test_both_ways_of_findingchunk_addresses_agree(tmp_path):
    """A version mapping few of raw_data's first chunks asks for each (H5Dget_chunk_info_by_coord);
    one mapping most of them visits all (H5Dchunk_iter). Both give the same addresses."""
    path = tmp_path / "few.h5"
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(600.0), chunks=(10,), compression="gzip")
        with vf.stage_version("v2") as g:
            g["x"].resize((15,))
    with h5py.File(path, "r") as f:
        raw = f["_version_data/x/raw_data"]
        every = chunk_addresses(raw, np.arange(0, 600, 10), 10)
        few = chunk_addresses(raw, np.array([0, 590]), 10)
        for a, b in zip(every, few):
            assert a[[0, -1]].tolist() == b.tolist()
        assert np.all(every[1] > 0) and len(set(every[0].tolist())) == 60
        vds = f["_version_data/versions/v2/x"]
        assert_same(resolve_manifest(vds).read(()), vds[()])


def _check_plugin_filters(path: str) -> None:
    """The body of test_hdf5plugin_filters_decode, run in a fresh interpreter (see there)."""
    import hdf5plugin

    data = np.round(np.random.default_rng(3).random((300, 70)), 1).astype("f4")
    filters = {
        "zstd": hdf5plugin.Zstd(),
        "lz4": hdf5plugin.LZ4(),
        "blosc": hdf5plugin.Blosc(cname="lz4", shuffle=hdf5plugin.Blosc.SHUFFLE),
        "blosc_zstd": hdf5plugin.Blosc(cname="zstd", shuffle=hdf5plugin.Blosc.BITSHUFFLE),
        "bitshuffle": hdf5plugin.Bitshuffle(),
    }
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            for name, options in filters.items():
                g.create_dataset(name, data=data, chunks=(64, 32), **options)
    with h5py.File(path, "r") as f:
        for name in filters:
            vds = f[f"_version_data/versions/v1/{name}"]
            manifest = resolve_manifest(vds, verify=True)
            if name == "bitshuffle":  # its own framing; no library decoder known to match
                assert not manifest.supported and "bitshuffle" in manifest.reason
                continue
            assert manifest.supported, manifest.reason
            assert_same(manifest.read(()), vds[()])
            assert_same(manifest.read((slice(50, 250, 7), slice(None, None, -1))), vds[()][50:250:7, ::-1])


def test_hdf5plugin_filters_decode(tmp_path):
    """Chunks of hdf5plugin's filters decode through the manifest as libhdf5 reads them.

    In a fresh interpreter: once netCDF4-python is imported (its wheel brings its own
    libhdf5 and sets HDF5_PLUGIN_PATH to its plugins), hdf5plugin's filters fail to
    create datasets in the same process, and pytest-xdist imports every test module
    (tests/test_netcdf_tools.py imports netCDF4) in every worker.
    """
    pytest.importorskip("hdf5plugin")
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
        f"import test_manifest; test_manifest._check_plugin_filters({str(tmp_path / 'plugins.h5')!r})"
    )
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_unsupported_datasets_say_why(tmp_path):
    path = tmp_path / "unsupported.h5"
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("s", data=np.array(["a", "bc"] * 10, dtype=object), dtype=h5py.string_dtype(), chunks=(4,))
            g.create_dataset("so", data=np.arange(40, dtype="i4"), chunks=(8,), scaleoffset=0)
    with h5py.File(path, "r") as f:
        for name, reason in [("s", "variable-length"), ("so", "scaleoffset")]:
            manifest = resolve_manifest(f[f"_version_data/versions/v1/{name}"])
            assert not manifest.supported and reason in manifest.reason
            assert "unsupported" in repr(manifest)
            with pytest.raises(UnsupportedError, match=reason):
                manifest.read(slice(0, 3))


def test_chunks_stored_without_a_filter_honour_the_filter_mask(tmp_path):
    """h5py's LZF filter is optional: a chunk it cannot shrink is stored as is, with bit 0
    of its filter mask set (HDF5 User Guide, "Filters"); the others are compressed."""
    data = np.zeros(512, "u1")
    data[256:] = np.random.default_rng(5).integers(0, 256, 256)  # chunk 1 does not compress
    path = tmp_path / "mask.h5"
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=data, chunks=(256,), compression="lzf", fillvalue=1)
    with h5py.File(path, "r") as f:
        vds = f["_version_data/versions/v1/x"]
        manifest = resolve_manifest(vds, verify=True)
        assert manifest.filter_masks[manifest.slots].tolist() == [0, 1]
        assert manifest.nbytes[manifest.slots[1]] == 256 > manifest.nbytes[manifest.slots[0]]
        assert_same(manifest.read(()), vds[()])


def test_user_block_offsets(tmp_path):
    path = tmp_path / "userblock.h5"
    with h5py.File(path, "w", userblock_size=1024) as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(100, dtype="i8"), chunks=(16,), compression="lzf")
    with h5py.File(path, "r") as f:
        vds = f["_version_data/versions/v1/x"]
        manifest = resolve_manifest(vds)
        assert manifest.supported, manifest.reason
        assert_same(manifest.read(()), vds[()])


def one_dataset(path, **kwargs) -> np.ndarray:
    """A file whose one version holds ``x``: 1000 float64 in chunks of 100."""
    data = np.repeat(np.arange(100.0), 10)
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=data, chunks=(100,), **kwargs)
    return data


def resolved(path, verify=False) -> ChunkManifest:
    with h5py.File(path, "r") as f:
        return resolve_manifest(f["_version_data/versions/v1/x"], verify=verify)


def flip(path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x5A]))


@pytest.mark.parametrize(
    "kwargs, what",
    [
        (dict(compression="gzip"), "deflate"),
        (dict(compression="lzf"), "lzf"),
        (dict(fletcher32=True), "Fletcher-32 checksum mismatch"),
    ],
)
def test_a_damaged_chunk_is_corrupt_and_others_still_read(tmp_path, kwargs, what):
    path = tmp_path / "flip.h5"
    data = one_dataset(path, **kwargs)
    manifest = resolved(path)
    slot = int(manifest.slots[3])
    assert manifest.filter_masks[slot] == 0  # the filter was applied to this chunk
    flip(path, int(manifest.offsets[slot] + manifest.nbytes[slot] // 2))
    with pytest.raises(CorruptFileError, match=what) as err:
        manifest.read(slice(250, 350))
    message = str(err.value)
    assert str(path) in message and "/_version_data/versions/v1/x" in message and "chunk (3,)" in message
    assert err.value.path == str(path)
    assert_same(manifest.read(slice(400, 1000)), data[400:])  # chunks 4-9 untouched, read alone


@pytest.mark.parametrize("compression", ["gzip", None])
def test_a_truncated_file_is_corrupt(tmp_path, compression):
    path = tmp_path / "truncated.h5"
    data = one_dataset(path, compression=compression)
    manifest = resolved(path)
    last = int(np.argmax(manifest.offsets))
    os.truncate(path, int(manifest.offsets[last] + manifest.nbytes[last] // 2))
    chunk = int(np.flatnonzero(manifest.slots == last)[0])
    with pytest.raises(CorruptFileError, match=r"file ends \d+ bytes into the chunk \(truncated\)") as err:
        manifest.read(slice(chunk * 100, chunk * 100 + 1))
    assert f"chunk ({chunk},)" in str(err.value) and str(path) in str(err.value)
    before = [c for c in range(10) if manifest.offsets[manifest.slots[c]] < manifest.offsets[last]]
    assert_same(manifest.read(slice(before[0] * 100, before[0] * 100 + 100)), data[before[0] * 100 :][:100])


def test_verify_detects_a_changed_chunk_that_still_decodes(tmp_path):
    path = tmp_path / "verify.h5"
    data = one_dataset(path)
    manifest = resolved(path, verify=True)
    assert manifest.filters == ()
    assert_same(manifest.read(()), data)  # verify=True at resolve: every read checks
    flip(path, int(manifest.offsets[manifest.slots[5]]) + 8 * 7)  # point 507
    changed = manifest.read(slice(500, 600), verify=False)
    assert changed[7] != data[507] and np.array_equal(np.delete(changed, 7), np.delete(data[500:600], 7))
    with pytest.raises(CorruptFileError, match="SHA-256") as err:
        manifest.read(slice(500, 510))
    assert "chunk (5,)" in str(err.value)
    assert_same(manifest.read(slice(0, 500)), data[:500])
    with pytest.raises(ValueError, match="verify=True"):
        resolved(path).read(slice(0, 1), verify=True)


def test_pickled_manifest_reads_in_another_process(tmp_path):
    path = tmp_path / "pickle.h5"
    data = one_dataset(path, compression="gzip", shuffle=True)
    manifest = resolved(path, verify=True)
    assert_same(manifest.read(slice(0, 150)), data[:150])  # the descriptor is open now
    blob = pickle.dumps(manifest)
    assert len(blob) < 2500
    copy = pickle.loads(blob)
    assert copy._fd is None and copy.path == str(path)
    assert_same(copy.read(slice(None, None, -7)), data[::-7])
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        got = pool.submit(operator.methodcaller("read", slice(120, 960, 3)), manifest).result()
    assert_same(got, data[120:960:3])


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform")
def test_a_forked_child_reopens_the_file(tmp_path):
    path = tmp_path / "fork.h5"
    data = one_dataset(path, compression="lzf")
    manifest = resolved(path)
    manifest.read(slice(0, 1))
    parent_fd = manifest._fd
    receive, send = multiprocessing.Pipe(duplex=False)

    def child():
        send.send((manifest.read(slice(300, 700)), manifest._pid == os.getpid()))

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    got, reopened = receive.recv()
    process.join()
    assert process.exitcode == 0 and reopened
    assert_same(got, data[300:700])
    assert manifest._fd == parent_fd and manifest._pid == os.getpid()
    assert_same(manifest.read(slice(990, None)), data[990:])


def test_repr_names_what_the_manifest_holds(histories):
    _, manifest = histories["xarray_vhdf5", "v4", "u2d"]
    text = repr(manifest)
    mapped = int(np.count_nonzero(manifest.slots >= 0))
    for part in [
        "/_version_data/versions/v4/u2d",
        "(14, 10)",
        "chunks (6, 5)",
        f"{mapped} of {manifest.slots.size} chunks mapped",
        f"{int(manifest.nbytes.sum())} bytes on disk",
        "shuffle+deflate+fletcher32",
        "supported",
    ]:
        assert part in text


def _read_in_child(manifest: ChunkManifest) -> np.ndarray:
    return manifest.read((), threads=2)


def test_threaded_reads_equal_one_thread_and_survive_fork(tmp_path):
    """Chunks decoded by the shared pool give the same array; a forked child makes its own pool."""
    path = tmp_path / "t.h5"
    data = np.random.default_rng(3).standard_normal((300, 200)).round(3)
    with h5py.File(path, "w") as f:
        with xarray_vhdf5.VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("x", data=data, chunks=(30, 20), compression="gzip", shuffle=True)
    with h5py.File(path, "r") as f:
        manifest = resolve_manifest(f["_version_data/versions/v1/x"], verify=True)
    for threads in (0, 1, 2, 4, None):
        np.testing.assert_array_equal(manifest.read((), threads=threads), data)
        np.testing.assert_array_equal(
            manifest.read((slice(5, 290, 7), [1, 50, 199]), threads=threads), data[5:290:7][:, [1, 50, 199]]
        )
        np.testing.assert_array_equal(manifest.read((), threads=threads, verify=True), data)
    assert manifest.read((-1, -1)) == data[-1, -1] and manifest.read((7, 3)).shape == ()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:  # pool threads exist here
        np.testing.assert_array_equal(pool.submit(_read_in_child, manifest).result(timeout=60), data)


def big_dataset(path) -> np.ndarray:
    """A file whose one version holds ``x``: float64 (1000, 600), unfiltered, chunks (100, 60) (48 KB, 100 chunks).

    4.8 MB: above ``SPLIT_BYTES``, so a whole read splits the chunks among threads.
    """
    data = np.random.default_rng(5).standard_normal((1000, 600))
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=data, chunks=(100, 60))
    return data


@pytest.mark.parametrize("threads", [None, 1, 2, 3, 7])
def test_a_large_unfiltered_read_split_among_threads_equals_one_thread(tmp_path, threads, monkeypatch):
    from xarray_vhdf5._backend import manifest as manifest_module

    path = tmp_path / "big.h5"
    data = big_dataset(path)
    manifest = resolved(path)
    assert data.nbytes >= manifest_module.SPLIT_BYTES
    calls = []
    kernel = manifest_module.preadtools.read_chunks_into

    def counted(*args):
        calls.append(len(args[3]))
        return kernel(*args)

    monkeypatch.setattr(manifest_module.preadtools, "read_chunks_into", counted)
    assert_same(manifest.read((), threads=threads), data)
    parts = min(os.cpu_count() or 1, 8) if threads is None else threads
    assert sum(calls) == 100 and len(calls) == (parts if parts > 1 else 1)
    calls.clear()
    assert_same(manifest.read((slice(5, 995), slice(7, 593)), threads=threads), data[5:995, 7:593])
    assert sum(calls) == 100
    calls.clear()
    assert_same(manifest.read((slice(0, 100), slice(0, 60)), threads=threads), data[:100, :60])  # small: one call
    assert calls == [1]


def test_a_truncated_file_names_the_chunk_when_the_read_is_split(tmp_path):
    path = tmp_path / "big.h5"
    big_dataset(path)
    manifest = resolved(path)
    last = int(np.argmax(manifest.offsets))
    os.truncate(path, int(manifest.offsets[last] + manifest.nbytes[last] // 2))
    where = np.unravel_index(int(np.flatnonzero(manifest.slots.reshape(-1) == last)[0]), manifest.slots.shape)
    with pytest.raises(CorruptFileError, match=r"file ends \d+ bytes into the chunk \(truncated\)") as err:
        manifest.read((), threads=4)
    assert f"chunk ({where[0]}, {where[1]})" in str(err.value)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 60), min_size=0, max_size=80),
    st.sampled_from([1, 3, 10]),
    st.integers(-(2**40), 2**40),
    st.booleans(),
    st.booleans(),
)
def test_unique_inverse_is_numpys(ks, step, low, spread, jitter):
    """The manifest's ranking of first rows, by counting or by sorting, is numpy.unique's."""
    from xarray_vhdf5._backend.manifest_resolve import _unique_inverse

    values = np.asarray(ks, np.int64) * (step * (10**9 if spread else 1)) + low
    if jitter:  # rows that are not the smallest plus a multiple of step
        values += np.asarray(ks, np.int64) % 2
    rows, inverse = _unique_inverse(values, step)
    want_rows, want_inverse = np.unique(values, return_inverse=True)
    assert rows.dtype == values.dtype and inverse.dtype == np.intp
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))
    np.testing.assert_array_equal(rows[inverse], values)
