"""The rollback journal: every mutation whole or absent after a kill or a power cut.

Two crash models (:mod:`xarray_vhdf5.testing._powercut`):

- SIGKILL at the n-th write of a mutation, for every n until the mutation
  completes (forked children: deterministic crash points);
- a power cut after every system call of a mutation, keeping a random subset
  of the writes not yet synced, with ``durable=True`` (and, to show the test
  can fail, without).

After each crash the file is opened through this package (which rolls the
journal back), every version committed before must read exactly as before,
the interrupted version must be absent or whole, and the next commit must
work. Long sweeps are in the ``slow`` runs (``VHDF5_CRASH_SUBSETS``).
"""

from __future__ import annotations

import os
import random
import signal

import h5py
import numpy as np
import pytest

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions import chunkmaps
from xarray_vhdf5._versions.journal import JOURNAL_SUFFIX, JournaledFile, journal_path, recover
from xarray_vhdf5._versions.mutation import open_file
from xarray_vhdf5.testing._powercut import KillAtIO, PowerCutIO

N = 60


def _value(version: int) -> np.ndarray:
    data = np.arange(N, dtype="f8")
    for v in range(1, version + 1):
        data[(7 * v) % N] = 1000.0 + v
    return data


def _history(path, n: int = 3, big: bool = False) -> dict[str, np.ndarray]:
    """Versions v0.. of ``x`` (8 chunks) and ``y``; ``big``: also ``z``, 100 chunks (a stored chunk map)."""
    f = open_file(path)
    try:
        vf = VersionedHDF5File(f)
        for v in range(n):
            with vf.stage_version(f"v{v}") as g:
                if v == 0:
                    g.create_dataset("x", data=_value(0), chunks=(8,), maxshape=(None,))
                    g.create_dataset("y", data=np.zeros((4, 6), "i4"), chunks=(2, 3))
                    if big:
                        g.create_dataset("z", data=np.arange(400.0), chunks=(4,))
                else:
                    g["x"][(7 * v) % N] = 1000.0 + v
                    if big:
                        g["z"][v] = -v
    finally:
        f.close()
    return {f"v{v}": _value(v) for v in range(n)}


def _without_maps(path) -> None:
    """Drop every chunk map and map log, as a file versioned-hdf5 wrote has none (fill_maps' base)."""
    with h5py.File(path, "r+") as f:
        chunkmaps.forget(f)


def _mutate(vf: VersionedHDF5File, kind: str) -> tuple[str | None, np.ndarray | None]:
    """One mutation of ``kind``; returns (the new version, its x) or (None, None)."""
    if kind == "commit":
        with vf.stage_version("new") as g:
            g["x"][3] = -3.0
            g["y"][1, 1] = 11
        return "new", np.where(np.arange(N) == 3, -3.0, _value(2))
    if kind == "append":
        with vf.stage_version("new") as g:
            g["x"].resize((N + 20,))
            g["x"][N:] = 5.0
        return "new", np.concatenate([_value(2), np.full(20, 5.0)])
    if kind == "delete":
        vf.delete_versions(["v1"])
        return None, None
    if kind == "modify":
        from xarray_vhdf5 import modify_metadata

        modify_metadata(vf, "x", compression="gzip")
        return None, None
    if kind == "fill_maps":  # the maps of versions that have none (_without_maps), one mutation
        from xarray_vhdf5 import fill_chunk_maps

        assert fill_chunk_maps(vf.f).stored == 9  # x and y (the file's map log), z (stored maps) x 3
        return None, None
    if kind == "rechunk_grow":  # the new raw_data after the end of the file, no side copy
        from xarray_vhdf5 import rechunk

        rechunk(vf, "x", (12,), in_place=False)
        return None, None
    raise ValueError(kind)


def _check(path, before: dict[str, np.ndarray], new: str | None, new_x, kind: str) -> str:
    """Verify a crashed file; returns 'absent', 'whole' or 'rolled'."""
    recover(path)
    assert not os.path.exists(path + JOURNAL_SUFFIX)
    with h5py.File(path, "r") as f:
        vf = VersionedHDF5File(f)
        for name, data in before.items():
            if kind == "delete" and name == "v1" and name not in vf.versions:
                continue  # the deletion went through
            assert name in vf.versions, (name, vf.versions)
            np.testing.assert_array_equal(vf[name]["x"][:], data)
            assert vf[name]["y"][:].sum() == 0
        if kind == "fill_maps":  # every version's z, through the maps where the cut kept them, as libhdf5 reads it
            want = [f[f"_version_data/versions/{v}/z"][()] for v in before]
            with VersionedHDF5File.open(path) as reader:
                np.testing.assert_array_equal(reader.read_versions("z", np.s_[:], list(before)), want)
                np.testing.assert_array_equal(reader.read_versions("x", np.s_[:], list(before)), list(before.values()))
        outcome = "absent"
        if new is not None and new in vf.versions:
            np.testing.assert_array_equal(vf[new]["x"][:], new_x)
            outcome = "whole"
    f = open_file(path)
    try:
        with VersionedHDF5File(f).stage_version("after") as g:
            g["x"][0] = 42.0
    finally:
        f.close()
    with h5py.File(path, "r") as f:
        assert VersionedHDF5File(f)["after"]["x"][0] == 42.0
    return outcome


def test_a_mutation_rolled_back_by_hand_restores_every_byte(tmp_path):
    p = str(tmp_path / "f.bin")
    with open(p, "wb") as fh:
        fh.write(bytes(range(256)) * 4)
    jf = JournaledFile(p)
    jf.begin()
    jf.seek(10)
    jf.write(b"x" * 20)
    jf.seek(15)
    jf.write(b"y" * 30)  # overlaps the first range: only the new part is journaled
    jf.seek(1020)
    jf.write(b"z" * 100)  # past the old end: no record, truncated by the rollback
    jf.truncate(500)  # never below the old size during a mutation
    assert os.path.getsize(p) == 1024  # cut to the old size, not below
    os.close(jf._journal)  # the process dies: no end(), no abandon()
    jf._journal = None
    jf.close()
    assert recover(p)
    with open(p, "rb") as fh:
        assert fh.read() == bytes(range(256)) * 4
    assert not recover(p)  # nothing left to do


@pytest.mark.parametrize("kind,stride", [("commit", 3), ("append", 5), ("delete", 5), ("modify", 25), ("fill_maps", 3)])
def test_sigkill_at_writes_of_a_mutation(tmp_path, kind, stride):
    """SIGKILL at every ``stride``-th write of a mutation (the slow run: every write)."""
    _kill_sweep(tmp_path, kind, stride)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["commit", "append", "delete", "modify", "fill_maps"])
def test_sigkill_at_every_write_of_a_mutation(tmp_path, kind):
    """SIGKILL at the 1st, 2nd, ... write of a mutation (forked children), until one completes."""
    kills = _kill_sweep(tmp_path, kind, 1)
    print(f"SIGKILL, {kind}: {kills} kills, 0 damaged")


def _kill_sweep(tmp_path, kind: str, stride: int) -> int:
    """Kill a child at write 1, 1 + stride, ... of one mutation until one completes; check each file."""
    base = str(tmp_path / "base.h5")
    before = _history(base, big=kind == "fill_maps")
    if kind == "fill_maps":
        _without_maps(base)
    outcomes: dict[str, int] = {}
    n = 1
    while True:
        p = str(tmp_path / f"k{n}.h5")
        with open(base, "rb") as src, open(p, "wb") as dst:
            dst.write(src.read())
        pid = os.fork()
        if pid == 0:  # the child: open, arm, mutate; killed at write n, or exits 0
            try:
                io = KillAtIO(n)
                f = open_file(p, io=io)
                vf = VersionedHDF5File(f)
                io.arm()
                _mutate(vf, kind)
                f.close()
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        new, new_x = (None, None) if kind in ("delete", "modify", "fill_maps") else ("new", None)
        if new is not None:
            new_x = (
                np.where(np.arange(N) == 3, -3.0, before["v2"])
                if kind == "commit"
                else np.concatenate([before["v2"], np.full(20, 5.0)])
            )
        outcome = _check(p, before, new, new_x, kind)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if not killed:
            break
        n += stride
        assert n < 5000
    assert n > 3  # the mutation wrote several times: each was a crash point
    if kind in ("commit", "append"):
        assert outcomes.get("whole", 0) >= 1  # the run that completed
    return sum(outcomes.values()) - 1


def _check_in_child(image, before, new, new_x, kind) -> bool:
    """:func:`_check` in a forked child (libhdf5 may crash on a damaged file); True if whole."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _check(image, before, new, new_x, kind)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _power_cut_sweep(
    tmp_path,
    kind: str,
    durable: bool,
    subsets: int,
    seed: int,
    isolated: bool = False,
    every: int = 1,
    until_damaged: bool = False,
) -> tuple[int, int]:
    """Cut power after every system call of one mutation; returns (images checked, images damaged).

    ``every``: check the image of every ``every``-th cut only (all are made, in the same order);
    ``until_damaged``: stop at the first damaged image.
    """
    p = str(tmp_path / "f.h5")
    before = _history(p, big=kind == "fill_maps")
    if kind == "fill_maps":
        _without_maps(p)
    cuts: list[dict] = []
    rng = random.Random(seed)
    io = PowerCutIO()
    f = open_file(p, durable=durable, io=io)
    vf = VersionedHDF5File(f)
    io.follow(p)  # from here on, what is on disk is what a cut keeps
    io.after_call = lambda name: cuts.extend(io.cut(str(tmp_path / f"cut{len(cuts)}"), rng) for _ in range(subsets))
    new, new_x = _mutate(vf, kind)
    io.after_call = None
    f.close()
    damaged = 0
    cuts = cuts[::every]
    for _k, images in enumerate(cuts):
        image = images[os.path.abspath(p)]
        if image is None:
            continue
        if isolated:
            damaged += not _check_in_child(image, before, new, new_x, kind)
            if damaged and until_damaged:
                break
            continue
        try:
            _check(image, before, new, new_x, kind)
        except Exception:  # noqa: BLE001 any failure to read the cut image counts as damage
            damaged += 1
    return len(cuts), damaged


@pytest.mark.parametrize("kind", ["commit", "append", "delete", "modify", "fill_maps"])
def test_power_cuts_with_durable_lose_nothing(tmp_path, kind):
    """Every third power cut's image checked (the slow run's ``power_cut_counts``: every one)."""
    checked, damaged = _power_cut_sweep(
        tmp_path, kind, durable=True, subsets=int(os.environ.get("VHDF5_CRASH_SUBSETS", "1")), seed=1, every=3
    )
    assert checked >= 15
    assert damaged == 0, f"{damaged} of {checked} power-cut images damaged"


def test_power_cuts_without_durable_can_lose_a_version(tmp_path):
    """The same sweep with durable=False: the harness sees the damage fsync prevents."""
    checked, damaged = _power_cut_sweep(
        tmp_path, "commit", durable=False, subsets=1, seed=2, isolated=True, until_damaged=True
    )
    assert damaged > 0, f"0 of {checked} images damaged: the power-cut model found nothing to catch"


def test_a_stale_journaled_handle_cannot_damage_the_file_when_closed(tmp_path):
    """A writer that bypasses libhdf5's lock commits while our handle is open: ours is refused,
    and closing it writes nothing (libhdf5 would write its stale superblock)."""
    import subprocess
    import sys
    import textwrap

    from xarray_vhdf5.errors import StaleVersionError

    p = str(tmp_path / "f.h5")
    before = _history(p)
    f = open_file(p)
    vf = VersionedHDF5File(f)
    script = textwrap.dedent(f"""
        import h5py
        from xarray_vhdf5 import VersionedHDF5File
        with h5py.File({p!r}, "a", locking=False) as f:
            with VersionedHDF5File(f).stage_version("theirs") as g:
                g["x"][6] = 6.5
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    with pytest.raises(StaleVersionError):
        with vf.stage_version("mine") as g:
            g["x"][7] = 7.5
    f.close()  # libhdf5 writes its stale superblock here: dropped
    with h5py.File(p, "r") as f:
        vf = VersionedHDF5File(f)
        assert vf.versions == [*before, "theirs"]
        assert vf["theirs"]["x"][6] == 6.5


def test_a_held_open_writer_makes_another_writer_wait_then_fail(tmp_path, monkeypatch):
    from xarray_vhdf5.errors import FileBusyError

    monkeypatch.setenv("VHDF5_LOCK_TIMEOUT", "0.3")
    p = str(tmp_path / "f.h5")
    _history(p)
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from xarray_vhdf5._versions.mutation import open_file; "
            f"f = open_file({p!r}); print('open', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(FileBusyError) as info:
            open_file(p)
        assert info.value.holder_pid == holder.pid
    finally:
        holder.kill()
        holder.communicate()
    f = open_file(p)  # free again
    f.close()


@pytest.mark.slow
@pytest.mark.parametrize("durable", [True, False])
@pytest.mark.parametrize("kind", ["commit", "append", "delete", "modify", "rechunk_grow", "fill_maps"])
def test_power_cut_counts(tmp_path, kind, durable):
    """The long sweep (3 random subsets per cut point), isolated; prints the counts."""
    checked, damaged = _power_cut_sweep(tmp_path, kind, durable=durable, subsets=3, seed=7, isolated=True)
    print(f"power cuts, {kind}, durable={durable}: {damaged} of {checked} images damaged")
    if durable:
        assert damaged == 0


def test_closing_the_file_releases_the_lock_while_references_remain(tmp_path):
    """``with open_file(p) as f`` releases libhdf5's lock at exit, even with a ``VersionedHDF5File`` kept."""
    path = tmp_path / "a.h5"
    with open_file(path) as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(4.0))
    assert not f.id.valid and vf is not None  # the File object is closed but still referenced
    with h5py.File(path, "a") as plain:  # libhdf5's own lock: refused while the flock is held
        with VersionedHDF5File(plain).stage_version("v2") as g:
            g["x"][0] = -1.0
    assert not os.path.exists(journal_path(path))
    with open_file(path, timeout=0.5) as f:
        np.testing.assert_array_equal(VersionedHDF5File(f)["v2"]["x"][:], [-1.0, 1.0, 2.0, 3.0])
