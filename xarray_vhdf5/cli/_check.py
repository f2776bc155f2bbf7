"""``vhdf5 check FILE [--rehash] [--repair]``: diagnose a damaged file, and roll it back.

The checks are :func:`xarray_vhdf5._versions.check.check_file`'s; ``--repair``
is :func:`xarray_vhdf5._versions.repair.repair`. Both run in a forked child
process (:func:`run_check`, :func:`run_repair`): libhdf5 crashes the process
on some damaged metadata, and the command must still say what is damaged.
"""

from __future__ import annotations

import contextlib
import faulthandler
import sys
from collections.abc import Callable

import click

from ..errors import NotHDF5Error, VHDF5Error

__all__ = ["CHECK_HELP", "MAX_CRASHES", "check", "progress_bar", "run_check", "run_repair"]

#: The ``vhdf5 check`` help text.
CHECK_HELP = """Check FILE for damage and list every problem found.

\b
Checked: the versions group and each version's attributes, the version
index, every prev_version chain, each dataset's raw_data and hash table,
and each version's virtual datasets: their mappings must be whole chunks
inside raw_data, on chunks HDF5 stored, that the hash table knows.
--rehash also reads every chunk a version maps and compares its SHA-256
with the hash table's digest (reads all the data once).

\b
The last whole version is the newest version along the current version's
ancestry whose every dataset checks out. --repair rolls back to it: the
current version moves there, damaged versions and leftovers of interrupted
commits are deleted (their children re-parented), hash-table rows of
damaged chunks are retired and the version index is rebuilt. Versions that
check out are kept. Run with --rehash to find damaged chunks first.

\b
libhdf5 crashes the process on some damaged metadata: the check runs in a
child process, and again without the object it crashed on (an error).

\b
Exit status: 0 when no error was found (warnings allowed), 1 when errors
were found (also when --repair then fixed them) or FILE cannot be checked,
2 for a usage error.
"""

#: Rehashing shows no bar before this many seconds (small files finish first).
BAR_DELAY = 1.0


def progress_bar(
    enabled: bool, *, unit: str = "chunk", desc: str = "rehash"
) -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """A ``progress(done, total)`` callback drawing a tqdm bar on stderr, and a function closing it.

    Parameters
    ----------
    enabled : bool
        Draw the bar (the caller checks that stderr is a terminal). False:
        ``(None, a function doing nothing)``.
    unit, desc : str
        What the bar counts, and its label.

    Returns
    -------
    (callable or None, callable)
        The callback for ``check_file(progress=...)``, counting chunks, and the closer.
    """
    if not enabled:
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=0, unit=unit, desc=desc, file=sys.stderr, delay=BAR_DELAY, leave=False)

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return update, bar.close


#: Most objects skipped after libhdf5 crashed the checking process on them, before giving up.
MAX_CRASHES = 16


def _send_check(conn, path: str, rehash: bool, skip: tuple[str, ...]) -> None:
    """In the child: run the check, sending trace, progress, then the report (or the exception)."""
    from .._versions.check import check_file

    faulthandler.disable()  # a crash is expected here, and reported by the parent

    try:
        report = check_file(
            path,
            rehash=rehash,
            skip=skip,
            progress=lambda done, total: conn.send(("progress", done, total)),
            trace=lambda where: conn.send(("trace", where)),
        )
    except BaseException as exc:  # noqa: BLE001 sent to the parent, which raises it again
        conn.send(_error_message(exc))
    else:
        conn.send(("done", report))
    finally:
        conn.close()


def _error_message(exc: BaseException) -> tuple[str, str, str]:
    """``("error", class name, message)``: exceptions of several builtin bases do not pickle."""
    message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return "error", type(exc).__name__, message


def _rebuilt(outcome: tuple[str, str, str]) -> Exception:
    """The exception a child reported, as the same class of ``xarray_vhdf5.errors`` or builtins."""
    import builtins

    from .. import errors

    _, kind, message = outcome
    cls = getattr(errors, kind, None) or getattr(builtins, kind, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except TypeError:
            pass
    return RuntimeError(f"{kind}: {message}")


def _in_child(target, args: tuple, on_message: Callable[[tuple], None]) -> tuple[tuple | None, int | None]:
    """Run ``target(conn, *args)`` in a forked process; return its last message and its exit code.

    Messages other than ``("done", ...)`` and ``("error", ...)`` go to ``on_message``.
    The outcome is None when the process died before sending one (libhdf5 crashed it).
    """
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(send, *args), daemon=True)
    proc.start()
    send.close()
    outcome = None
    try:
        while outcome is None:
            message = recv.recv()
            if message[0] in ("done", "error"):
                outcome = message
            else:
                on_message(message)
    except EOFError:
        pass
    finally:
        recv.close()
        proc.join()
    return outcome, proc.exitcode


def _died(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            import signal

            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exited with status {code}"


def run_check(path: str, rehash: bool, progress: Callable[[int, int], None] | None):
    """:func:`~xarray_vhdf5._versions.check.check_file` in a child process, surviving libhdf5 crashes.

    libhdf5 dereferences some damaged metadata without checking it and crashes
    the process (a segmentation fault). The check runs in a forked child that
    traces each object before reading it; when the child dies, the check runs
    again with the object it died on skipped (reported as an error, its
    versions damaged), up to :data:`MAX_CRASHES` objects. Where ``fork`` is
    not available, the check runs in this process.

    Raises
    ------
    NotHDF5Error, NotVersionedError, OSError
        As ``check_file`` (raised in the child, passed on).
    """
    import multiprocessing

    from .._versions.check import ERROR, CheckReport, Problem, check_file

    if "fork" not in multiprocessing.get_all_start_methods():
        return check_file(path, rehash=rehash, progress=progress)
    skip: list[str] = []
    while True:
        last: list[str] = []

        def on_message(message: tuple, last: list[str] = last) -> None:
            if message[0] == "trace":
                last[:] = [message[1]]
            elif message[0] == "progress" and progress is not None:
                progress(message[1], message[2])

        outcome, code = _in_child(_send_check, (path, rehash, tuple(skip)), on_message)
        if outcome is not None:
            if outcome[0] == "error":
                raise _rebuilt(outcome)
            return outcome[1]
        where = last[0] if last else None
        if where is None or where in skip or len(skip) >= MAX_CRASHES:
            report = CheckReport(path, crashed=skip + ([where] if where else []))
            what = f"reading {where}" if where else "opening the file"
            report.problems.append(
                Problem(
                    ERROR,
                    f"libhdf5 crashed the checking process {what} (it {_died(code)}); nothing more could be checked",
                )
            )
            return report
        skip.append(where)


def _send_repair(conn, path: str, report) -> None:
    """In the child: repair the file, sending what was done (or the exception)."""
    faulthandler.disable()

    try:
        done = _repair_path(path, report)
    except BaseException as exc:  # noqa: BLE001 sent to the parent, which raises it again
        conn.send(_error_message(exc))
    else:
        conn.send(("done", done))
    finally:
        conn.close()


def _repair_path(path: str, report):
    """Open ``path`` writable, repair it and close it; a failure to close is noted, not raised.

    Opened with :func:`~xarray_vhdf5._versions.mutation.open_file`: each step
    of the repair is journaled like a commit, so a repair killed halfway
    leaves the file as the last finished step left it (a relink killed
    between its two link moves would otherwise leave no ``_version_data``).
    Closing can fail after a damaged object was unlinked: libhdf5 frees its
    storage when the last handle goes, and cannot read it. What the repair
    wrote was flushed by then.
    """
    from .._versions.check import check_file
    from .._versions.chunkcheck import DAMAGE_ERRORS, describe
    from .._versions.mutation import open_file
    from .._versions.openrepair import extend_to_recorded_end, move_end_past_chunks
    from .._versions.repair import repair

    extended = extend_to_recorded_end(path)  # libhdf5 opens no file shorter than its superblock says
    if extended:  # the report was of the file libhdf5 refused; every chunk read, so none reads zeros
        report = check_file(path, rehash=True)
    move_end_past_chunks(path)  # the journaled handle cannot move the end of allocation
    f = open_file(path, "r+")
    try:
        done = repair(f, report)
    except BaseException:
        with contextlib.suppress(*DAMAGE_ERRORS):
            f.close()
        raise
    done.extended = extended
    try:
        f.close()
    except DAMAGE_ERRORS as exc:
        done.notes.append(f"closing the file failed ({describe(exc)}): the space of a damaged object may stay unused")
    return done


def _roll_back(path: str) -> bool:
    """Roll back the journaled step a crashed repair left (:func:`~xarray_vhdf5._versions.journal.recover`).

    Under the file's ``WRITE`` lock, as the journaled openers do; True when
    there was one.
    """
    from .._versions.journal import recover
    from .._versions.locking import file_locks

    with file_locks(path).writing():
        return recover(path)


def run_repair(path: str, report):
    """:func:`~xarray_vhdf5._versions.repair.repair` in a child process (see :func:`run_check`).

    Raises
    ------
    click.ClickException
        libhdf5 crashed the repairing process: every step of a repair is
        journaled, and the step it died in is rolled back here (as the next
        writer of this package would), so the file is as the last finished
        step left it, for every reader (plain h5py and netCDF tools do not
        read the journal).
    """
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return _repair_path(path, report)
    outcome, code = _in_child(_send_repair, (path, report), lambda message: None)
    if outcome is None:
        rolled = _roll_back(path)
        raise click.ClickException(
            f"repair failed: libhdf5 crashed the repairing process (it {_died(code)}); "
            + ("the step it was in was rolled back, so " if rolled else "")
            + "the file is as the last finished step of the repair left it: run vhdf5 check again"
        )
    if outcome[0] == "error":
        raise _rebuilt(outcome)
    return outcome[1]


@click.command(help=CHECK_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--rehash", is_flag=True, help="Also read every mapped chunk and compare its SHA-256 with the hash table."
)
@click.option(
    "--repair",
    "do_repair",
    is_flag=True,
    help="Roll back to the last whole version: delete damaged versions and leftovers of interrupted commits.",
)
def check(file: str, rehash: bool, do_repair: bool) -> None:
    """``vhdf5 check FILE`` (its help text is :data:`CHECK_HELP`)."""
    from ._main import _NOT_VERSIONED_HINT

    progress, close = progress_bar(rehash and sys.stderr.isatty())
    try:
        try:
            report = run_check(file, rehash, progress)
        finally:
            close()
    except NotHDF5Error as err:
        raise click.ClickException(f"{err}, {_NOT_VERSIONED_HINT}") from None
    except (VHDF5Error, OSError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(str(report))
    if do_repair:
        if not report.needs_repair:
            click.echo("repair: nothing to repair")
        else:
            try:
                done = run_repair(file, report)
                after = run_check(file, rehash, None)
            except (VHDF5Error, OSError, ValueError) as err:
                raise click.ClickException(f"repair failed: {err}") from None
            except (RuntimeError, KeyError, TypeError, IndexError) as err:  # libhdf5 on damaged metadata
                raise click.ClickException(
                    f"repair failed: libhdf5 says {type(err).__name__}: {err}; the file is as the last "
                    "finished step of the repair left it (each leaves a valid file)"
                ) from None
            click.echo("repair:")
            click.echo("\n".join(f"  {line}" for line in str(done).splitlines()))
            click.echo("after repair:")
            click.echo("\n".join(f"  {line}" for line in str(after).splitlines()))
    click.get_current_context().exit(0 if report.ok else 1)
