"""``VersionedHDF5File.open(path)``: the h5py-level reader that other processes' writes never break.

Parity: everything a reader returns (versions, groups, attributes, dataset
metadata, points under h5py's indexing rules and errors) equals what
``VersionedHDF5File(h5py.File(path, "r"))`` returns, for files written by this
package and by versioned-hdf5 2.6. Sharing: a reader kept open while another
process commits, deletes versions (chunks move) or runs ``modify_metadata``;
a writer with a short lock timeout is never refused because of it.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import threading
import time
import warnings

import h5py
import numpy as np
import pytest
import versioned_hdf5
import xarray as xr

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions.locking import file_locks
from xarray_vhdf5._versions.reader import SharedVersionDataset, SharedVersionedFile, SharedVersionGroup
from xarray_vhdf5._versions.sharing import SharedFile
from xarray_vhdf5.errors import (
    ClosedFileError,
    CorruptFileError,
    FileBusyError,
    NotVersionedError,
    ReadOnlyError,
    VersionNotFoundError,
)

STR = h5py.string_dtype()

# name -> create_dataset keywords; one of each dtype and filter the format stores
SPECS = {
    "f8": dict(data=np.linspace(0, 1, 50), chunks=(7,)),
    "i4_2d": dict(data=np.arange(120, dtype="i4").reshape(12, 10), chunks=(5, 4), fillvalue=-1),
    "u1_gzip": dict(
        data=(np.arange(300) % 256).astype("u1"), chunks=(64,), compression="gzip", compression_opts=4, shuffle=True
    ),
    "grp/f4_lzf": dict(
        data=np.arange(90, dtype="f4").reshape(9, 10), chunks=(4, 10), compression="lzf", fletcher32=True
    ),
    "grp/cmpd": dict(data=np.array([(i, i * 0.5) for i in range(20)], dtype=[("a", "i4"), ("b", "f8")]), chunks=(6,)),
    "grp/sub/S5": dict(data=np.array([b"ab", b"cde", b"", b"xyzzy"] * 3, dtype="S5"), chunks=(5,)),
    "flags": dict(data=np.arange(30) % 3 == 0, chunks=(8,)),
    "big_endian": dict(data=np.arange(25, dtype=">i4"), chunks=(10,)),
    "scaleoffset": dict(data=np.arange(40, dtype="i4"), chunks=(16,), scaleoffset=0),
    "vlen": dict(data=np.array(["α", "bb", "", "dddd"] * 4, dtype=object), dtype=STR, chunks=(3,)),
    "nan": dict(data=np.array([np.nan, 1.0, -0.0, np.inf] * 5), chunks=(6,), fillvalue=np.nan),
    "empty": dict(data=np.zeros((0, 3)), chunks=(4, 3)),
}


def _write(lib: str, path: str) -> None:
    """Three versions of SPECS (edits, a resize onto unmapped chunks, a deletion), by ``lib``."""
    cls = VersionedHDF5File if lib == "xarray_vhdf5" else versioned_hdf5.VersionedHDF5File
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # versioned-hdf5's own warnings
        with h5py.File(path, "w") as f:
            vf = cls(f)
            with vf.stage_version("v1") as g:
                for name, kw in SPECS.items():
                    g.create_dataset(name, **kw)
                g["f8"].attrs["units"] = "m"
                g["f8"].attrs["scale"] = np.float32(0.5)
                g["i4_2d"].attrs["shape_hint"] = np.array([3, 4])
                g["grp"].attrs["title"] = "a group"
                g.attrs["source"] = "test"
            with vf.stage_version("v2") as g:
                g["f8"][3:9] = -1.0
                g["i4_2d"].resize((15, 10))  # new rows: unmapped chunks, read as the fill value
                g["i4_2d"][13, 2] = 77
                g["grp/cmpd"][4:5] = np.array([(-4, -2.0)], dtype=SPECS["grp/cmpd"]["data"].dtype)
                g["vlen"][5] = "changed"
            with vf.stage_version("v3") as g:
                del g["flags"]
                g.create_group("added").create_dataset("z", data=np.arange(5.0), chunks=(2,))


def _value(x):
    """``x`` as a comparable, exact record: its type, dtype, shape and bytes (or repr for objects)."""
    if isinstance(x, (bytes, str, int, float, type(None))):
        return (type(x).__name__, repr(x))
    arr = np.asarray(x)
    body = repr(arr.tolist()) if arr.dtype.hasobject else arr.tobytes()
    return (type(x).__name__, arr.dtype.str, arr.dtype.descr, arr.shape, body)


def _keys(shape: tuple, dtype: np.dtype) -> list:
    """Selections to compare: valid ones of every kind h5py takes, and invalid ones (errors compared)."""
    n = shape[0]
    keys = [
        (),
        Ellipsis,
        (Ellipsis,),
        slice(None),
        slice(0, 0),
        [],
        slice(-100, 3),
        slice(1, None, 3),
        slice(None, None, -1),
        slice(None, None, 0),
        None,
        1.5,
        (slice(None),) * (len(shape) + 1),
        (Ellipsis, Ellipsis),
    ]
    if n:
        keys += [
            0,
            -1,
            n - 1,
            n,
            -n - 1,
            np.int64(n // 2),
            [0],
            [-1],
            [n - 1],
            [n],
            slice(n // 2, n),
            np.arange(n) % 2 == 0,
            np.arange(n + 1) % 2 == 0,
        ]
    if n > 2:
        keys += [[0, n - 1], np.array([1, 2]), [1, 0], [1, 1], np.array([-1, 0])]
    if len(shape) == 2 and n > 2 and shape[1] > 3:
        keys += [
            (0, 1),
            (-1, -1),
            (slice(None), 2),
            (slice(1, None, 2), [0, 2]),
            (Ellipsis, 1),
            (1, Ellipsis),
            (slice(None), slice(3, 1)),
            ([0, n - 1], [0, 1]),
            (slice(2, 3), [3]),
            np.arange(np.prod(shape)).reshape(shape) % 3 == 0,
            np.array([[0, 1]]),
        ]
    if dtype.names:
        keys += [
            dtype.names[0],
            (dtype.names[1], slice(1, 4)),
            (dtype.names[0], dtype.names[1], 2),
            (dtype.names[0], 2),
            (slice(2, 4), dtype.names[1]),
            "nope",
        ]
    return keys


def _read(ds, key):
    try:
        return _value(ds[key])
    except Exception as exc:  # noqa: BLE001 the error h5py raises is part of the parity
        return ("raises", type(exc).__name__)


def _attrs(attrs) -> list:
    return [(k, _value(attrs[k])) for k in attrs]


def _report(obj, out: dict, where: str) -> None:
    """Everything the read API answers about a group or dataset, flattened into ``out``."""
    out[where, "name"] = obj.name
    out[where, "attrs"] = _attrs(obj.attrs)
    out[where, "parent"] = obj.parent.name
    if hasattr(obj, "keys"):
        out[where, "keys"] = list(obj.keys())
        out[where, "len"] = len(obj)
        found = []
        obj.visit(found.append)
        out[where, "visit"] = found
        out[where, "datasets"] = sorted(obj.datasets())
        out[where, "items"] = [(k, v.name) for k, v in obj.items()]
        for key in obj.keys():
            _report(obj[key], out, f"{where}/{key}")
        return
    for name in (
        "shape",
        "dtype",
        "ndim",
        "size",
        "chunks",
        "compression",
        "compression_opts",
        "shuffle",
        "fletcher32",
        "scaleoffset",
        "maxshape",
        "nbytes",
    ):
        out[where, name] = getattr(obj, name)
    out[where, "fillvalue"] = _value(obj.fillvalue)
    out[where, "len"] = (len(obj), obj.len())
    out[where, "iter_chunks"] = list(obj.iter_chunks())
    out[where, "array"] = _value(np.asarray(obj))
    out[where, "rows"] = [_value(row) for row in obj]
    if h5py.check_string_dtype(obj.dtype) is not None:
        out[where, "asstr"] = _value(obj.asstr()[()])
    for key in _keys(obj.shape, obj.dtype):
        out[where, "read", repr(key)] = _read(obj, key)


def _file_report(vf) -> dict:
    out = {
        "versions": vf.versions,
        "current": vf.current_version,
        "len": len(vf),
        "iter": list(vf),
        "info": [vf.version_info(v) for v in vf.versions],
        "-1": vf[-1].name,
        "0": vf[0].name,
    }
    for version in vf.versions:
        out[version, "by_time"] = vf[vf.version_info(version).timestamp].name
        _report(vf[version], out, version)
    return out


@pytest.mark.parametrize("lib", ["xarray_vhdf5", "versioned_hdf5"])
def test_everything_read_equals_the_h5py_level_api(tmp_path, lib):
    p = str(tmp_path / "f.h5")
    _write(lib, p)
    with h5py.File(p, "r") as f:
        expected = _file_report(VersionedHDF5File(f))
    with VersionedHDF5File.open(p) as vf:
        got = _file_report(vf)
        # the parity is not the trivial one of reading everything through h5py
        v2 = vf["v2"]
        assert all(
            v2[name].manifest is not None
            for name in ("f8", "i4_2d", "u1_gzip", "grp/f4_lzf", "grp/cmpd", "grp/sub/S5", "flags", "big_endian", "nan")
        )
        assert v2["vlen"].manifest is None and v2["scaleoffset"].manifest is None
    assert got.keys() == expected.keys()
    # h5py's bound check of a list lets index n through (off by one) and libhdf5 then fails
    # the read with an OSError; the reader raises the IndexError h5py means (the same OSError
    # for datasets it reads through libhdf5).
    off_by_one = {k for k, v in expected.items() if v == ("raises", "OSError")}
    assert off_by_one and all(k[-1] == f"[{expected[k[0], 'shape'][0]}]" for k in off_by_one)
    assert all(
        got[k] == ("raises", "IndexError" if "/vlen" not in k[0] and "/scaleoffset" not in k[0] else "OSError")
        for k in off_by_one
    )
    differ = [k for k in expected if k not in off_by_one and got[k] != expected[k]]
    assert not differ, [(k, got[k], expected[k]) for k in differ[:5]]
    assert expected["v2/i4_2d", "array"] != expected["v1/i4_2d", "array"]  # the versions do differ


def test_groups_and_datasets_answer_paths_and_refuse_writes(tmp_path):
    p = str(tmp_path / "f.h5")
    _write("xarray_vhdf5", p)
    with VersionedHDF5File.open(p) as vf:
        assert isinstance(vf, SharedVersionedFile)
        v3 = vf["v3"]
        assert isinstance(v3, SharedVersionGroup) and v3.version == "v3"
        assert "grp/sub/S5" in v3 and "added/z" in v3 and "flags" not in v3 and "nope" not in v3
        assert f"{v3.name}/grp/cmpd" in v3 and "/elsewhere" not in v3
        sub = v3["grp"]["sub"]
        assert sub.name == f"{v3.name}/grp/sub" and sub.parent.name == f"{v3.name}/grp" and v3.parent == v3
        assert sub.versioned_root == v3 and v3["grp/sub"] == sub and hash(v3["grp/sub"]) == hash(sub)
        ds = sub["S5"]
        assert isinstance(ds, SharedVersionDataset) and ds.parent == sub and v3[f"{v3.name}/grp/sub/S5"] == ds
        assert v3.get("nope") is None and v3.get("added/z").shape == (5,)
        with pytest.raises(KeyError, match="no dataset or group 'nope' in version 'v3'"):
            v3["nope"]
        np.testing.assert_array_equal(v3["grp/cmpd"].fields(["b"])[2:4]["b"], [1.0, 1.5])
        assert v3["vlen"].asstr()[5] == "changed" and v3["f8"].astype("f4")[3].dtype == np.float32
        dest = np.zeros(4)
        v3["f8"].read_direct(dest, np.s_[2:6], np.s_[0:4])
        np.testing.assert_array_equal(dest, [SPECS["f8"]["data"][2], -1, -1, -1])
        for write in (
            lambda: v3["f8"].__setitem__(0, 1.0),
            lambda: v3["f8"].resize((3,)),
            lambda: v3["f8"].attrs.__setitem__("u", 1),
            lambda: v3.attrs.__delitem__("source"),
            lambda: v3.create_dataset("n", data=[1]),
            lambda: v3.__delitem__("f8"),
            lambda: vf.stage_version("v4"),
            lambda: vf.delete_versions(["v1"]),
            lambda: setattr(vf, "current_version", "v1"),
            lambda: vf.rebuild_hashtables(),
        ):
            with pytest.raises(ReadOnlyError):
                write()
        assert "v3" in repr(v3) and "shared" in repr(vf) and "(5,)" in repr(v3["added/z"])
    assert vf.closed and repr(vf) == "<Closed SharedVersionedFile>"
    with pytest.raises(ClosedFileError):
        vf.versions
    with pytest.raises(ClosedFileError):
        ds[0]
    with pytest.raises(ClosedFileError):
        v3["f8"]
    assert ds.shape == (12,) and not v3  # the snapshot stays; the group is falsy once closed


def test_lookups_and_get_diff_equal_the_h5py_level_api(tmp_path):
    p = str(tmp_path / "f.h5")
    _write("xarray_vhdf5", p)
    with h5py.File(p, "r") as f:
        plain = VersionedHDF5File(f)
        when = plain.version_info("v2").timestamp
        expected = (
            plain.get_diff("f8", "v1", "v2"),
            plain.get_version_by_timestamp(when).name,
            plain[when + datetime.timedelta(seconds=1)].name,
            plain.get_version_by_name("").name,
        )
    with VersionedHDF5File.open(p) as vf:
        diff = vf.get_diff("f8", "v1", "v2")
        assert list(diff) == list(expected[0]) and len(diff) > 0
        for region, (a, b) in diff.items():
            np.testing.assert_array_equal(a, expected[0][region][0])
            np.testing.assert_array_equal(b, expected[0][region][1])
        assert (
            vf.get_version_by_timestamp(when).name,
            vf[when + datetime.timedelta(seconds=1)].name,
            vf.get_version_by_name("").name,
        ) == expected[1:]
        with pytest.raises(VersionNotFoundError):
            vf.get_version_by_timestamp(when + datetime.timedelta(microseconds=1), exact=True)
        with pytest.raises(KeyError, match="no version 'nope'"):
            vf["nope"]
        with pytest.raises(IndexError):
            vf[1]
        with pytest.raises(KeyError, match="no dataset 'nope'"):
            vf.get_diff("nope", "v1", "v2")


def test_a_file_without_versions_is_refused(tmp_path):
    p = str(tmp_path / "plain.h5")
    with h5py.File(p, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(NotVersionedError):
        VersionedHDF5File.open(p)
    with pytest.raises(FileNotFoundError):
        VersionedHDF5File.open(str(tmp_path / "missing.h5"))
    with h5py.File(p, "r") as f, pytest.raises(TypeError, match="takes a path"):
        VersionedHDF5File.open(f)


def _make(path: str, n: int, owned: bool = False) -> None:
    """Versions v0..v{n-1} of x and y (100 points, chunks of 10); ``owned``: each version
    rewrites points 0:10, so each stores a chunk no other version maps."""
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        for i in range(n):
            with vf.stage_version(f"v{i}") as g:
                if i == 0:
                    g.create_dataset("x", data=np.arange(100.0), chunks=(10,))
                    g.create_dataset("y", data=np.arange(100.0) + 1000, chunks=(10,))
                    g.create_dataset("s", data=np.array(["a", "b", "c"] * 4, dtype=object), dtype=STR, chunks=(5,))
                elif owned:
                    g["x"][0:10] = -i
                    g["y"][0:10] = -100 - i
                    g["s"][0] = f"s{i}"
                else:
                    g["x"][i] = -i


def _run(script: str, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


_COMMIT = """
import sys, h5py
from xarray_vhdf5 import VersionedHDF5File
path, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(first, first + n):
    with h5py.File(path, "a") as f:
        with VersionedHDF5File(f).stage_version(f"v{i}") as g:
            g["x"][i % 100] = 1000.0 + i
"""


def test_a_reader_sees_another_process_commit_and_keeps_its_objects(tmp_path):
    p = str(tmp_path / "f.h5")
    _make(p, 3)
    with VersionedHDF5File.open(p) as vf:
        assert vf.versions == ["v0", "v1", "v2"]
        old = vf["v2"]["x"]
        before = old[:]
        run = _run(_COMMIT, p, 3, 4)
        assert run.returncode == 0, run.stderr
        assert vf.versions == ["v0", "v1", "v2", "v3", "v4", "v5", "v6"] and vf.current_version == "v6"
        assert len(vf) == 7 and "v6" in vf
        np.testing.assert_array_equal(old[:], before)
        np.testing.assert_array_equal(vf["v2"]["x"][:], before)
        assert vf["v6"]["x"][6] == 1006.0 and vf[-1]["x"][5] == 1005.0 and vf["v6"]["x"][2] == -2.0


def test_a_writer_with_a_short_timeout_is_never_refused_by_an_open_reader(tmp_path):
    """The reader open with objects held; the writer's lock timeout is 0.5 s."""
    p = str(tmp_path / "f.h5")
    _make(p, 2)
    with VersionedHDF5File.open(p) as vf:
        x = vf["v1"]["x"]
        assert x[1] == -1.0
        run = _run(_COMMIT, p, 2, 5, VHDF5_LOCK_TIMEOUT="0.5")
        assert run.returncode == 0, run.stderr
        assert x[1] == -1.0 and vf.versions[-1] == "v6" and vf["v6"]["x"][6] == 1006.0
    # The same writer is refused while a plain h5py reader holds the file (libhdf5's lock).
    with h5py.File(p, "r"):
        run = _run(_COMMIT, p, 7, 1, VHDF5_LOCK_TIMEOUT="0.5")
    assert run.returncode != 0 and "unable to lock file" in run.stderr


def test_a_reader_resolving_in_a_loop_does_not_starve_a_writer(tmp_path):
    """A thread gets versions and reads all along (each get holds the WRITE lock shared for
    a moment); a writer in another process, lock timeout 0.5 s, commits 15 versions. The
    writer opens the file with open_file, which waits for libhdf5's lock: a reader's fresh
    handle holds it for an instant while it opens (backend.signature.open_for_reading)."""
    p = str(tmp_path / "f.h5")
    _make(p, 2)
    errors, seen, stop = [], set(), threading.Event()

    def read(vf):
        while not stop.is_set():
            try:
                for name in vf.versions[2:]:
                    if name not in seen:
                        i = int(name[1:])
                        assert vf[name]["x"][i] == 1000.0 + i
                        seen.add(name)
                assert vf["v1"]["x"][1] == -1.0
            except Exception as exc:  # noqa: BLE001 reported below
                errors.append(exc)
                return

    with VersionedHDF5File.open(p) as vf:
        reader = threading.Thread(target=read, args=(vf,))
        reader.start()
        try:
            run = _run(
                _COMMIT.replace('h5py.File(path, "a")', "open_file(path)").replace(
                    "import VersionedHDF5File", "import VersionedHDF5File, open_file"
                ),
                p,
                2,
                15,
                VHDF5_LOCK_TIMEOUT="0.5",
            )
        finally:
            stop.set()
            reader.join()
        assert run.returncode == 0, run.stderr
        assert not errors, errors
        assert vf.versions[-1] == "v16" and vf["v16"]["x"][16] == 1016.0 and len(seen) > 0


def test_a_waiting_writer_thread_goes_before_new_reader_threads(tmp_path):
    """Three threads hold the WRITE lock shared in turn, overlapping (each also takes it again
    inside: never behind the waiting writer); a writer thread with a 0.5 s timeout gets in."""
    p = str(tmp_path / "f.bin")
    open(p, "wb").close()
    locks = file_locks(p)
    stop = threading.Event()

    def read():
        while not stop.is_set():
            with locks.resolving():
                with locks.resolving():
                    time.sleep(0.002)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    try:
        time.sleep(0.02)
        for _ in range(5):
            with locks.writing(timeout=0.5):
                assert locks.holds_write()
    finally:
        stop.set()
        for t in readers:
            t.join()


_HOLD_SHARED = """
import sys
from xarray_vhdf5._versions.locking import file_locks
with file_locks(sys.argv[1]).resolving():
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_writer_that_timed_out_opens_the_gate_again(tmp_path):
    """A writer waiting for a reader of another process shuts new readers out (the gate); once
    it gives up, readers of other processes get in again."""
    p = str(tmp_path / "f.bin")
    open(p, "wb").close()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_SHARED, p], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FileBusyError):
            with file_locks(p).writing(timeout=0.3):
                pass
        run = _run(
            "import sys\nfrom xarray_vhdf5._versions.locking import file_locks\n"
            "with file_locks(sys.argv[1]).resolving(timeout=0.5): print('in')",
            p,
        )
        assert run.returncode == 0 and run.stdout.strip() == "in", run.stderr
    finally:
        holder.communicate("\n", timeout=30)


_DELETE_THEN_COMMIT = """
import sys, h5py
from xarray_vhdf5 import VersionedHDF5File
with h5py.File(sys.argv[1], "a") as f:
    vf = VersionedHDF5File(f)
    vf.delete_versions(["v1", "v3", "v4", "v6"])
    for i in range(3):  # new chunks, into the space the deletion freed
        with vf.stage_version(f"w{i}") as g:
            g["x"][0:10] = 500.0 + i
            g["y"][0:10] = 900.0 + i
    with vf.stage_version("v4") as g:  # a deleted version's name, used again
        g["x"][0:10] = 444.0
        g["s"][0] = "new"
"""


def test_objects_survive_another_process_deleting_versions(tmp_path):
    p = str(tmp_path / "f.h5")
    _make(p, 8, owned=True)
    with VersionedHDF5File.open(p) as vf:
        objects = {v: (vf[v]["x"], vf[v]["y"], vf[v]["s"]) for v in vf.versions}
        expected = {v: tuple(ds[:] for ds in row) for v, row in objects.items()}
        manifests = {v: x.manifest for v, (x, _, _) in objects.items()}
        assert objects["v7"][2].manifest is None  # vlen strings: read through libhdf5
        run = _run(_DELETE_THEN_COMMIT, p)
        assert run.returncode == 0, run.stderr
        assert vf.versions == ["v0", "v2", "v5", "v7", "w0", "w1", "w2", "v4"]
        for v in ("v0", "v2", "v5", "v7"):
            for ds, want in zip(objects[v], expected[v]):  # y: its own resolution, not x's
                np.testing.assert_array_equal(ds[:], want)
        assert objects["v7"][0].manifest is not manifests["v7"]  # chunks moved: resolved again
        for v in ("v1", "v3", "v4", "v6"):  # v4: deleted, then made again
            for ds in objects[v]:
                with pytest.raises(VersionNotFoundError, match=f"version '{v}' was deleted"):
                    ds[0:10]
        assert vf["w2"]["y"][0] == 902.0 and vf["v4"]["x"][0] == 444.0 and vf["v4"]["s"][0] == b"new"


_MODIFY = """
import sys, h5py
from xarray_vhdf5 import VersionedHDF5File, modify_metadata
with h5py.File(sys.argv[1], "a") as f:
    modify_metadata(VersionedHDF5File(f), "x", compression="gzip", chunks=(25,))
"""


def test_objects_survive_another_process_running_modify_metadata(tmp_path):
    p = str(tmp_path / "f.h5")
    _make(p, 4)
    with VersionedHDF5File.open(p) as vf:
        x = vf["v3"]["x"]
        expected = x[:]
        run = _run(_MODIFY, p)
        assert run.returncode == 0, run.stderr
        np.testing.assert_array_equal(x[:], expected)
        assert x.chunks == (10,)  # the snapshot
        again = vf["v3"]["x"]
        assert again.chunks == (25,) and again.compression == "gzip"
        np.testing.assert_array_equal(again[:], expected)


def test_engine_arrays_each_check_their_own_resolution(tmp_path):
    """Two variables of one Dataset: the first read after a deletion resolved only its own
    manifest, and the second then read its chunks at their old offsets (garbage once
    the space was reused)."""
    p = str(tmp_path / "f.h5")
    _make(p, 8, owned=True)
    ds = xr.open_dataset(p, engine="vhdf5", version="v7", cache=False)
    expected = {name: ds[name].values.copy() for name in ds.data_vars}
    run = _run(_DELETE_THEN_COMMIT, p)
    assert run.returncode == 0, run.stderr
    for name in ("x", "y"):
        np.testing.assert_array_equal(ds[name].values, expected[name])
    ds.close()


def test_the_version_list_is_read_again_only_when_another_process_wrote(tmp_path, monkeypatch):
    p = str(tmp_path / "f.h5")
    _make(p, 2)
    opens = []
    real_open = SharedFile.open
    monkeypatch.setattr(SharedFile, "open", lambda self, *a, **k: (opens.append(1), real_open(self, *a, **k))[1])
    with VersionedHDF5File.open(p) as vf:
        assert len(opens) == 1
        for _ in range(3):
            assert vf.versions == ["v0", "v1"] and vf.current_version == "v1" and len(vf) == 2
        assert len(opens) == 1
        with h5py.File(p, "a") as f:
            with VersionedHDF5File(f).stage_version("v2") as g:
                g["x"][0] = 5.0
        assert vf.versions == ["v0", "v1", "v2"] and len(opens) == 2
        x = vf["v2"]["x"]
        opens.clear()
        assert x[0] == 5.0 and x[0:5].tolist() == [5.0, -1.0, 2.0, 3.0, 4.0]
        assert opens == []  # points read from the manifest: no HDF5 handle
        open_files = [fid.name for fid in h5py.h5f.get_obj_ids(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_FILE)]
        assert not any(os.path.samefile(name, p) for name in open_files if os.path.exists(name))


def test_verify_detects_a_chunk_changed_on_disk(tmp_path):
    p = str(tmp_path / "f.h5")
    with h5py.File(p, "w") as f:
        with VersionedHDF5File(f).stage_version("v0") as g:
            g.create_dataset("x", data=np.arange(100.0), chunks=(10,))
        offset = f["_version_data/x/raw_data"].id.get_chunk_info(0).byte_offset
    with open(p, "r+b") as fh:  # one float of the first chunk, still a valid float
        fh.seek(offset + 8)
        fh.write(np.float64(7.0).tobytes())
    with VersionedHDF5File.open(p) as vf:
        assert vf["v0"]["x"][1] == 7.0  # read as stored: only the hash can tell
    with VersionedHDF5File.open(p, verify=True) as vf:
        x = vf["v0"]["x"]
        assert x[15] == 15.0  # another chunk
        with pytest.raises(CorruptFileError, match="SHA-256"):
            x[0:3]


def test_a_closed_reader_is_freed_without_the_cycle_collector(tmp_path):
    """Its cached trees and datasets refer back to it: close() drops them, so nothing waits for ``gc``."""
    import gc

    path = tmp_path / "cycles.h5"
    with h5py.File(path, "w") as f:
        with VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(100.0), chunks=(10,))
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            with VersionedHDF5File.open(path) as reader:
                reader["v1"]["x"][:5]
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = [o for o in gc.garbage if type(o).__module__.startswith("xarray_vhdf5")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert ours == []


def _scale_names(f: h5py.File, name: str, value) -> list:
    """A ``DIMENSION_LIST`` (per axis, references) or ``REFERENCE_LIST`` (references and axes) by object name."""
    if name == "DIMENSION_LIST":
        return [[f[ref].name for ref in refs] for refs in value]
    return [(f[row["dataset"]].name, int(row["dimension"])) for row in value]


@pytest.mark.parametrize("big", [False, True], ids=["decoded-mappings", "stored-map"])
def test_reference_attributes_are_read_when_asked_and_equal_h5pys(tmp_path, big):
    """netCDF-4's DIMENSION_LIST and REFERENCE_LIST are left unread when a dataset is made and
    read through a fresh handle when asked for: the same references h5py reads."""
    import xarray_vhdf5 as xv
    from xarray_vhdf5._backend.h5attrs import UNREAD
    from xarray_vhdf5._versions import chunkmaps

    p = str(tmp_path / "scales.h5")
    n = 2 * chunkmaps.MIN_CHUNKS if big else 3  # with a stored chunk map, and without
    ds = xr.Dataset(
        {"sst": (("time", "lat"), np.arange(4.0 * n).reshape(n, 4))},
        coords={"time": np.arange(n), "lat": [1.0, 2.0, 3.0, 4.0]},
    )
    ds["sst"].encoding["chunks"] = (1, 4)
    ds.vhdf5.commit("v1", path=p)
    with h5py.File(p, "r") as f:
        assert (chunkmaps.load(f, "v1", "sst") is not None) == big
        group = f["_version_data/versions/v1"]
        expected = {}
        for name in ("sst", "time", "lat"):
            attrs = group[name].attrs
            expected[name] = [(k, _value(attrs[k]) if not k.endswith("_LIST") else None) for k in attrs]
            for k in ("DIMENSION_LIST", "REFERENCE_LIST"):
                if k in attrs:
                    expected[name, k] = _scale_names(f, k, attrs[k])
    with VersionedHDF5File.open(p) as vf:
        v1 = vf["v1"]
        assert (v1["sst"].manifest is not None) and (len(v1["sst"].manifest.rows) == n)
        with h5py.File(p, "r") as f:
            for name in ("sst", "time", "lat"):
                got = v1[name]
                held = got._meta["attrs"]
                assert [k for k in held if held[k] is UNREAD] == [k for k in held if k.endswith("_LIST")]
                assert [(k, None if k.endswith("_LIST") else _value(got.attrs[k])) for k in got.attrs] == expected[name]
                for k in ("DIMENSION_LIST", "REFERENCE_LIST"):
                    if (name, k) in expected:
                        assert _scale_names(f, k, got.attrs[k]) == expected[name, k]
                        assert held[k] is not UNREAD  # read once, kept
        unread = v1["time"]
        dimension_list = v1["sst"]
    unread._meta["attrs"]["REFERENCE_LIST"] = UNREAD  # as made, never asked for
    with pytest.raises(ClosedFileError):
        unread.attrs["REFERENCE_LIST"]
    assert isinstance(dimension_list.attrs["DIMENSION_LIST"], np.ndarray)  # kept: no handle needed
    with VersionedHDF5File.open(p) as vf:
        v1 = vf["v1"]
        with h5py.File(p, "r+") as f:
            with xv.VersionedHDF5File(f).stage_version("v2") as g:
                g["sst"][0, 0] = -1.0
            xv.delete_versions(f, ["v1"])
        with pytest.raises(VersionNotFoundError):
            v1["sst"].attrs["DIMENSION_LIST"]
