"""versioned-hdf5 2.6's own API tests, run against xarray_vhdf5 and against versioned-hdf5 itself.

versioned-hdf5's sdist ships ``tests/test_api.py`` and ``tests/test_replay.py``. This
script gets the sdist (``pip download``; where pip cannot prepare its metadata, which
needs HDF5's development files, the same file from the package index's JSON API, its
SHA-256 checked), unpacks the two test files with their ``conftest.py`` and ``test_data/``
into a temporary folder, and runs them twice with pytest, each in a child process:

- **reference**: ``import versioned_hdf5`` is the installed versioned-hdf5 2.6.0;
- **ours**: ``import versioned_hdf5`` is a shim package written into the temporary folder
  and put first on ``PYTHONPATH``. Its modules map versioned-hdf5's public names to
  xarray_vhdf5's (:data:`SHIM`: ``VersionedHDF5File``, ``delete_versions``,
  ``modify_metadata``, ``initialize``, the wrappers' classes, ``DATA_VERSION``, ...). Its
  private names (``replay._recreate_hashtable``, ``hashtable.Hashtable``, ...) are stubs
  that raise ``NotImplementedError``: they are versioned-hdf5's internals, which
  xarray_vhdf5 does not reproduce.

Tests that use versioned-hdf5's private internals are listed, each with its reason, in
``benchmarks/peer_suite_private.txt`` (``test id  # reason``) and left out of the count.
The count printed is: of the public tests versioned-hdf5 passes, how many pass here. The
public tests that fail here are listed in two groups: those listed, with the documented
difference that makes them fail, in ``benchmarks/peer_suite_deliberate.txt`` (same form;
they still count as failing), and the others, with the last line of their error.

Run from the repository root with the development environment active (about 2 minutes)::

    python benchmarks/peer_suite.py                 # downloads the sdist into a temp folder
    python benchmarks/peer_suite.py --sdist versioned_hdf5-2.6.0.tar.gz --keep /tmp/peer

Exit status: 0 when every public test versioned-hdf5 passes also passes here or is listed
as a deliberate difference, 1 otherwise, 2 when the sdist cannot be had (no network).
``tests/test_peer_suite_slow.py`` runs it.
What it leaves out: versioned-hdf5's other test files (staging engine, hashing, wrappers'
internals), which test its implementation rather than its API.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

VERSION = "2.6.0"
SDIST = f"versioned_hdf5-{VERSION}.tar.gz"
TEST_FILES = ("tests/test_api.py", "tests/test_replay.py")
PRIVATE_LIST = Path(__file__).with_name("peer_suite_private.txt")
DELIBERATE_LIST = Path(__file__).with_name("peer_suite_deliberate.txt")

#: The shim package: module -> source. Public names are xarray_vhdf5's; private ones raise.
SHIM = {
    "__init__": """
        from xarray_vhdf5 import VersionedHDF5File, delete_version, delete_versions, modify_metadata
        from . import backend, h5py_compat, hashtable, replay, versions, wrappers

        __version__ = "{version}"
    """,
    "_private": """
        def private(name):
            def stub(*args, **kwargs):
                raise NotImplementedError(
                    f"versioned_hdf5.{{name}} is an internal of versioned-hdf5; the shim of xarray_vhdf5 has none"
                )
            stub.__name__ = name.rsplit(".", 1)[-1]
            return stub
    """,
    "backend": """
        from xarray_vhdf5._backend import DATA_VERSION
        from xarray_vhdf5._backend.layout import DEFAULT_CHUNKS_1D
        from xarray_vhdf5._versions import initialize

        from ._private import private

        DEFAULT_CHUNK_SIZE = DEFAULT_CHUNKS_1D[0]
        rewrite_dataset = private("backend.rewrite_dataset")
    """,
    # Facts about the installed h5py and numpy, not about either package.
    "h5py_compat": """
        import h5py
        import numpy as np

        H5PY_VERSION = tuple(int(x) for x in h5py.__version__.split(".")[:3])
        HAS_NPYSTRINGS = H5PY_VERSION >= (3, 14) and np.lib.NumpyVersion(np.__version__) >= "2.0.0"
    """,
    "hashtable": """
        from ._private import private

        Hashtable = private("hashtable.Hashtable")
    """,
    "replay": """
        from xarray_vhdf5 import delete_version, delete_versions, modify_metadata

        from ._private import private

        for _name in ("_get_parent", "_recreate_hashtable", "_recreate_raw_data", "_recreate_virtual_dataset",
                      "recreate_dataset", "swap", "tmp_group"):
            globals()[_name] = private("replay." + _name)
    """,
    "versions": """
        from xarray_vhdf5._backend import TIMESTAMP_FORMAT as TIMESTAMP_FMT
        from xarray_vhdf5._backend.layout import FIRST_VERSION
        from xarray_vhdf5._versions import VersionRegistry


        def all_versions(f, *, include_first=False):
            \"\"\"Every committed version's name (and the first version's if include_first).\"\"\"
            if include_first:
                yield FIRST_VERSION
            yield from VersionRegistry(f).names()
    """,
    "wrappers": """
        from numpy.exceptions import AxisError
        from xarray_vhdf5._wrappers import (
            DatasetWrapper,
            InMemoryArrayDataset,
            InMemoryDataset,
            InMemoryGroup,
            InMemorySparseDataset,
        )
    """,
}

#: The test run's pytest configuration: versioned-hdf5's own (pyproject.toml), minus its doctests;
#: only failed tests' scratch folders kept (two runs left 1.1 GB in pytest's base folder).
PYTEST_INI = """\
[pytest]
addopts = --import-mode=importlib -p no:cacheprovider
xfail_strict = true
tmp_path_retention_policy = failed
markers =
    setup_args : kwargs for setup fixture.
    slow: slow tests
    api: api smoke tests
filterwarnings = error
"""


class SdistUnavailable(RuntimeError):
    """The sdist could be neither downloaded nor found (no network)."""


def fetch_sdist(dest: Path) -> Path:
    """versioned-hdf5's sdist in ``dest``: by ``pip download``, else from the index's JSON API.

    Raises
    ------
    SdistUnavailable
        Neither worked (the last error is chained).
    """
    target = dest / SDIST
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"versioned-hdf5=={VERSION}",
            "--no-deps",
            "--no-binary",
            "versioned-hdf5",
            "--no-build-isolation",
            "-d",
            str(dest),
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode == 0 and target.exists():
        return target
    # pip prepares the sdist's metadata, which runs meson and needs HDF5's headers: fetch the
    # same file as pip would, from the index, and check its hash.
    try:
        request = urllib.request.Request(
            "https://pypi.org/simple/versioned-hdf5/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            index = json.load(response)
        entry = next(f for f in index["files"] if f["filename"] == SDIST)
        with urllib.request.urlopen(entry["url"], timeout=120) as response:
            data = response.read()
    except (OSError, StopIteration, ValueError) as err:
        raise SdistUnavailable(f"cannot download {SDIST}: pip said {done.stderr.strip()[-300:]!r}; {err}") from err
    if hashlib.sha256(data).hexdigest() != entry["hashes"]["sha256"]:
        raise SdistUnavailable(f"{SDIST} from the index does not match its SHA-256")
    target.write_bytes(data)
    return target


def unpack(sdist: Path, dest: Path) -> Path:
    """The test files, their conftest and test data, and the pytest configuration, in ``dest/suite``."""
    suite = dest / "suite"
    prefix = f"versioned_hdf5-{VERSION}/"
    wanted = (*TEST_FILES, "tests/__init__.py", "tests/conftest.py", "test_data/")
    with tarfile.open(sdist) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.name.startswith(prefix) and m.name[len(prefix) :].startswith(wanted) and m.isfile()
        ]
        for m in members:
            m.name = m.name[len(prefix) :]
        tar.extractall(suite, members=members, filter="data")
    (suite / "pytest.ini").write_text(PYTEST_INI)
    return suite


def write_shim(dest: Path) -> Path:
    """The ``versioned_hdf5`` shim package in ``dest/shim`` (the folder to put on ``PYTHONPATH``)."""
    package = dest / "shim" / "versioned_hdf5"
    package.mkdir(parents=True, exist_ok=True)
    for module, source in SHIM.items():
        (package / f"{module}.py").write_text(textwrap.dedent(source.format(version=VERSION)).lstrip())
    return package.parent


def run_tests(suite: Path, shim: Path | None, junit: Path, extra: list[str]) -> subprocess.Popen:
    """Start pytest over the test files (``shim``: first on ``PYTHONPATH``, else the real package)."""
    env = dict(os.environ)
    env.pop("PYTHONSAFEPATH", None)
    if shim is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(shim), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *TEST_FILES,
        "-q",
        "-rN",
        "--no-header",
        "-p",
        "no:randomly",
        f"--junitxml={junit}",
        *extra,
    ]
    return subprocess.Popen(cmd, cwd=suite, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@dataclass
class Outcome:
    status: str  # passed, failed, skipped (xfail and skip)
    message: str = ""


def read_junit(path: Path) -> dict[str, Outcome]:
    """Test id (``tests/test_api.py::test_x[param]``) -> outcome, from pytest's JUnit XML."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        test_id = f"{module}.py::{case.get('name')}"
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed"
                text = (child.get("message") or child.text or "").strip().splitlines()
                message = text[-1] if text else ""
                break
            if child.tag == "skipped":
                status = "skipped"
        out[test_id] = Outcome(status, message)
    return out


def read_private(path: Path = PRIVATE_LIST) -> dict[str, str]:
    """A reviewed list: test id (or a test's name without parameters) -> why it is listed.

    ``peer_suite_private.txt`` (tests left out) by default; ``peer_suite_deliberate.txt``
    (:data:`DELIBERATE_LIST`, failures reported apart) has the same form.
    """
    private = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        test, _, reason = line.partition("#")
        private[test.strip()] = reason.strip()
    return private


def is_private(test_id: str, private: dict[str, str]) -> bool:
    return test_id in private or test_id.split("[")[0] in private


def summarize(
    reference: dict[str, Outcome],
    ours: dict[str, Outcome],
    private: dict[str, str],
    deliberate: dict[str, str] | None = None,
) -> tuple[str, bool]:
    """The printed report, and whether every public test the reference passes passes here
    or fails for a reviewed deliberate difference (``deliberate``, default :data:`DELIBERATE_LIST`)."""
    if deliberate is None:
        deliberate = read_private(DELIBERATE_LIST)
    lines = []

    def count(outcomes, tests):
        return {
            s: sum(outcomes.get(t, Outcome("missing")).status == s for t in tests)
            for s in ("passed", "failed", "skipped", "missing")
        }

    every = sorted(set(reference) | set(ours))
    public = [t for t in every if not is_private(t, private)]
    target = [t for t in public if reference.get(t, Outcome("missing")).status == "passed"]
    passing = [t for t in target if ours.get(t, Outcome("missing")).status == "passed"]
    failing = [t for t in target if t not in passing]
    for label, outcomes in (("versioned-hdf5 2.6.0", reference), ("xarray_vhdf5 (shim)", ours)):
        c_all, c_pub = count(outcomes, every), count(outcomes, public)
        lines.append(
            f"{label:22s} all {len(every)}: {c_all['passed']} passed, {c_all['failed']} failed, "
            f"{c_all['skipped']} skipped | public {len(public)}: {c_pub['passed']} passed, "
            f"{c_pub['failed']} failed, {c_pub['skipped']} skipped"
        )
    lines.append(f"private (left out, {PRIVATE_LIST.name}): {len(every) - len(public)} tests")
    lines.append(f"xarray_vhdf5 passes {len(passing)} of the {len(target)} public tests versioned-hdf5 2.6.0 passes")
    for listed, path in ((private, PRIVATE_LIST), (deliberate, DELIBERATE_LIST)):
        unlisted = [t for t in listed if not any(t == x or t == x.split("[")[0] for x in every)]
        if unlisted:
            lines.append(f"entries of {path.name} matching no test: {', '.join(unlisted)}")
    chosen = [t for t in failing if is_private(t, deliberate)]
    other = [t for t in failing if t not in chosen]
    stale = [t for t in target if t in passing and is_private(t, deliberate)]
    if stale:
        lines.append(f"listed in {DELIBERATE_LIST.name} but passing (remove them): {', '.join(stale)}")
    if chosen:
        lines.append(f"failing here for a deliberate difference ({DELIBERATE_LIST.name}): {len(chosen)}")
        lines.extend(f"  {t}: {deliberate.get(t, deliberate.get(t.split('[')[0], ''))[:200]}" for t in chosen)
    if other:
        lines.append(f"other public tests failing here: {len(other)}")
        lines.extend(f"  {t}: {ours.get(t, Outcome('missing')).message[:200]}" for t in other)
    return "\n".join(lines), not other


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, help=f"a local {SDIST} (default: download it)")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. -k name, -n 2)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="peer_suite_") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            sdist = args.sdist or fetch_sdist(work)
        except SdistUnavailable as err:
            print(err, file=sys.stderr)
            return 2
        suite = unpack(sdist, work)
        shim = write_shim(work)
        runs = {
            "reference": run_tests(suite, None, work / "reference.xml", args.pytest_args),
            "ours": run_tests(suite, shim, work / "ours.xml", args.pytest_args),
        }
        for run in runs.values():
            run.wait()
        reference, ours = read_junit(work / "reference.xml"), read_junit(work / "ours.xml")
        report, ok = summarize(reference, ours, read_private())
        print(report)
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
