"""The version DAG against a pure-Python model: a hypothesis state machine (issue 17).

A :class:`VersionDagMachine` drives one real file and a model of it: a dict
of version name -> :class:`Version` (parent, numpy arrays of two datasets:
``a``, 1-d float64 with chunks of 4 and fill NaN; ``b``, 2-d int32 with
chunks (2, 3) and fill 0) and the current version. Edits are point and
region assignments (one or several chunks) and resizes along axis 0.

Rules:

- ``commit``: ``stage_version`` from the current version or another one,
  ``make_current`` True or False, through the main handle (plain
  ``h5py.File``, ``open_file``, or one opened for the commit only);
- ``stale_or_rebase_commit`` (``rebase`` False or True): version A is
  staged (through xarray, ``ds.vhdf5.stage()``, or at the h5py level), then
  B is committed through another handle (``open_file``, plain h5py, another xarray stage, or
  another process), then A is committed. The model is precise about who
  raises: the xarray staged commit raises ``StaleVersionError`` when the
  current version is not the staged-from one (``force=True`` then branches from
  the staged-from version); ``stage_version`` without ``rebase`` commits on
  its ``prev_version`` whatever happened (versioned-hdf5's semantics); with
  ``rebase=True`` both merge three-way (:func:`merge3`) onto the current
  version, or raise ``ConflictError`` with nothing written;
- ``delete``: ``delete_versions`` of a non-empty subset of the non-current
  versions (children re-parented to their nearest surviving ancestor);
- ``reopen``: the main handle closed and reopened (plain h5py, ``open_file``,
  or none), and the long-lived ``VersionedHDF5File.open`` reader too;
- ``kill_commit`` / ``kill_delete``: a forked child commits or deletes through
  ``open_file(p, io=KillAtIO(n))`` and is SIGKILLed at its n-th write (or
  completes); the file is then read before and after the rollback, and the
  model takes the outcome the file shows, which must be whole.

Invariants, after every step: no ``-journal`` file; every model version
reads bit for bit the model's arrays, with the model's parent, and the
version list (in commit order) and current version are the model's,
through a fresh ``VersionedHDF5File(h5py.File(p, "r"))``, through the main
handle's ``VersionedHDF5File`` and through the long-lived
``VersionedHDF5File.open(p)`` reader; the current version and one other in
rotation also through ``xr.open_dataset(p, engine="vhdf5", version=v)``.

Bugs the machine found have their own tests at the end (they failed before
their fixes): ``delete_versions([])`` dropped the raw_data of the netCDF
dimension scales; a ``stage_version`` commit lost from its object's version
list a version another handle committed during the stage; and (found with a
broken copy of the machine that skipped the rollback) a plain h5py reader of
a file with a dead writer's journal got libhdf5's ``KeyError`` instead of
``CorruptFileError``.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections import Counter
from dataclasses import dataclass

import h5py
import numpy as np
import pytest
import xarray as xr
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from xarray_vhdf5 import VersionedHDF5File, open_file
from xarray_vhdf5._versions.journal import JOURNAL_SUFFIX
from xarray_vhdf5.errors import ConflictError, StaleVersionError
from xarray_vhdf5.testing._powercut import KillAtIO, in_forked_child
from xarray_vhdf5.testing.strategies import edit_sequences
from xarray_vhdf5.xr import _reading

FIRST = "__first_version__"
FLOATS = (0.0, -0.0, 1.5, -2.0, np.nan, 7.0)
INTS = (0, 1, -3, 42, 7)
FILL = {"a": np.float64(np.nan), "b": np.int32(0)}
CHUNKS = {"a": (4,), "b": (2, 3)}
MAX_ROWS = 24  # resizes stay below this many rows along axis 0

#: Totals over every run of the machine in this process (printed by the tests: ``pytest -s``).
STATS: Counter = Counter()


# -- the model -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    """A version of the model.

    Attributes
    ----------
    parent : str
        The ``prev_version`` (``"__first_version__"`` for a root).
    arrays : dict of str to numpy.ndarray
        ``a`` and ``b`` as the version stores them.
    """

    parent: str
    arrays: dict


def same_bits(got: np.ndarray, expected: np.ndarray) -> bool:
    """Whether two arrays have the same dtype, shape and bytes.

    Parameters
    ----------
    got, expected : numpy.ndarray
        The arrays.

    Returns
    -------
    bool
        True when identical bit for bit (a NaN equals only the same NaN).
    """
    got, expected = np.asarray(got), np.asarray(expected)
    return got.dtype == expected.dtype and got.shape == expected.shape and got.tobytes() == expected.tobytes()


def resized(x: np.ndarray, n0: int, fill) -> np.ndarray:
    """``x`` resized to ``n0`` rows: cut, or padded with ``fill``.

    Parameters
    ----------
    x : numpy.ndarray
        The array.
    n0 : int
        The new length of axis 0.
    fill : scalar
        The dataset's fill value.

    Returns
    -------
    numpy.ndarray
        A new array.
    """
    out = np.full((n0, *x.shape[1:]), fill, dtype=x.dtype)
    n = min(n0, x.shape[0])
    out[:n] = x[:n]
    return out


def apply_edits(arrays: dict, edits: list) -> dict:
    """The model of a staged version: ``edits`` applied in order to copies of ``arrays``.

    Parameters
    ----------
    arrays : dict of str to numpy.ndarray
        The staged-from version's arrays (not modified).
    edits : list of tuple
        ``("set", var, region, value)`` or ``("resize", var, n0)``.

    Returns
    -------
    dict of str to numpy.ndarray
        The staged version's arrays.
    """
    out = {k: v.copy() for k, v in arrays.items()}
    for edit in edits:
        if edit[0] == "resize":
            _, var, n0 = edit
            out[var] = resized(out[var], n0, FILL[var])
        else:
            _, var, region, value = edit
            out[var][region] = value
    return out


def stage_edits(g, edits: list) -> None:
    """Apply ``edits`` to a ``stage_version`` group.

    Parameters
    ----------
    g : InMemoryGroup
        The staged version.
    edits : list of tuple
        As :func:`apply_edits`.
    """
    for edit in edits:
        if edit[0] == "resize":
            _, var, n0 = edit
            g[var].resize((n0, *g[var].shape[1:]))
        else:
            _, var, region, value = edit
            g[var][region] = value


def stage_edits_xr(staged: xr.Dataset, edits: list) -> None:
    """Apply point edits (no resizes) to a Dataset from ``ds.vhdf5.stage()``.

    Parameters
    ----------
    staged : xarray.Dataset
        The staged Dataset.
    edits : list of tuple
        ``("set", var, region, value)`` only.
    """
    for _, var, region, value in edits:
        staged[var].variable[region] = value


def _changed(present_x, x, present_b, b) -> np.ndarray:
    """Points where ``x`` differs from the base ``b`` (presence or bits; NaN equals NaN)."""
    n = x.dtype.itemsize
    same_value = (x.view(np.uint8).reshape(*x.shape, n) == b.view(np.uint8).reshape(*b.shape, n)).all(-1)
    if x.dtype.kind == "f":
        same_value |= np.isnan(x) & np.isnan(b)
    return (present_x != present_b) | (present_x & present_b & ~same_value)


def merge3(base: np.ndarray, theirs: np.ndarray, ours: np.ndarray, fill) -> np.ndarray | None:
    """The three-way merge of one dataset, as the README states its rules.

    A point changed on one side takes that side's value; changed on both to
    the same value (NaN equals NaN, otherwise bit for bit) is fine, to
    different values is a conflict (a point present on one side only
    included). An array resized on one side takes that side's shape; resized
    on both to different shapes is a conflict.

    Parameters
    ----------
    base, theirs, ours : numpy.ndarray
        The staged-from version's array, the current version's, the staged one.
    fill : scalar
        Value of absent points (only used as padding; presence is tracked).

    Returns
    -------
    numpy.ndarray or None
        The merged array, or None for a conflict.
    """
    union = tuple(max(n) for n in zip(base.shape, theirs.shape, ours.shape))

    def pad(x):
        present = np.zeros(union, bool)
        values = np.full(union, fill, dtype=x.dtype)
        region = tuple(slice(0, n) for n in x.shape)
        present[region] = True
        values[region] = x
        return present, values

    (pb, vb), (pt, vt), (po, vo) = pad(base), pad(theirs), pad(ours)
    ch_t, ch_o = _changed(pt, vt, pb, vb), _changed(po, vo, pb, vb)
    agree = ~_changed(pt, vt, po, vo)
    resized_t, resized_o = theirs.shape != base.shape, ours.shape != base.shape
    if (ch_t & ch_o & ~agree).any() or (resized_t and resized_o and theirs.shape != ours.shape):
        return None
    shape = theirs.shape if resized_t else ours.shape
    return np.where(ch_o, vo, vt)[tuple(slice(0, n) for n in shape)]


def merge_versions(base: dict, theirs: dict, ours: dict) -> dict | None:
    """:func:`merge3` of every dataset; None if any conflicts (then nothing is committed).

    Parameters
    ----------
    base, theirs, ours : dict of str to numpy.ndarray
        The arrays of the three versions.

    Returns
    -------
    dict of str to numpy.ndarray or None
        The merged version's arrays.
    """
    out = {}
    for var in base:
        merged = merge3(base[var], theirs[var], ours[var], FILL[var])
        if merged is None:
            return None
        out[var] = merged
    return out


def after_delete(versions: dict, current: str, doomed: set) -> dict:
    """The model after ``delete_versions``: children re-parented to their nearest surviving ancestor.

    Parameters
    ----------
    versions : dict of str to Version
        The versions, in commit order.
    current : str
        The current version (never deleted here).
    doomed : set of str
        The names deleted.

    Returns
    -------
    dict of str to Version
        The surviving versions, in commit order.
    """
    assert current not in doomed

    def surviving(name: str) -> str:
        while name in doomed:
            name = versions[name].parent
        return name

    return {n: Version(surviving(v.parent), v.arrays) for n, v in versions.items() if n not in doomed}


# -- drawing edits ---------------------------------------------------------------------------


def draw_edits(data, arrays: dict, *, resize: bool = True, n_max: int = 4) -> list:
    """Draw a list of edits valid in order on ``arrays``.

    Parameters
    ----------
    data : hypothesis.strategies.DataObject
        Where to draw from.
    arrays : dict of str to numpy.ndarray
        The staged-from version's arrays (their shapes).
    resize : bool
        Whether resizes along axis 0 may be drawn.
    n_max : int
        At most this many edits.

    Returns
    -------
    list of tuple
        ``("set", var, region, value)`` (a region of 1 to 5 points per axis,
        one chunk or several) or ``("resize", var, n0)``.
    """
    edits = data.draw(
        edit_sequences(
            {k: v.shape for k, v in arrays.items()},
            {"a": FLOATS, "b": INTS},
            max_edits=n_max,
            max_width=5,
            resize_one_in=5 if resize else 0,
            resize_axes=(0,),
            max_side=MAX_ROWS,
            max_growth=6,
        ),
        label="edits",
    )
    return [("resize", e[1], e[2][0]) if e[0] == "resize" else e for e in edits]


# -- the machine -----------------------------------------------------------------------------


def _in_child(work) -> None:
    """Run ``work()`` in a forked child (another process) and wait for it.

    Parameters
    ----------
    work : callable
        What the child does; it must return (exit status 0).
    """
    status = in_forked_child(work)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child failed: status {status}"


class VersionDagMachine(RuleBasedStateMachine):
    """A real versioned file and its model, driven by random rules (see the module)."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="vdag")
        self.path = os.path.join(self.dir, "dag.h5")
        self.versions: dict[str, Version] = {}
        self.current = FIRST
        self.names = 0
        self.steps = 0
        self.f = None  # the main handle
        self.vf = None
        self.kind = "h5py"  # of the main handle: "h5py", "open_file" or "none"
        self.reader = None
        STATS["examples"] += 1

    # -- handles -------------------------------------------------------------------------------
    def _name(self) -> str:
        self.names += 1
        return f"c{self.names}"

    def _close_main(self) -> None:
        if self.f is not None:
            self.f.close()
        self.f = self.vf = None

    def _main(self) -> VersionedHDF5File:
        """The main handle's VersionedHDF5File, opened (as ``kind``) if closed."""
        if self.f is None:
            _reading.close_read_handles(self.path)
            self.f = open_file(self.path) if self.kind == "open_file" else h5py.File(self.path, "a")
            self.vf = VersionedHDF5File(self.f)
        return self.vf

    def _writer(self):
        """``(vf, done)``: the main handle, or (kind ``none``) one opened for one mutation."""
        if self.kind != "none":
            return self._main(), lambda: None
        _reading.close_read_handles(self.path)
        f = open_file(self.path)
        return VersionedHDF5File(f), f.close

    def _h5_reader(self) -> h5py.File:
        """A fresh read-only h5py handle (libhdf5's lock off while ``open_file`` holds its own)."""
        if self.f is not None and self.kind == "open_file":
            return h5py.File(self.path, "r", locking=False)
        if self.f is None:
            _reading.close_read_handles(self.path)
        return h5py.File(self.path, "r")

    def _add(self, name: str, parent: str, arrays: dict, make_current: bool) -> None:
        self.versions[name] = Version(parent, arrays)
        if make_current:
            self.current = name

    def _source(self, data) -> str:
        """The current version mostly, else any version."""
        if data.draw(st.integers(0, 2), label="from current?"):
            return self.current
        return data.draw(st.sampled_from(sorted(self.versions)), label="source")

    # -- rules -----------------------------------------------------------------------------------
    @initialize(kind=st.sampled_from(["h5py", "open_file", "none"]))
    def create(self, kind):
        ds = xr.Dataset(
            {
                "a": (("x",), np.arange(10.0)),
                "b": (("y", "z"), np.arange(24, dtype="i4").reshape(4, 6)),
            }
        )
        ds["a"].encoding["chunks"] = CHUNKS["a"]
        ds["b"].encoding["chunks"] = CHUNKS["b"]
        ds.vhdf5.commit("v0", path=self.path)
        self._add("v0", FIRST, {"a": ds["a"].values.copy(), "b": ds["b"].values.copy()}, True)
        self.kind = kind
        self.reader = VersionedHDF5File.open(self.path)

    @rule(data=st.data())
    def commit(self, data):
        source = self._source(data)
        make_current = data.draw(st.booleans(), label="make_current")
        edits = draw_edits(data, self.versions[source].arrays)
        name = self._name()
        vf, done = self._writer()
        try:
            with vf.stage_version(name, prev_version=source, make_current=make_current) as g:
                stage_edits(g, edits)
        finally:
            done()
        self._add(name, source, apply_edits(self.versions[source].arrays, edits), make_current)
        STATS["commits"] += 1

    def _commit_other(self, data, how: str) -> None:
        """Commit version B through another handle than the one staging A; the model gets B.

        Parameters
        ----------
        data : hypothesis.strategies.DataObject
            B's staged-from version, ``make_current`` and edits are drawn from it.
        how : {"open_file", "h5py", "process", "xarray"}
            A new ``open_file`` handle, a new plain ``h5py.File`` (mode "a"), a
            forked process with ``open_file``, or another xarray stage (no resize).
        """
        source = self._source(data)
        make_current = data.draw(st.integers(0, 3), label="B make_current") > 0
        edits = draw_edits(data, self.versions[source].arrays, resize=how != "xarray")
        name = self._name()

        def by_h5py(f):
            try:
                with VersionedHDF5File(f).stage_version(name, prev_version=source, make_current=make_current) as g:
                    stage_edits(g, edits)
            finally:
                f.close()

        if how == "open_file":
            by_h5py(open_file(self.path))
        elif how == "h5py":
            _reading.close_read_handles(self.path)  # a stage's read-only handle would refuse mode "a"
            by_h5py(h5py.File(self.path, "a"))
        elif how == "process":
            _in_child(lambda: by_h5py(open_file(self.path)))
        else:
            with xr.open_dataset(self.path, engine="vhdf5", version=source) as ds:
                staged = ds.vhdf5.stage()
                stage_edits_xr(staged, edits)
                # edits may be none; a stage of a version that is not current branches from it
                staged.vhdf5.commit(name, make_current=make_current, allow_empty=True, force=source != self.current)
        self._add(name, source, apply_edits(self.versions[source].arrays, edits), make_current)
        STATS[f"other commits ({how})"] += 1

    def _expect(
        self, commit, name: str, source: str, ours: dict, merge_from: str | None, make_current: bool, what: str
    ) -> None:
        """Run ``commit()`` (of version A), check it does what the model says, update the model.

        Parameters
        ----------
        commit : callable
            Commits A.
        name, source : str
            A's name and staged-from version.
        ours : dict of str to numpy.ndarray
            A's arrays as staged.
        merge_from : str or None
            The version A merges onto (None: A commits on ``source``).
        make_current : bool
            A's ``make_current``.
        what : str
            For the statistics.
        """
        if merge_from is None:
            commit()
            self._add(name, source, ours, make_current)
            STATS[f"{what}: committed on its parent"] += 1
            return
        merged = merge_versions(self.versions[source].arrays, self.versions[merge_from].arrays, ours)
        if merged is None:
            with pytest.raises(ConflictError):
                commit()
            STATS[f"{what}: ConflictError"] += 1
            return
        commit()
        self._add(name, merge_from, merged, make_current)
        STATS[f"{what}: merged"] += 1

    def _stale(self, data, rebase: bool) -> None:
        """Stage A, commit B through another handle (most times), then commit A.

        Parameters
        ----------
        data : hypothesis.strategies.DataObject
            Where the rest is drawn from.
        rebase : bool
            Commit A with ``rebase=True`` (merge onto the current version).
        """
        level = data.draw(st.sampled_from(["xarray", "xarray", "h5py"]), label="A staged through")
        source = self._source(data)
        name = self._name()
        what = f"{'rebase' if rebase else 'stale'} {level}"
        if level == "h5py":
            self._stale_h5py(data, rebase, source, name, what)
            return
        self._close_main()  # the xarray commits open the file for writing themselves
        head = source  # a staged commit must land on the version it was staged from
        with xr.open_dataset(self.path, engine="vhdf5", version=source) as ds:
            staged = ds.vhdf5.stage()
        edits = draw_edits(data, self.versions[source].arrays, resize=False)
        stage_edits_xr(staged, edits)
        ours = apply_edits(self.versions[source].arrays, edits)
        if data.draw(st.integers(0, 4), label="B committed") > 0:
            how = data.draw(st.sampled_from(["open_file", "h5py", "xarray", "process"]), label="B through")
            self._commit_other(data, how)
        make_current = data.draw(st.integers(0, 3), label="A make_current") > 0

        def commit(**kwargs):
            # the model keeps versions that change nothing (drawn edits may be none)
            return staged.vhdf5.commit(name, make_current=make_current, allow_empty=True, **kwargs)

        # The staged commit compares the current version with the staged-from one.
        if self.current != head and not rebase:
            with pytest.raises(StaleVersionError) as info:
                commit()
            assert not isinstance(info.value, ConflictError)
            STATS[f"{what}: StaleVersionError"] += 1
            if data.draw(st.booleans(), label="then force"):
                commit(force=True)  # a branch from the staged-from version
                self._add(name, source, ours, make_current)
                STATS[f"{what}: then force=True"] += 1
            return
        merge_from = self.current if self.current != head else None
        self._expect(lambda: commit(rebase=rebase), name, source, ours, merge_from, make_current, what)

    def _stale_h5py(self, data, rebase: bool, source: str, name: str, what: str) -> None:
        """A staged with ``stage_version`` on a plain h5py handle, B through a second one meanwhile.

        In this process only: libhdf5's lock on the first handle keeps out
        ``open_file``, xarray commits and other processes.
        """
        if self.kind == "h5py":
            vf, done = self._main(), lambda: None
        else:
            self._close_main()
            _reading.close_read_handles(self.path)
            f = h5py.File(self.path, "a")
            vf, done = VersionedHDF5File(f), f.close
        make_current = data.draw(st.booleans(), label="A make_current")
        edits = draw_edits(data, self.versions[source].arrays)
        ours = apply_edits(self.versions[source].arrays, edits)
        other = data.draw(st.integers(0, 4), label="B committed") > 0
        try:
            stage = vf.stage_version(name, prev_version=source, make_current=make_current, rebase=rebase)
            g = stage.__enter__()
            try:
                stage_edits(g, edits)
                if other:
                    self._commit_other(data, "h5py")
            except BaseException as exc:
                stage.__exit__(type(exc), exc, exc.__traceback__)
                raise
            # Without rebase, versioned-hdf5's semantics: A commits on its prev_version,
            # whatever was committed meanwhile. With rebase=True, A merges onto the current
            # version whenever that is not the staged-from one.
            merge_from = self.current if rebase and self.current != source else None
            self._expect(lambda: stage.__exit__(None, None, None), name, source, ours, merge_from, make_current, what)
        finally:
            done()

    @rule(rebase=st.booleans(), data=st.data())
    def stale_or_rebase_commit(self, rebase, data):
        # One rule for both (not two): hypothesis' swarm testing would leave one out of many runs.
        self._stale(data, rebase=rebase)

    @precondition(lambda self: len(self.versions) > 1)
    @rule(data=st.data())
    def delete(self, data):
        candidates = sorted(n for n in self.versions if n != self.current)
        # Empty too: finishes an interrupted deletion and compacts every dataset
        # (test_delete_nothing_keeps_the_netcdf_dimension_scales).
        doomed = data.draw(
            st.lists(st.sampled_from(candidates), min_size=0, max_size=len(candidates), unique=True), label="doomed"
        )
        vf, done = self._writer()
        try:
            vf.delete_versions(doomed)
        finally:
            done()
        self.versions = after_delete(self.versions, self.current, set(doomed))
        STATS["deletes"] += 1
        STATS["versions deleted"] += len(doomed)

    @rule(kind=st.sampled_from(["h5py", "open_file", "none"]), reader=st.booleans())
    def reopen(self, kind, reader):
        self._close_main()
        self.kind = kind
        if kind != "none":
            self._main()
        if reader:
            self.reader.close()
            self.reader = VersionedHDF5File.open(self.path)
        STATS["reopens"] += 1

    @rule(data=st.data())
    def kill_commit(self, data):
        self._kill(data, "commit")

    @precondition(lambda self: len(self.versions) > 1)
    @rule(data=st.data())
    def kill_delete(self, data):
        self._kill(data, "delete")

    def _kill(self, data, kind: str) -> None:
        """A forked child commits or deletes through ``open_file(p, io=KillAtIO(n))``; check what is left.

        Parameters
        ----------
        data : hypothesis.strategies.DataObject
            Where n, the mutation and the reads are drawn from.
        kind : {"commit", "delete"}
            The mutation the child runs.
        """
        self._close_main()
        _reading.close_read_handles(self.path)
        candidates = sorted(n for n in self.versions if n != self.current)
        if kind == "commit":
            n = data.draw(st.integers(1, 70), label="kill at write")
            source = self._source(data)
            make_current = data.draw(st.booleans(), label="make_current")
            edits = draw_edits(data, self.versions[source].arrays)
            name = self._name()

            def mutate(vf):
                with vf.stage_version(name, prev_version=source, make_current=make_current) as g:
                    stage_edits(g, edits)
        else:
            n = data.draw(st.integers(1, 200), label="kill at write")
            doomed = data.draw(
                st.lists(st.sampled_from(candidates), min_size=1, max_size=len(candidates), unique=True), label="doomed"
            )

            def mutate(vf):
                vf.delete_versions(doomed)

        def work():
            io = KillAtIO(n)
            f = open_file(self.path, io=io)
            vf = VersionedHDF5File(f)
            io.arm()
            mutate(vf)
            f.close()

        status = in_forked_child(work)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        completed = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert killed or completed, f"the child failed: status {status}"
        STATS[f"kill {kind}: {'killed' if killed else 'completed'}"] += 1

        # Before any rollback: the long-lived reader still reads every earlier version whole.
        if data.draw(st.booleans(), label="read before rollback"):
            for v, version in self.versions.items():
                if kind == "delete" and v in doomed:
                    continue  # may be gone already (the deletion was whole)
                for var, expected in version.arrays.items():
                    assert same_bits(self.reader[v][var][()], expected), (v, var)
        # The rollback, by the next opener of this package.
        opener = data.draw(st.sampled_from(["reader", "open_file", "xarray"]), label="rolled back by")
        if opener == "reader":
            VersionedHDF5File.open(self.path).close()
        elif opener == "open_file":
            open_file(self.path).close()
        else:
            xr.open_dataset(self.path, engine="vhdf5", mask_and_scale=False).close()
        assert not os.path.exists(self.path + JOURNAL_SUFFIX)
        with VersionedHDF5File.open(self.path) as fresh:
            on_disk = fresh.versions
        if kind == "commit":
            if name in on_disk:
                self._add(name, source, apply_edits(self.versions[source].arrays, edits), make_current)
            assert completed <= (name in on_disk), "a commit that returned is not in the file"
            STATS[f"kill commit: version {'whole' if name in on_disk else 'absent'}"] += 1
        else:
            gone = [v for v in doomed if v not in on_disk]
            assert gone in ([], doomed), f"a half-done deletion: {gone} of {doomed} gone"
            assert completed <= bool(gone), "a deletion that returned left its versions"
            if gone:
                self.versions = after_delete(self.versions, self.current, set(doomed))
            STATS[f"kill delete: {'done' if gone else 'rolled back'}"] += 1

    # -- invariants ------------------------------------------------------------------------------
    def _check(self, vf, label: str) -> None:
        """Check a reader against the model: versions (in order), current, parents, arrays.

        Parameters
        ----------
        vf : VersionedHDF5File or SharedVersionedFile
            The reader.
        label : str
            Names it in failures.
        """
        assert vf.versions == list(self.versions), (label, vf.versions, list(self.versions))
        assert vf.current_version == self.current, (label, vf.current_version, self.current)
        for name, version in self.versions.items():
            assert vf.version_info(name).prev_version == version.parent, (label, name)
            group = vf[name]
            for var, expected in version.arrays.items():
                got = group[var][()]
                assert same_bits(got, expected), (label, name, var, got, expected)

    @invariant()
    def no_journal(self):
        assert not os.path.exists(self.path + JOURNAL_SUFFIX)

    @invariant()
    def every_version_reads_as_the_model(self):
        if not self.versions:
            return
        self.steps += 1
        with self._h5_reader() as f:
            self._check(VersionedHDF5File(f), "h5py.File(p, 'r')")
        if self.vf is not None:
            self._check(self.vf, f"main handle ({self.kind})")
        self._check(self.reader, "VersionedHDF5File.open (long-lived)")
        names = list(self.versions)
        for name in dict.fromkeys([self.current, names[self.steps % len(names)]]):
            with xr.open_dataset(self.path, engine="vhdf5", version=name, mask_and_scale=False) as ds:
                for var, expected in self.versions[name].arrays.items():
                    assert same_bits(ds[var].values, expected), ("xarray", name, var)

    def teardown(self):
        STATS["steps"] += self.steps
        try:
            self._close_main()
            if self.reader is not None:
                self.reader.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _run(max_examples: int, steps: int) -> None:
    """Run the machine (settings on top of the conftest profile) and print what it did.

    Parameters
    ----------
    max_examples : int
        Programs (examples) to run.
    steps : int
        Rules per program at most (``stateful_step_count``).
    """
    STATS.clear()
    run_state_machine_as_test(
        VersionDagMachine, settings=settings(max_examples=max_examples, stateful_step_count=steps, deadline=None)
    )
    print("version DAG machine:", dict(sorted(STATS.items())))
    assert STATS["examples"] >= max_examples


def test_version_dag_against_model():
    _run(max_examples=6, steps=10)  # the suite's run (under 5 minutes on 2 cores); the slow one below is long


@pytest.mark.slow
def test_version_dag_against_model_long():
    _run(max_examples=150, steps=40)


def test_delete_nothing_keeps_the_netcdf_dimension_scales(tmp_path):
    """Found by the machine: an empty deletion damages a file written from xarray.

    ``delete_versions([])`` compacts every dataset and drops ``_version_data/<name>``
    of a dataset no version holds; the dimension scales (``x`` here) map
    ``/_version_data/__netcdf_dimensions__/raw_data``, a name no version holds, so
    it is dropped: ``vhdf5 check`` then reports version ``v0`` damaged, ``x``
    reads the fill value, and a staged xarray commit raises ``KeyError: 'x'``.
    """
    from xarray_vhdf5._versions.check import check_file

    p = tmp_path / "dims.h5"
    xr.Dataset({"a": (("x",), np.arange(10.0))}).vhdf5.commit("v0", path=p)
    with h5py.File(p, "a") as f:
        VersionedHDF5File(f).delete_versions([])
    with h5py.File(p, "r") as f:
        assert "__netcdf_dimensions__" in f["_version_data"]
    assert not check_file(p).errors
    staged = xr.open_dataset(p, engine="vhdf5").vhdf5.stage()
    assert staged.vhdf5.commit("v1", allow_empty=True) == "v1"


def test_a_version_committed_by_another_handle_while_staging_is_listed(tmp_path):
    """Found by the machine: the staging VersionedHDF5File loses a version committed meanwhile.

    B is committed through a second handle while A is staged (no ``rebase``). A's
    commit appends A to its object's cached version list (which lacks B) and
    records the versions group's state after A, so the list is never read
    again: ``vf.versions`` misses B and ``vf["B"]`` raises ``VersionNotFoundError``
    (a new ``VersionedHDF5File`` on the same file lists B).
    """
    p = tmp_path / "two.h5"
    with h5py.File(p, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.arange(4.0), chunks=(2,))
        with vf.stage_version("A") as g:
            g["x"][0] = 1.0
            with h5py.File(p, "a") as f2:
                with VersionedHDF5File(f2).stage_version("B", prev_version="v0") as g2:
                    g2["x"][1] = 2.0
        assert VersionedHDF5File(f).versions == ["v0", "B", "A"]  # a new object sees B
        assert vf.versions == ["v0", "B", "A"]


def test_a_plain_h5py_reader_of_an_interrupted_commit_gets_corrupt_file_error(tmp_path):
    """Found with a broken copy of the machine (no rollback before the h5py reader).

    A commit through ``open_file`` is SIGKILLed at its 1st, 2nd, ... write. While its
    journal is there, ``VersionedHDF5File(h5py.File(p, "r"))`` is documented to raise
    ``CorruptFileError`` (``versions.mutation.note_opened``: "a commit was interrupted
    and left its journal"); at some kill points it raises libhdf5's ``KeyError``
    ("addr overflow") from reading the versions group instead.
    """
    from xarray_vhdf5.errors import CorruptFileError

    base = tmp_path / "base.h5"
    f = open_file(base)
    try:
        with VersionedHDF5File(f).stage_version("v0") as g:
            g.create_dataset("a", data=np.arange(10.0), chunks=(4,))
    finally:
        f.close()
    step = 1 if os.environ.get("VHDF5_EVERY_KILL") else 2  # every other write: the suite's 5 minutes
    for n in range(1, 200, step):
        p = tmp_path / f"k{n}.h5"
        shutil.copyfile(base, p)

        def work(n=n, p=p):
            io = KillAtIO(n)
            f = open_file(p, io=io)
            vf = VersionedHDF5File(f)
            io.arm()
            with vf.stage_version("new") as g:
                g["a"][7] = 1.5
            f.close()

        status = in_forked_child(work)
        if not os.WIFSIGNALED(status):
            break  # the commit completed: every kill point was tried
        if os.path.exists(f"{p}{JOURNAL_SUFFIX}"):
            with pytest.raises(CorruptFileError):
                with h5py.File(p, "r") as f:
                    VersionedHDF5File(f)
    assert n > 3
