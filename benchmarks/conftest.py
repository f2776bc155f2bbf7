"""Shared fixtures of the benchmarks, and a ratio table printed at the end of the run.

Benchmarks record their median (seconds per round) with the ``record``
fixture, keyed by ``(group, implementation)``; the terminal summary then
prints, per group, each implementation's median and its ratio to the
group's baselines (the implementations recorded with ``baseline=True``).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest

# The benchmark files import their siblings (workloads.py, memory.py) under any
# --import-mode, the test suite's importlib included.
sys.path.insert(0, str(Path(__file__).resolve().parent))

_RESULTS: dict[str, dict[str, float]] = defaultdict(dict)
_BASELINES: dict[str, list[str]] = defaultdict(list)
_NOTES: list[str] = []


def pytest_collect_file(file_path, parent):
    """Collect ``bench_*.py`` when a directory is given (``pytest benchmarks/``).

    The project's ``python_files`` is pytest's default (``test_*.py``); files named
    on the command line are collected by pytest itself.
    """
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


@pytest.fixture
def record():
    """``record(benchmark, group, impl, baseline=False)``: keep the benchmark's median.

    Every implementation recorded with ``baseline=True`` gets a ratio column.
    """

    def _record(benchmark, group: str, impl: str, baseline: bool = False) -> None:
        stats = getattr(benchmark, "stats", None)
        if stats is None:  # --benchmark-disable
            return
        _RESULTS[group][impl] = stats.stats.median
        if baseline and impl not in _BASELINES[group]:
            _BASELINES[group].append(impl)

    return _record


@pytest.fixture
def record_value():
    """``record_value(group, impl, seconds, baseline=False)``: a time measured by the benchmark itself.

    For workloads whose measurement is not pytest-benchmark's round time (e.g.
    one commit timed inside a longer run); shown in the summary like ``record``.
    """

    def _record_value(group: str, impl: str, seconds: float, baseline: bool = False) -> None:
        _RESULTS[group][impl] = seconds
        if baseline and impl not in _BASELINES[group]:
            _BASELINES[group].append(impl)

    return _record_value


@pytest.fixture
def note():
    """``note(text)``: a line for the summary (e.g. a memory measurement)."""
    return _NOTES.append


def pytest_terminal_summary(terminalreporter):
    if not _RESULTS and not _NOTES:
        return
    tr = terminalreporter
    tr.section("medians and ratios to the baseline of each group")
    for group, results in sorted(_RESULTS.items()):
        bases = [b for b in _BASELINES[group] if b in results]
        tr.write_line(f"{group}: median ms/round" + "".join(f" | / {b}" for b in bases))
        for impl, median in sorted(results.items(), key=lambda kv: kv[1]):
            ratios = "".join(f" | {median / results[b]:7.2f}x" for b in bases)
            tr.write_line(f"    {impl:24s} {median * 1e3:10.2f}{ratios}")
    for line in _NOTES:
        tr.write_line(line)
