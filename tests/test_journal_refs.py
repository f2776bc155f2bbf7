"""The journal's reference records: an in-place rechunk journals the old chunks by reference.

``modify_metadata`` through a journaled handle copies the old raw_data into the
side file (``H5Ocopy``, chunks as stored), frees it and writes the new raw_data
into its bytes; the journal records those bytes as references into the side
file instead of copying them. Checked here:

- ``H5Ocopy`` copies every stored chunk byte for byte, filtered ones included,
  and ``_same_chunks`` pairs every chunk;
- the journal of an in-place rechunk is small (references, not bytes);
- SIGKILL at random writes, and at random instants of a timer, during an
  in-place rechunk of a history: after recovery the file is byte for byte the
  file before, or the rechunk is whole (every version reads the same values,
  in the new chunks);
- a power cut after every system call, with ``durable=True``: the same;
- a side file missing or not the one journaled at recovery: a
  ``CorruptFileError`` naming both files, nothing changed; with the side file
  put back, the rollback goes through;
- a journal of the first format (copy records only) is still rolled back.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import time
import zlib

import h5py
import numpy as np
import pytest

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions.journal import (
    SIDE_SUFFIX,
    SIDE_USERBLOCK,
    JournaledFile,
    OsIO,
    _records,
    journal_path,
    recover,
)
from xarray_vhdf5._versions.metadata import _same_chunks
from xarray_vhdf5._versions.mutation import open_file
from xarray_vhdf5._versions.rechunk import rechunk
from xarray_vhdf5.errors import CorruptFileError
from xarray_vhdf5.testing._powercut import KillAtIO, PowerCutIO, in_forked_child

OLD, NEW = (1, 12, 10), (6, 4, 5)


def _history(path, compression=None) -> dict[str, np.ndarray]:
    """Four versions of ``x`` (appends and an edit of an old slab), stored in ``OLD`` chunks."""
    data = np.random.default_rng(5).random((16, 12, 10)).astype("f4")
    values = {}
    f = open_file(path)
    try:
        vf = VersionedHDF5File(f)
        for k in range(4):
            n = 4 * (k + 1)
            with vf.stage_version(f"v{k}") as g:
                if k == 0:
                    g.create_dataset("x", data=data[:n], chunks=OLD, compression=compression)
                else:
                    g["x"].resize((n, 12, 10))
                    g["x"][n - 4 : n] = data[n - 4 : n]
                    if k == 2:
                        g["x"][1, :3, :3] = -7.0
                        data[1, :3, :3] = -7.0
            values[f"v{k}"] = data[:n].copy()
    finally:
        f.close()
    return values


def _read(path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _outcome(path, values, original: bytes) -> str:
    """Recover ``path`` and check it: 'absent' (every byte as before) or 'whole' (the rechunk done).

    A side file may outlive its journal only when the writer died between deleting
    the two (the rechunk is whole then; the next in-place rechunk overwrites it).
    """
    journaled = os.path.exists(journal_path(path))
    recover(path)
    assert not os.path.exists(journal_path(path))
    if journaled:
        assert not os.path.exists(path + SIDE_SUFFIX)
    if _read(path) == original:
        return "absent"
    with h5py.File(path, "r") as f:
        vf = VersionedHDF5File(f)
        for name, expected in values.items():
            assert vf[name]["x"].chunks == NEW, (name, vf[name]["x"].chunks)
            np.testing.assert_array_equal(vf[name]["x"][()], expected)
    return "whole"


def _rechunk(path, io=None, durable=False) -> None:
    f = open_file(path, io=io, durable=durable)
    try:
        if isinstance(io, KillAtIO):
            io.arm()
        rechunk(VersionedHDF5File(f), "x", NEW, max_mem="64kB")
    finally:
        f.close()


@pytest.mark.parametrize(
    "filters",
    [{}, {"compression": "gzip"}, {"compression": "gzip", "shuffle": True, "fletcher32": True}, {"compression": "lzf"}],
)
def test_h5ocopy_copies_every_stored_chunk_byte_for_byte(tmp_path, filters):
    p, q = str(tmp_path / "a.h5"), str(tmp_path / "a.h5") + SIDE_SUFFIX
    with h5py.File(p, "w") as f:
        d = f.create_dataset("g/raw", shape=(40, 30), chunks=(7, 8), dtype="f4", maxshape=(None, 30), **filters)
        d[:33] = np.random.default_rng(1).random((33, 30)).astype("f4") * 100
    with h5py.File(p, "r") as f, h5py.File(q, "w", userblock_size=SIDE_USERBLOCK) as side:
        f.copy(f["g/raw"], side.require_group("/g"), "raw")
        with open(p, "rb") as fh, open(q, "rb") as sh:
            extents = _same_chunks(fh.fileno(), f["g/raw"], sh.fileno(), side["g/raw"])
        assert len(extents) == f["g/raw"].id.get_num_chunks() == 20
    a, b = _read(p), _read(q)
    assert all(a[o : o + n] == b[s : s + n] for o, n, s in extents)


@pytest.mark.parametrize("refs", [True, False])
def test_an_in_place_rechunk_journals_the_old_chunks_by_reference(tmp_path, monkeypatch, refs):
    """The journal's largest size: a small fraction of raw_data's by reference, more than it by copy."""

    class Sizes(OsIO):
        journal = 0

        def pwrite(self, fd, data, offset):
            n = super().pwrite(fd, data, offset)
            if os.readlink(f"/proc/self/fd/{fd}").endswith("-journal"):
                self.journal = max(self.journal, offset + n)
            return n

    if not refs:  # registering nothing: every overwritten byte is journaled by copy, as before
        refer = JournaledFile.refer
        monkeypatch.setattr(JournaledFile, "refer", lambda self, extents: refer(self, []))
    p = str(tmp_path / "h.h5")
    data = np.random.default_rng(2).random((40, 100, 100)).astype("f4")
    f = open_file(p)
    try:
        with VersionedHDF5File(f).stage_version("v0") as g:
            g.create_dataset("x", data=data, chunks=(1, 100, 100))
    finally:
        f.close()
    io = Sizes()
    f = open_file(p, io=io)
    try:
        rechunk(VersionedHDF5File(f), "x", (8, 25, 25), max_mem="2MB")
    finally:
        f.close()
    with h5py.File(p, "r") as f:
        np.testing.assert_array_equal(VersionedHDF5File(f)["v0"]["x"][()], data)
        assert f["_version_data/x/raw_data"].chunks == (8, 25, 25)
    if refs:
        assert 0 < io.journal < data.nbytes / 10, (io.journal, data.nbytes)
    else:
        assert io.journal > data.nbytes * 0.9, (io.journal, data.nbytes)


def _kill_child(p: str, n: int) -> bool:
    """Rechunk in a child killed at its ``n``-th write; True if it was killed."""
    status = in_forked_child(lambda: _rechunk(p, io=KillAtIO(n)))
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def _writes(tmp_path, base) -> int:
    """How many writes the rechunk of ``base`` makes (counted in a child, never killed)."""
    p = str(tmp_path / "count.h5")
    shutil.copyfile(base, p)

    class Count(KillAtIO):
        def _tick(self):
            if self.armed:
                self.count += 1

    counter = Count(0)
    counter_file = str(tmp_path / "count.txt")

    def work():
        _rechunk(p, io=counter)
        with open(counter_file, "w") as fh:
            fh.write(str(counter.count))

    assert in_forked_child(work) == 0
    with open(counter_file) as fh:
        return int(fh.read())


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_sigkill_at_random_writes_of_an_in_place_rechunk(tmp_path, compression):
    base = str(tmp_path / "base.h5")
    values = _history(base, compression)
    original = _read(base)
    total = _writes(tmp_path, base)
    assert total > 50
    rng = random.Random(22)
    points = sorted(
        {1, 2, total // 2, total - 1} | {rng.randint(1, total) for _ in range(int(os.environ.get("VHDF5_KILLS", "3")))}
    )
    outcomes = {"absent": 0, "whole": 0}
    for n in points:
        p = str(tmp_path / f"k{n}.h5")
        shutil.copyfile(base, p)
        killed = _kill_child(p, n)
        assert killed or n >= total
        outcomes[_outcome(p, values, original)] += 1
        os.unlink(p)
    assert outcomes["absent"] >= 3, outcomes


def test_sigkill_at_random_instants_of_an_in_place_rechunk(tmp_path):
    """A timer kills the child (kill -9) at a random instant of its rechunk."""
    base = str(tmp_path / "base.h5")
    values = _history(base, "gzip")
    original = _read(base)
    rng = random.Random(9)
    outcomes = {"absent": 0, "whole": 0}
    for k in range(int(os.environ.get("VHDF5_KILLS", "8"))):
        p = str(tmp_path / f"t{k}.h5")
        shutil.copyfile(base, p)
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                os.close(ready_r)
                f = open_file(p)
                os.write(ready_w, b"x")  # opened: the rechunk starts now
                rechunk(VersionedHDF5File(f), "x", NEW, max_mem="64kB")
                f.close()
                code = 0
            finally:
                os._exit(code)
        os.close(ready_w)
        os.read(ready_r, 1)
        os.close(ready_r)
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        outcomes[_outcome(p, values, original)] += 1
        os.unlink(p)
    assert sum(outcomes.values()) == int(os.environ.get("VHDF5_KILLS", "8"))


def test_power_cuts_during_an_in_place_rechunk_with_durable_lose_nothing(tmp_path):
    p = str(tmp_path / "f.h5")
    values = _history(p, "gzip")
    original = _read(p)
    rng = random.Random(3)
    cuts: list[dict] = []
    every = int(os.environ.get("VHDF5_CUT_EVERY", "3"))
    io = PowerCutIO()
    f = open_file(p, durable=True, io=io)
    vf = VersionedHDF5File(f)
    io.follow(p)

    def after(name: str) -> None:
        if io.calls % every == 0:
            cuts.append(io.cut(str(tmp_path / f"cut{len(cuts)}"), rng))

    io.after_call = after
    rechunk(vf, "x", NEW, max_mem="64kB")
    io.after_call = None
    f.close()
    assert any(os.path.basename(q).endswith(SIDE_SUFFIX) and image for c in cuts for q, image in c.items())
    outcomes = {"absent": 0, "whole": 0, "damaged": 0}
    for images in cuts:
        image = images[os.path.abspath(p)]
        status = in_forked_child(lambda image=image: _outcome(image, values, original))
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            outcomes["absent" if _read(image) == original else "whole"] += 1
        else:
            outcomes["damaged"] += 1
    assert len(cuts) >= 20
    assert outcomes["damaged"] == 0, outcomes
    assert outcomes["absent"] >= 1 and outcomes["whole"] >= 1, outcomes


def _killed_halfway(tmp_path) -> tuple[str, bytes, bytes]:
    """A history killed halfway through its in-place rechunk: (path, the file's bytes, its journal's)."""
    base = str(tmp_path / "base.h5")
    _history(base)
    total = _writes(tmp_path, base)
    p = str(tmp_path / "half.h5")
    shutil.copyfile(base, p)
    assert _kill_child(p, total // 2)
    assert os.path.exists(journal_path(p)) and os.path.exists(p + SIDE_SUFFIX)
    records, side = _records(_read(journal_path(p)), journal_path(p))
    assert side is not None and sum(at is not None for _, _, at in records) >= 2
    return p, _read(p), _read(journal_path(p))


@pytest.mark.parametrize("damage", ["missing", "other id", "cut short"])
def test_a_missing_or_wrong_side_file_stops_the_rollback_before_it_writes(tmp_path, damage):
    p, before, journal = _killed_halfway(tmp_path)
    side = p + SIDE_SUFFIX
    kept = str(tmp_path / "kept")
    shutil.copyfile(side, kept)
    if damage == "missing":
        os.unlink(side)
    elif damage == "other id":
        with open(side, "r+b") as fh:
            fh.seek(8)
            fh.write(os.urandom(16))
    else:
        os.truncate(side, os.path.getsize(side) - 1)
    with pytest.raises(CorruptFileError) as info:
        recover(p)
    assert p in str(info.value) and side in str(info.value)
    with pytest.raises(CorruptFileError):
        open_file(p).close()  # every opener refuses it the same way
    assert _read(p) == before and _read(journal_path(p)) == journal  # nothing changed
    shutil.copyfile(kept, side)
    assert recover(p)
    with h5py.File(p, "r") as f:
        vf = VersionedHDF5File(f)
        assert vf["v3"]["x"].chunks == OLD and vf["v3"]["x"].shape == (16, 12, 10)
    assert not os.path.exists(side)


def test_a_journal_of_the_first_format_is_still_rolled_back(tmp_path):
    p = str(tmp_path / "f.bin")
    with open(p, "wb") as fh:
        fh.write(bytes(range(256)) * 4)
    old = bytes(range(10, 30))
    crc = zlib.crc32(old, zlib.crc32(struct.pack("<QQ", 10, len(old)))) & 0xFFFFFFFF
    with open(journal_path(p), "wb") as fh:
        fh.write(struct.pack("<8sQQ", b"VHDF5JNL", 1024, 7) + struct.pack("<QQI", 10, len(old), crc) + old)
    with open(p, "r+b") as fh:
        fh.seek(10)
        fh.write(b"x" * 20)
        fh.seek(2000)
        fh.write(b"past the end")
    assert recover(p)
    assert _read(p) == bytes(range(256)) * 4


def test_references_cover_only_registered_bytes_never_journaled_before(tmp_path):
    """A first overwrite is split: registered parts by reference, the rest (and re-overwrites) not at all or by copy."""
    p, side = str(tmp_path / "f.bin"), str(tmp_path / "f.bin") + SIDE_SUFFIX
    original = bytes(range(256)) * 8
    with open(p, "wb") as fh:
        fh.write(original)
    jf = JournaledFile(p)
    jf.begin()
    jf.seek(100)
    jf.write(b"a" * 10)  # journaled by copy before the side file exists
    with jf.create_side() as fh:  # the side file: the bytes of [64, 512) at offset SIDE_USERBLOCK
        assert fh.name == side
        fh.write(b"\0" * SIDE_USERBLOCK + original[64:512])
    jf.refer([(64, 448, SIDE_USERBLOCK)])
    jf.seek(0)
    jf.write(b"b" * 600)  # [0, 64) copy, [64, 100) ref, [100, 110) saved already, [110, 512) ref, [512, 600) copy
    jf.seek(2040)
    jf.write(b"c" * 100)
    records, side_record = _records(_read(journal_path(p)), journal_path(p))
    assert side_record is not None and side_record[2] == os.path.basename(side)
    assert records == [
        (100, original[100:110], None),
        (0, original[:64], None),
        (64, 36, SIDE_USERBLOCK),
        (110, 402, SIDE_USERBLOCK + 46),
        (512, original[512:600], None),
        (2040, original[2040:2048], None),
    ]
    os.close(jf._journal)  # the process dies
    jf._journal = None
    jf.close()
    assert recover(p)
    assert _read(p) == original and not os.path.exists(side)


def test_refer_refuses_what_it_cannot_prove(tmp_path):
    p = str(tmp_path / "f.bin")
    with open(p, "wb") as fh:
        fh.write(bytes(1024))
    jf = JournaledFile(p)
    with pytest.raises(RuntimeError, match="inside it"):
        jf.create_side()  # outside a mutation
    jf.begin()
    with pytest.raises(RuntimeError, match="after create_side"):
        jf.refer([(0, 10, SIDE_USERBLOCK)])
    with jf.create_side() as fh:
        fh.write(bytes(2048))
    with pytest.raises(RuntimeError, match="once per mutation"):
        jf.create_side()
    with pytest.raises(RuntimeError, match="overlapping"):
        jf.refer([(0, 10, SIDE_USERBLOCK), (5, 10, SIDE_USERBLOCK + 100)])
    with pytest.raises(RuntimeError, match="stamp"):
        jf.refer([(0, 10, 4)])
    assert jf.refer([(0, 10, SIDE_USERBLOCK)]) == 10
    with pytest.raises(RuntimeError, match="registered once"):
        jf.refer([(20, 10, SIDE_USERBLOCK + 20)])
    jf.end()
    assert not os.path.exists(p + SIDE_SUFFIX) and not os.path.exists(journal_path(p))
    jf.close()
