"""modify_metadata: the same change by both libraries on twin files, bit for bit.

A history (1-d and 2-d numeric data with NaN, infinities, -0.0 and fill values,
compressed data, variable-length and fixed-length strings, a resize, a branch) is
written by either library; each change of chunks, dtype, fill value or filters is
made by xarray_vhdf5 on one copy and by versioned-hdf5 2.6.0 on the other, and every
version must read the same bits through both libraries, with the same dtype, fill
value, chunks and filters. Each result is then extended by the other library.
"""

from __future__ import annotations

import functools
import os
import shutil
import tracemalloc

import h5py
import numpy as np
import pytest
import versioned_hdf5

import xarray_vhdf5
from xarray_vhdf5 import IncompatibleDataError, ReadOnlyError
from xarray_vhdf5._versions import delete_versions, metadata, modify_metadata, scratch
from xarray_vhdf5.errors import DatasetNotFoundError

LIBS = {"ours": xarray_vhdf5, "ref": versioned_hdf5}
STR = h5py.string_dtype()
FIRST = "__first_version__"
X = np.array([1.7, -2.5, np.nan, np.inf, -np.inf, 1e20, 0.0, -0.0, 300.0, 5, 0, 0, 0, 0, 0, 0, 6, 7], dtype="f8")


def v1(g):
    g.create_dataset("x", data=X, chunks=(4,), compression="gzip", compression_opts=3)
    m = (np.arange(11 * 7) % 4).astype("f8").reshape(11, 7)
    g.create_dataset("grp/m", data=m, chunks=(3, 4), fillvalue=3.0)
    g.create_dataset("n", data=np.arange(20) % 3, chunks=(6,), fillvalue=1)
    g.create_dataset("s", data=np.array(["a", "bbb", "", "", "é"] * 3, dtype=object), dtype=STR, chunks=(4,))
    g.create_dataset("b", data=np.array([b"a", b"bb", b"", b""] * 3), chunks=(4,))
    g.create_dataset("z", data=np.arange(6) * (1 + 1j), chunks=(4,))
    g["grp/m"].attrs["units"] = "K"


def v2(g):
    g["x"][0] = -0.0
    g["grp/m"][0:3, 0:4] = 3.0
    g["n"][5] = 9
    g["s"][1] = "changed"
    g["b"][0] = b"zz"


def v3(g):
    g["x"].resize((23,))
    g["x"][20] = np.nan
    g["grp/m"].resize((13, 9))
    g["grp/m"][12, 8] = -1.0


def b4(g):
    g["x"][5:9] = 0.0
    g["grp/m"][:, 6] = 0.0


HISTORY = [("v1", None, True, v1), ("v2", None, True, v2), ("v3", None, True, v3), ("b4", "v1", False, b4)]


def play(lib: str, path, steps):
    with h5py.File(path, "a") as f:
        vf = LIBS[lib].VersionedHDF5File(f)
        for name, prev, make_current, edit in steps:
            with vf.stage_version(name, prev_version=prev, make_current=make_current) as g:
                edit(g)
        if lib == "ref":
            vf.close()


def as_bytes(arr):
    arr = np.asarray(arr)
    if arr.dtype.kind == "O":
        return [v.encode() if isinstance(v, str) else bytes(v) for v in arr.ravel()]
    return (arr.dtype.str, arr.shape, arr.tobytes())


def snapshot(path, lib: str | None = None) -> dict:
    """Every dataset of every version (bytes, dtype, shape), read through ``lib`` or h5py."""
    out = {}
    with h5py.File(path, "r+" if lib == "ref" else "r") as f:
        versions = f["_version_data/versions"]
        vf = LIBS[lib].VersionedHDF5File(f) if lib else None
        for v in versions:
            if v == FIRST:
                continue
            names = []
            versions[v].visititems(lambda n, o, names=names: names.append(n) if isinstance(o, h5py.Dataset) else None)
            group = vf[v] if vf else versions[v]
            for n in names:
                out[v, n] = as_bytes(group[n][()])
            out[v, "prev"] = versions[v].attrs["prev_version"]
        if lib == "ref":
            vf.close()
    return out


def metadata_of(path, name) -> dict:
    """raw_data's dtype, fill value, chunks and filters, and what each version's dataset says."""
    with h5py.File(path, "r") as f:
        raw = f[f"_version_data/{name}/raw_data"]
        fill = raw.fillvalue
        meta = {
            "dtype": raw.dtype.str if raw.dtype.kind != "O" else "vlen",
            "fill": None if fill is None else np.asarray(fill).tobytes(),
            "chunks": tuple(int(c) for c in raw.attrs["chunks"]),
            "hdf5 chunks": raw.chunks,
            "filters": (raw.compression, raw.compression_opts, raw.shuffle, raw.fletcher32, raw.scaleoffset),
        }
        for v in f["_version_data/versions"]:
            ds = f["_version_data/versions"][v].get(name)
            if ds is not None:
                vfill = None if ds.fillvalue is None or raw.dtype.kind == "O" else np.asarray(ds.fillvalue).tobytes()
                meta[v] = (
                    ds.dtype.str if ds.dtype.kind != "O" else "vlen",
                    vfill,
                    tuple(int(c) for c in ds.attrs["chunks"]),
                    ds.attrs["raw_data"],
                    dict(ds.attrs).get("units"),
                )
        assert not any(k.startswith("__vhdf5") for k in f[f"_version_data/{name}"])
        assert "__vhdf5_scratch__" not in f["_version_data"]
    return meta


@functools.cache
def _snapshot_of_history(path: str) -> dict:
    """:func:`snapshot` of a module-scoped history file (never written), read once."""
    return snapshot(path)


@pytest.fixture(scope="module", params=["ours", "ref"])
def history(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("modify") / f"written_by_{request.param}.h5"
    play(request.param, path, HISTORY)
    return path


CASES = [
    ("x", dict(dtype="i4")),
    ("x", dict(dtype="u1")),
    ("x", dict(fillvalue=7.0)),
    ("x", dict(chunks=(3,))),
    ("x", dict(compression=None)),
    ("x", dict(compression="gzip", compression_opts=9, shuffle=True, fletcher32=True)),
    ("x", dict(dtype="f4", fillvalue=1.5, chunks=(7,))),  # an int: IncompatibleDataError (test_peer_parity)
    ("grp/m", dict(chunks=(2, 5))),
    ("grp/m", dict(fillvalue=0.0, dtype="f4", chunks=(4, 4))),
    ("grp/m", dict(fillvalue=np.nan)),
    ("grp/m", dict(dtype="i2", compression="lzf")),
    ("n", dict(scaleoffset=0, fillvalue=0)),
    ("n", dict(dtype="f8", fillvalue=2.5)),
    ("s", dict(chunks=(3,))),
    ("s", dict(dtype="S2")),
    ("b", dict(dtype=STR)),
    ("b", dict(fillvalue=b"zz", chunks=(5,))),
]


#: CASES also run on versioned-hdf5's history in the suite (dtype, chunks, filters, a NaN fill
#: value, fixed- and variable-length strings); the others there in the slow run, so the suite
#: stays under 5 minutes on 2 cores.
_REF_IN_SUITE = {0, 3, 5, 9, 13, 15}


def _modify_params() -> list:
    return [
        pytest.param(
            writer,
            name,
            kwargs,
            marks=[pytest.mark.slow] if writer == "ref" and i not in _REF_IN_SUITE else [],
            id=f"{writer}-{name}-{'-'.join(kwargs)}",
        )
        for writer in ("ours", "ref")
        for i, (name, kwargs) in enumerate(CASES)
    ]


@pytest.mark.parametrize("history, name, kwargs", _modify_params(), indirect=["history"])
def test_modify_like_versioned_hdf5(history, tmp_path, name, kwargs):
    ours, ref = tmp_path / "ours.h5", tmp_path / "ref.h5"
    shutil.copy(history, ours)
    shutil.copy(history, ref)
    before = _snapshot_of_history(str(history))  # ours is a copy of it
    with h5py.File(ours, "r+") as f:
        report = modify_metadata(f, name, **kwargs)
    with h5py.File(ref, "r+") as f:
        versioned_hdf5.modify_metadata(f, name, **kwargs)
    assert sorted(report.versions) == sorted(v for (v, n) in before if n == name)
    expected = snapshot(ref)
    assert snapshot(ours, "ours") == expected
    assert snapshot(ours, "ref") == expected
    assert {k: v for k, v in before.items() if k[1] != name} == {k: v for k, v in expected.items() if k[1] != name}
    meta = metadata_of(ours, name)
    assert meta == metadata_of(ref, name)
    # each library versions the other's result further
    for path, lib in ((ours, "ref"), (ref, "ours")):
        play(lib, path, [("next", None, True, extend(name))])
    assert snapshot(ours, "ref") == snapshot(ref, "ours")


def extend(name):
    def edit(g):
        ds = g[name]
        ds[0] = ds[1]
        ds[-1] = ds[0]

    return edit


def test_errors_change_nothing(history, tmp_path):
    path = tmp_path / "err.h5"
    shutil.copy(history, path)
    before = snapshot(path), {n: metadata_of(path, n) for n in ("x", "grp/m", "s", "z")}
    with h5py.File(path, "r+") as f:
        with pytest.raises(DatasetNotFoundError, match=r"no versioned dataset 'nope'.*'grp/m'") as info:
            modify_metadata(f, "nope", chunks=(3,))
        assert isinstance(info.value, KeyError)
        with pytest.raises(DatasetNotFoundError):
            modify_metadata(f, "grp", chunks=(3,))
        for name, kwargs in [
            ("x", dict(dtype="S3")),
            ("x", dict(dtype=bool)),
            ("z", dict(dtype="f8")),
            ("x", dict(dtype="c16")),
            ("s", dict(dtype="i4")),
            ("x", dict(dtype="U3")),
            ("x", dict(dtype=STR)),
            ("x", dict(dtype="M8[s]")),
            ("grp/m", dict(chunks=(3,))),
            ("grp/m", dict(chunks=(0, 2))),
            ("s", dict(fillvalue="x")),
            ("x", dict(chunks=False)),
        ]:
            with pytest.raises(IncompatibleDataError):
                modify_metadata(f, name, **kwargs)
    with h5py.File(path, "r") as f, pytest.raises(ReadOnlyError):
        modify_metadata(f, "x", chunks=(3,))
    assert (snapshot(path), {n: metadata_of(path, n) for n in ("x", "grp/m", "s", "z")}) == before


def test_no_change_writes_nothing(history, tmp_path):
    path = tmp_path / "same.h5"
    shutil.copy(history, path)

    def addresses(f):  # object header addresses of raw_data and every version's dataset
        names = ["_version_data/x/raw_data"] + [f"_version_data/versions/{v}/x" for v in ("v1", "v2", "v3", "b4")]
        return [h5py.h5o.get_info(f[n].id).addr for n in names]

    with h5py.File(path, "r+") as f:
        chunks = tuple(f["_version_data/x/raw_data"].attrs["chunks"])
        before = addresses(f)
        vf = xarray_vhdf5.VersionedHDF5File(f)
        report = modify_metadata(vf, "x", chunks=chunks, compression="gzip", fillvalue=0.0)
        assert addresses(f) == before
    assert report.versions == [] and report.chunks_before == report.chunks_after
    assert snapshot(path) == snapshot(history)


def test_each_stored_chunk_is_read_once(tmp_path):
    """With unchanged chunks, a chunk shared by many versions is read, cast and hashed once."""
    path = tmp_path / "memo.h5"
    steps = [("v0", None, True, lambda g: g.create_dataset("x", data=np.arange(4000.0), chunks=(100,)))]
    steps += [(f"v{i}", None, True, lambda g, i=i: g["x"].__setitem__(i * 100, -1.0)) for i in range(1, 30)]
    play("ours", path, steps)
    with h5py.File(path, "r+") as f:
        stored = int(f["_version_data/x/hash_table"].attrs["largest_index"])
        report = modify_metadata(f, "x", dtype="f4")
    assert report.chunks_read == stored == 40 + 29
    assert report.chunks_after == stored


def test_memory_is_bounded_by_the_batch(tmp_path, monkeypatch):
    path = tmp_path / "mem.h5"
    rng = np.random.default_rng(0)
    steps = [
        (
            f"v{i}",
            None,
            True,
            lambda g, i=i: (
                g.create_dataset("x", data=rng.random((512, 512)), chunks=(32, 32))
                if i == 0
                else g["x"].__setitem__(slice(None), rng.random((512, 512)))
            ),
        )
        for i in range(4)
    ]
    play("ours", path, steps)  # 8 MiB of chunks
    monkeypatch.setattr(metadata, "BATCH_BYTES", 128 * 1024)
    with h5py.File(path, "r+") as f:
        tracemalloc.start()
        modify_metadata(f, "x", dtype="f4", chunks=(64, 16))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert f["_version_data/versions/v3/x"].dtype == np.float32
    assert peak < 1024 * 1024


def test_link_creation_order_is_kept(tmp_path):
    path = tmp_path / "order.h5"

    def first(g):
        for n in ("t", "a", "m"):
            g.create_dataset(n, data=np.arange(10.0), chunks=(4,))

    play("ours", path, [("v0", None, True, first)])
    with h5py.File(path, "r+") as f:
        modify_metadata(f, "a", chunks=(3,))
        assert list(f["_version_data/versions/v0"]) == ["t", "a", "m"]


# -- crashes -----------------------------------------------------------------------------------


STAGES = ["written", "switched", "linked", "rebuilt", "relinked", "done"]


def crash_child(path, name, kwargs, stage=None, half_swap=False) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            if stage:
                scratch._barrier_hook = lambda s: os._exit(3) if s == stage else None
            if half_swap:

                def die(self, parent, new, relink):
                    self.f.move(f"{parent}/{next(iter(new))}", f"{self.path}/dead")
                    self.f.file.flush()
                    os._exit(3)

                scratch.Scratch.replace_members = die
            with h5py.File(path, "r+") as f:
                modify_metadata(f, name, **kwargs)
        finally:
            os._exit(0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("crash", [*STAGES, "half-swap"])
def test_crash_leaves_a_readable_file(tmp_path, crash):
    """Killed after any flush, every version reads; running the same call again finishes."""
    path, ref = tmp_path / "crash.h5", tmp_path / "ref.h5"
    play("ours", path, HISTORY)
    shutil.copy(path, ref)
    kwargs = dict(chunks=(2, 5), fillvalue=0.0, compression="gzip")
    with h5py.File(ref, "r+") as f:
        versioned_hdf5.modify_metadata(f, "grp/m", **kwargs)
    old, new = snapshot(path), snapshot(ref)
    half = crash == "half-swap"
    assert crash_child(path, "grp/m", kwargs, None if half else crash, half) == 3
    if not half:
        state = snapshot(path)  # each version reads its old or its new data
        assert all(state[k] in (old[k], new[k]) for k in old) and state.keys() == old.keys()
        if crash in ("switched", "linked", "rebuilt"):
            with h5py.File(path, "r+") as f, pytest.raises(ValueError, match="modify_metadata"):
                delete_versions(f, ["b4"])
    with h5py.File(path, "r+") as f:
        modify_metadata(f, "grp/m", **kwargs)
    assert snapshot(path) == new
    assert metadata_of(path, "grp/m") == metadata_of(ref, "grp/m")
    play("ref", path, [("next", None, True, extend("grp/m"))])
    play("ref", ref, [("next", None, True, extend("grp/m"))])
    assert snapshot(path, "ours") == snapshot(ref)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_interrupted_run_is_finished_without_arguments(tmp_path):
    path = tmp_path / "finish.h5"
    play("ours", path, HISTORY)
    expected_path = tmp_path / "expected.h5"
    shutil.copy(path, expected_path)
    with h5py.File(expected_path, "r+") as f:
        modify_metadata(f, "x", dtype="f4", fillvalue=-1.0)
    assert crash_child(path, "x", dict(dtype="f4", fillvalue=-1.0), "switched") == 3
    with h5py.File(path, "r+") as f:
        modify_metadata(f, "x")
    assert snapshot(path) == snapshot(expected_path)
    assert metadata_of(path, "x") == metadata_of(expected_path, "x")
    assert metadata_of(path, "x")["fill"] == np.float32(-1).tobytes()
