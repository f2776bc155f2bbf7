"""Parity with versioned-hdf5 2.6.0: deleting versions and modify_metadata give the same file.

Scenarios are played by both libraries (``xarray_vhdf5.testing.snapshot.play``)
and the files compared as in ``test_parity.py``: stored chunks by digest, hash
tables, the version DAG after re-parenting, every version's virtual datasets.
"""

from __future__ import annotations

import datetime

import h5py
import numpy as np
import pytest

from xarray_vhdf5.testing.snapshot import assert_same, play

UTC = datetime.UTC


def ts(i: int) -> datetime.datetime:
    return datetime.datetime(2024, 1, 1, tzinfo=UTC) + datetime.timedelta(hours=i)


def history(vh, f):
    """v1 <- v2 <- v3 <- v4 (current) and a branch v2 <- b3; three datasets."""
    vf = vh.VersionedHDF5File(f)
    rng = np.random.default_rng(1)
    with vf.stage_version("v1", timestamp=ts(1)) as g:
        g.create_dataset("x", data=rng.random((12, 10)), chunks=(4, 4), fillvalue=-1.0)
        g.create_dataset("grp/i", data=np.arange(40, dtype="i4"), chunks=(6,))
        g.create_dataset(
            "s", data=np.array([b"a", b"bb", b"ccc"] * 3, dtype=object), dtype=h5py.string_dtype("ascii"), chunks=(4,)
        )
    with vf.stage_version("v2", timestamp=ts(2)) as g:
        g["x"][0:4, 0:4] = 2.0
        g["grp/i"][10:20] = -5
        g.create_dataset("only_v2", data=np.arange(7), chunks=(3,))
    with vf.stage_version("b3", make_current=False, timestamp=ts(3)) as g:
        g["x"][8:, 8:] = 7.0
    with vf.stage_version("v3", timestamp=ts(4)) as g:
        g["x"].resize((14, 10))
        g["x"][12:, :] = 1.5  # no all-fill edge chunk (see test_parity.py::test_all_fill_edge_chunk)
        g["grp/i"][0] = 1000
        g["s"][8] = b"dd"
        del g["only_v2"]
    with vf.stage_version("v4", timestamp=ts(5)) as g:
        g["x"][5, 5] = 3.0
    return vf


def read_all(vf) -> dict:
    out = {}
    for v in sorted(vf.versions):
        group = vf[v]
        out[v] = {}
        group.visititems(
            lambda name, obj, d=out[v]: d.__setitem__(name, np.asarray(obj[()])) if not hasattr(obj, "keys") else None
        )
    return out


def check(scenario, tmp_path):
    played = play(scenario, tmp_path, timestamps=True)
    (ref_result, ref_file), (our_result, our_file) = played["versioned_hdf5"], played["xarray_vhdf5"]
    assert_same(ref_result, our_result, "what the scenario read")
    assert_same(ref_file, our_file, "the files")
    return our_result, our_file


@pytest.mark.parametrize(
    "doomed",
    [["v2"], ["v1"], ["v4"], ["v3", "v4"], ["b3"], ["v1", "v2", "b3"], ["v2", "v3"]],
    ids=lambda d: "+".join(d),
)
def test_delete_versions(tmp_path, doomed):
    """Same survivors, parents, current version, stored chunks and reads."""

    def scenario(vh, f):
        vf = history(vh, f)
        before = read_all(vf)
        vh.delete_versions(f, doomed)
        vf = vh.VersionedHDF5File(f)  # versioned-hdf5 caches lookups in its object
        after = read_all(vf)
        assert set(after) == set(before) - set(doomed)
        for v in after:
            assert_same(before[v], after[v], f"version {v}")
        return {
            "after": after,
            "current": vf.current_version,
            "versions": sorted(vf.versions),
            "prev": [vf[i].name for i in range(0, -3, -1) if _has_ancestor(vf, i)],
        }

    scenario.__name__ = "delete_" + "_".join(doomed)
    _, our_file = check(scenario, tmp_path)
    # only_v2 lives in v2 and b3 (a branch of v2): with both gone, its raw_data goes too
    assert ("only_v2" in our_file["datasets"]) == (not {"v2", "b3"} <= set(doomed))


def _has_ancestor(vf, i: int) -> bool:
    try:
        vf[i]
    except (KeyError, IndexError):
        return False
    return True


def test_delete_then_commit_reuses_surviving_chunks(tmp_path):
    """After a deletion both libraries append new chunks after the surviving ones and
    dedupe against them, in the same way."""

    def delete_then_commit(vh, f):
        vf = history(vh, f)
        vh.delete_versions(f, ["v2", "b3"])
        vf = vh.VersionedHDF5File(f)
        with vf.stage_version("v5", timestamp=ts(6)) as g:
            g["x"][0:4, 0:4] = 2.0  # v2's chunk, deleted: stored again
            g["grp/i"][0] = 0  # v1's chunk, alive: reused
            g["x"][12:, :] = 9.0
        return read_all(vf)

    check(delete_then_commit, tmp_path)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("x", {"chunks": (5, 3)}),
        ("x", {"compression": "gzip", "compression_opts": 4}),
        ("x", {"dtype": "f4"}),
        ("x", {"fillvalue": 0.5}),
        ("grp/i", {"dtype": "i8", "fillvalue": 3, "chunks": (9,)}),
        ("grp/i", {"compression": "lzf", "shuffle": True}),
        ("s", {"chunks": (2,)}),
    ],
    ids=["chunks", "gzip", "dtype", "fillvalue", "all-three", "lzf-shuffle", "vlen-chunks"],
)
def test_modify_metadata(tmp_path, name, kwargs):
    """Same datasets in every version after modify_metadata, then after one more commit."""

    def scenario(vh, f):
        vf = history(vh, f)
        before = read_all(vf)
        vh.modify_metadata(f, name, **kwargs)
        vf = vh.VersionedHDF5File(f)
        after = read_all(vf)
        ds = vf["v4"][name]
        meta = {
            "dtype": ds.dtype,
            "chunks": tuple(int(c) for c in ds.attrs["chunks"]),
            "compression": f[f"_version_data/{name}/raw_data"].compression,
        }
        with vf.stage_version("v5", timestamp=ts(6)) as g:
            g[name].resize((g[name].shape[0] + 3, *g[name].shape[1:]))  # new points: fill value
            g[name][-1] = g[name][0]  # no chunk of only new points (see test_vlen_empty_chunks)
        meta["staged_fill"] = vf["v5"][name][-2]
        return {"before": before, "after": after, "meta": meta}

    scenario.__name__ = "modify_" + name.replace("/", "_")
    result, _ = check(scenario, tmp_path)
    if "dtype" not in kwargs and "fillvalue" not in kwargs:
        assert_same(result["before"], result["after"], "points")


def test_del_item(tmp_path):
    """``del vf[name]``: versioned-hdf5 2.6 only unlinks the version group (its children
    keep a dangling prev_version and raw_data keeps the chunks); xarray_vhdf5 does what
    ``delete_versions`` does (_versions/file.py, ``__delitem__``). The survivors read the
    same in both; the current version moves to the deleted one's parent in both."""
    results = {}
    for vh_name, (result, snap) in play(_del_v4_and_v2, tmp_path, timestamps=True).items():
        results[vh_name] = (result, snap)
    (ref, ref_file), (got, our_file) = results["versioned_hdf5"], results["xarray_vhdf5"]
    assert_same(ref["reads"], got["reads"], "reads")
    assert ref["current"] == got["current"] == "v3"
    assert ref_file["versions"]["v3"]["attrs"]["prev_version"] == "v2"  # dangling
    assert our_file["versions"]["v3"]["attrs"]["prev_version"] == "v1"  # re-parented
    assert len(our_file["datasets"]["x"]["stored"]) < len(ref_file["datasets"]["x"]["stored"])


def _del_v4_and_v2(vh, f):
    vf = history(vh, f)
    del vf["v4"]
    del vf["v2"]
    vf = vh.VersionedHDF5File(f)
    return {"reads": read_all(vf), "current": vf.current_version}


def _vlen_empty_chunks(vh, f):
    vf = vh.VersionedHDF5File(f)
    with vf.stage_version("v1", timestamp=ts(1)) as g:
        g.create_dataset(
            "s",
            data=np.array([b"a", b"", b"", b"", b"", b"x"], dtype=object),
            dtype=h5py.string_dtype("ascii"),
            chunks=(2,),
        )
    with vf.stage_version("v2", timestamp=ts(2)) as g:
        g["s"].resize((10,))  # two more chunks of b""
    return read_all(vf)


def test_vlen_empty_chunks(tmp_path):
    """A whole chunk of empty vlen strings is not stored by either library (b"" is the
    fill value of versioned-hdf5 2.6's vlen raw_data; _backend/raw_data.py ``is_fill_chunk``);
    both read it back as empty strings and store the same chunks."""
    played = play(_vlen_empty_chunks, tmp_path, timestamps=True)
    (ref, ref_file), (got, our_file) = played["versioned_hdf5"], played["xarray_vhdf5"]
    assert_same(ref, got, "reads")
    assert ref_file["versions"]["v2"]["tree"]["s"]["chunk_map"].keys() == {0, 2}
    assert our_file["versions"]["v2"]["tree"]["s"]["chunk_map"].keys() == {0, 2}
    assert len(our_file["datasets"]["s"]["stored"]) == len(ref_file["datasets"]["s"]["stored"])
