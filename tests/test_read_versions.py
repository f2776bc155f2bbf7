"""``SharedVersionedFile.read_versions``: one selection from many versions, through one handle.

Checked against reading each version on its own (``reader[v][path][key]``)
and against numpy models, for datasets with stored chunk maps (at least 64
chunks) and without (fewer chunks, or versions committed by versioned-hdf5),
for datasets that grow between versions, strings, and every error it names.
"""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
import versioned_hdf5

import xarray_vhdf5 as xv
from xarray_vhdf5._versions import bookkeeping, reader_history, smallmaps
from xarray_vhdf5.errors import VersionNotFoundError

STR = h5py.string_dtype()


def big(k: int) -> np.ndarray:
    """Version k's ``big``: 1000 float64 in chunks of 10 (100 chunks: a stored map)."""
    x = np.arange(1000.0)
    x[(37 * k) % 1000] = -k
    x[k] = 1000 + k
    return x


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """v0..v11 by this package; ``small`` (5 chunks, no map) grows by 3 points a version; ``s`` strings."""
    path = tmp_path_factory.mktemp("rv") / "h.h5"
    model = {}
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        for k in range(12):
            small = np.arange(20 + 3 * k, dtype="i4") * (k + 1)
            s = np.array([f"s{i}-{k % 3}" for i in range(6)], dtype=object)
            with vf.stage_version(f"v{k}") as g:
                if k == 0:
                    g.create_dataset("big", data=big(k), chunks=(10,), maxshape=(None,))
                    g.create_dataset("grp/small", data=small, chunks=(5,), maxshape=(None,))
                    g.create_dataset("s", data=s, dtype=STR, chunks=(4,))
                else:
                    g["big"][...] = big(k)
                    g["grp/small"].resize((small.size,))
                    g["grp/small"][...] = small
                    g["s"][...] = s
            model[f"v{k}"] = {"big": big(k), "grp/small": small, "s": s}
    return str(path), model


def one_by_one(reader, path, key, versions):
    return np.stack([np.asarray(reader[v][path][key]) for v in versions])


@pytest.mark.parametrize(
    "path, key",
    [
        ("big", 500),
        ("big", (slice(100, 250),)),
        ("big", (np.array([0, 3, 7, 999]),)),
        ("big", (np.arange(1000) % 3 == 0,)),
        ("big", (Ellipsis,)),
        ("big", (slice(None, None, 7),)),
        ("big", ()),
        ("grp/small", 19),
        ("grp/small", (slice(2, 20, 3),)),
    ],
)
def test_equals_reading_each_version(history, path, key):
    file, model = history
    with xv.VersionedHDF5File.open(file) as reader:
        versions = reader.versions
        got = reader.read_versions(path, key)
        want = one_by_one(reader, path, key, versions)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.stack([model[v][path][key] for v in versions]))
    assert got.dtype == want.dtype


def test_strings_are_read_as_h5py_reads_them(history):
    file, _ = history
    with xv.VersionedHDF5File.open(file) as reader:
        got = reader.read_versions("s", (slice(1, 4),))
        assert got.shape == (12, 3)
        assert got[4].tolist() == [b"s1-1", b"s2-1", b"s3-1"]
        np.testing.assert_array_equal(got, one_by_one(reader, "s", (slice(1, 4),), reader.versions))


def test_chosen_versions_in_the_order_given_by_any_key(history):
    file, model = history
    with xv.VersionedHDF5File.open(file) as reader:
        got = reader.read_versions("big", 500, versions=["v7", -1, "v2", None])
    want = [model[v]["big"][500] for v in ("v7", "v10", "v2", "v11")]
    assert got.tolist() == want


def test_many_batches_read_the_same(history, monkeypatch):
    file, _ = history
    with xv.VersionedHDF5File.open(file) as reader:
        whole = reader.read_versions("big", (slice(0, 40),))
        monkeypatch.setattr(reader_history, "HOLD", 0.0)  # one version per hold of the lock
        np.testing.assert_array_equal(reader.read_versions("big", (slice(0, 40),)), whole)


def test_raw_datas_manifest_is_made_once_while_the_file_is_unchanged(history, monkeypatch):
    """Batch after batch (one version each), raw_data's manifest is made once; when the file's write
    counter moves between batches (a writer committed), it is made again."""
    file, model = history
    made = []
    whole = reader_history._whole
    monkeypatch.setattr(reader_history, "_whole", lambda *a: made.append(1) or whole(*a))
    monkeypatch.setattr(reader_history, "HOLD", 0.0)
    with xv.VersionedHDF5File.open(file) as reader:
        want = [model[v]["grp/small"][3] for v in reader.versions]
        assert reader.read_versions("grp/small", 3).tolist() == want
        assert len(made) == 1
        tokens = iter(range(1000))
        monkeypatch.setattr(reader, "_token", lambda: ("writes", next(tokens) // 4))  # moves every 4 calls
        assert reader.read_versions("grp/small", 3).tolist() == want
        assert len(made) > 2


def test_stored_maps_are_used(history, monkeypatch):
    """Versions of ``big`` are read from their map log, ``small``'s (5 chunks, no map of its own) from the
    file's map log of small datasets: no mapping decoded. Without that log, ``small``'s mappings are
    decoded onto raw_data's one manifest: no manifest of their own."""
    file, _ = history
    copy = str(file) + ".nolog.h5"
    shutil.copyfile(file, copy)
    with h5py.File(copy, "r+") as f:
        del bookkeeping.open_group(f)[smallmaps.LOG]
    decoded, resolved = [], []
    decode, resolve = reader_history._decoded, reader_history.resolve_manifest
    monkeypatch.setattr(reader_history, "_decoded", lambda vds, *a: decoded.append(vds.name) or decode(vds, *a))
    monkeypatch.setattr(
        reader_history, "resolve_manifest", lambda vds, **kw: resolved.append(vds.name) or resolve(vds, **kw)
    )
    with xv.VersionedHDF5File.open(file) as reader:
        reader.read_versions("big", 1)
        assert decoded == resolved == []
        reader.read_versions("grp/small", 1)
        assert decoded == resolved == []
    with xv.VersionedHDF5File.open(copy) as reader:
        reader.read_versions("grp/small", 1)
        assert len(decoded) == 12 and resolved == []


def test_errors_name_the_version(history):
    file, _ = history
    with xv.VersionedHDF5File.open(file) as reader:
        with pytest.raises(IndexError, match="version 'v0'"):
            reader.read_versions("grp/small", 40)  # v0 has 20 points, v11 53
        with pytest.raises(ValueError, match="different shapes"):
            reader.read_versions("grp/small", ())
        with pytest.raises(KeyError, match="no dataset 'nope' in version 'v0'"):
            reader.read_versions("nope", 0)
        with pytest.raises(VersionNotFoundError):
            reader.read_versions("big", 0, versions=["v1", "v99"])
        with pytest.raises(ValueError, match="no versions"):
            reader.read_versions("big", 0, versions=[])
        with pytest.raises(TypeError, match="version 'v0': Indexing elements must be in increasing order"):
            reader.read_versions("big", (np.array([5, 1]),))  # h5py's rule, as reader[v]["big"][...] has
        with pytest.raises(TypeError, match="None"):
            reader.read_versions("big", (None,))


def commit_big(path, versions: dict[str, int], mode: str = "a", vf_class=xv.VersionedHDF5File) -> None:
    """Commit ``name: k`` of ``versions`` in order, each holding ``big(k)`` (the first creates it if new)."""
    with h5py.File(path, mode) as f:
        vf = vf_class(f)
        for name, k in versions.items():
            with vf.stage_version(name) as g:
                if "big" in g:
                    g["big"][...] = big(k)
                else:
                    g.create_dataset("big", data=big(k), chunks=(10,))


def test_versions_committed_by_versioned_hdf5_and_after_a_deletion(tmp_path):
    path = tmp_path / "mixed.h5"
    commit_big(path, {"a0": 0, "a1": 1}, "w")
    commit_big(path, {"b2": 2}, vf_class=versioned_hdf5.VersionedHDF5File)  # it stores no chunk map
    commit_big(path, {"a3": 3, "a4": 4})
    expect = {"a0": 0, "a1": 1, "b2": 2, "a3": 3, "a4": 4}
    key = (np.array([0, 1, 2, 3, 4, 37, 74, 111, 148]),)
    with xv.VersionedHDF5File.open(path) as reader:
        got = reader.read_versions("big", key)
    np.testing.assert_array_equal(got, np.stack([big(k)[key] for k in expect.values()]))
    with h5py.File(path, "r+") as f:
        xv.delete_versions(f, ["a1"])  # raw_data compacted: every stored map dropped
    with xv.VersionedHDF5File.open(path) as reader:
        got = reader.read_versions("big", key)
    np.testing.assert_array_equal(got, np.stack([big(k)[key] for v, k in expect.items() if v != "a1"]))


def test_verified_reads_with_rows_a_crashed_commit_left_past_the_hash_table(tmp_path):
    """raw_data longer than its hash table's ``largest_index`` (a commit killed after growing it)."""
    path = tmp_path / "long.h5"
    commit_big(path, {f"v{k}": k for k in range(4)}, "w")
    with h5py.File(path, "r+") as f:
        raw = f["_version_data/big/raw_data"]
        raw.resize((raw.shape[0] + 20,))
        raw[-20:] = 7.0  # chunks no hash-table row names
    with xv.VersionedHDF5File.open(path, verify=True) as reader:
        got = reader.read_versions("big", (np.array([0, 1, 2, 3, 37, 74, 111]),))
    np.testing.assert_array_equal(got, np.stack([big(k)[[0, 1, 2, 3, 37, 74, 111]] for k in range(4)]))
