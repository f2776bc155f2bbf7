"""Processes that contend for one file: a busy reader, a resolver, a committer, a stager.

Each loop runs in its own process (``multiprocessing``, :func:`~xarray_vhdf5.testing._processes.process_context`)
beside another, so that the tests of :mod:`xarray_vhdf5._versions.locking` can
show who waits for whom: readers opening or resolving versions back to back
must not starve a writer, a writer committing back to back must not starve
them, stages and staged commits racing a writer must never fail nor drop its
commits. Results go to a JSON file the test reads.
"""

from __future__ import annotations

import time

from ._processes import describe_error, write_json

__all__ = ["commit_loop", "open_loop", "resolve_loop", "stage_loop", "staged_commit_loop"]


def open_loop(path: str, stop, pause: float = 0.0) -> None:
    """Open and close ``xr.open_dataset(path, engine="vhdf5")`` until ``stop`` is set (a busy reader).

    Parameters
    ----------
    path : str
        The file.
    stop : multiprocessing.Event
        Ends the loop.
    pause : float
        Seconds to sleep after each open.
    """
    import xarray as xr

    import xarray_vhdf5  # noqa: F401

    while not stop.is_set():
        xr.open_dataset(path, engine="vhdf5").close()
        if pause:
            time.sleep(pause)


def resolve_loop(path: str, stop, hold: float = 0.01) -> None:
    """Hold the file's ``WRITE`` lock shared for ``hold`` seconds, again and again, until ``stop`` is set.

    What a reader resolving versions back to back does to the lock (each
    ``xr.open_dataset`` or ``VersionedHDF5File.open`` call holds it shared for
    milliseconds), without the work in between.

    Parameters
    ----------
    path : str
        The file.
    stop : multiprocessing.Event
        Ends the loop.
    hold : float
        Seconds per holding.
    """
    from .._versions.locking import file_locks

    locks = file_locks(path)
    while not stop.is_set():
        with locks.resolving():
            time.sleep(hold)


def commit_loop(path: str, stop, pause: float = 0.0, timeout: float = 60.0) -> None:
    """Commit one point of ``x`` per version through ``open_for_writing``, back to back, until ``stop`` is set.

    Parameters
    ----------
    path : str
        A file whose versions hold a 1-d ``x`` of at least 1000 points.
    stop : multiprocessing.Event
        Ends the loop.
    pause : float
        Seconds to sleep between commits.
    timeout : float
        ``open_for_writing``'s timeout (this writer waits that long for others).
    """
    from .._versions.file import VersionedHDF5File
    from .._versions.mutation import open_for_writing

    i = 0
    while not stop.is_set():
        with open_for_writing(path, timeout=timeout) as f, VersionedHDF5File(f).stage_version(f"loop{i}") as g:
            g["x"][i % 1000] = float(i)
        i += 1
        if pause:
            time.sleep(pause)


def stage_loop(path: str, seconds: float, result_path: str) -> None:
    """Open, stage and edit one point of ``x``, again and again, until a failure or ``seconds`` passed.

    ``xr.open_dataset(path, engine="vhdf5")``, ``.vhdf5.stage()``,
    ``staged["x"][1] = 5.0``; nothing is committed. Meant to run beside
    :func:`commit_loop`, in its own process (a failure may crash it). Writes
    ``{"tries": n, "failures": [message, ...]}`` (JSON) to ``result_path``;
    ``FileBusyError`` (a writer held the file past the timeout) is not a failure.

    Parameters
    ----------
    path : str
        A file whose versions hold a 1-d ``x``.
    seconds : float
        The longest the loop runs.
    result_path : str
        Where the result goes.
    """
    import xarray as xr

    import xarray_vhdf5  # noqa: F401
    from xarray_vhdf5.errors import FileBusyError

    failures: list[str] = []
    tries = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not failures:
        tries += 1
        try:
            with xr.open_dataset(path, engine="vhdf5") as ds:
                staged = ds.vhdf5.stage()
                staged["x"][1] = 5.0
                staged.close()
        except FileBusyError:
            pass
        except Exception as exc:  # noqa: BLE001 - what the caller looks for
            failures.append(f"try {tries}: {describe_error(exc, where=True)}")
    write_json(result_path, {"tries": tries, "failures": failures})


def staged_commit_loop(path: str, seconds: float, result_path: str) -> None:
    """Open, stage, edit the last point of ``x`` and commit, again and again, for ``seconds``.

    Meant to run beside :func:`commit_loop`, in its own process: each commit
    must land on the file's current version or raise ``StaleVersionError``.
    Writes ``{"landed": [names], "stale": n, "failures": [messages]}`` (JSON)
    to ``result_path``.

    Parameters
    ----------
    path : str
        A file whose versions hold a 1-d ``x`` of 1000 points.
    seconds : float
        How long the loop runs.
    result_path : str
        Where the result goes.
    """
    import xarray as xr

    import xarray_vhdf5  # noqa: F401
    from xarray_vhdf5.errors import StaleVersionError

    landed: list[str] = []
    stale = 0
    failures: list[str] = []
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        name = f"staged{i}"
        i += 1
        try:
            with xr.open_dataset(path, engine="vhdf5") as ds:
                staged = ds.vhdf5.stage()
                staged["x"][999] = float(i)
                try:
                    staged.vhdf5.commit(name)
                    landed.append(name)
                except StaleVersionError:
                    stale += 1
                staged.close()
        except Exception as exc:  # noqa: BLE001 - reported
            failures.append(f"{name}: {describe_error(exc, where=True)}")
    write_json(result_path, {"landed": landed, "stale": stale, "failures": failures[:10]})
