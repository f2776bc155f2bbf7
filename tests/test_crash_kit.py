"""The kill harness's workloads run whole without a kill, and its verifier finds them whole.

The kills themselves are slow (``tests/test_concurrency_slow.py``, ``-m slow``); this
checks, in the fast suite, that each of this package's kinds does what its model says:
the child loop runs a few operations, then :func:`verify_file` and :func:`classify`
count no damage, and ``read_versions`` (the map log) reads every version as each
version's own read does.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from xarray_vhdf5.testing import _crash as crash
from xarray_vhdf5.testing._crash_child import (
    TEMPLATE_VERSIONS,
    X_SHAPE,
    apply_edit,
    build_template,
    child_loop,
    commit_edit,
    family,
    template_model,
)
from xarray_vhdf5.testing._crash_verify import verify_file
from xarray_vhdf5.testing._kill_report import classify, data_hash
from xarray_vhdf5.testing._processes import Ledger


def test_an_append_edit_adds_a_row_and_leaves_y():
    base = template_model()["v0"]
    grown = apply_edit(base, commit_edit(3, append=True))
    assert grown["x"].shape == (X_SHAPE[0] + 1, X_SHAPE[1])
    np.testing.assert_array_equal(grown["x"][:-1], base["x"])
    assert (grown["x"][-1] == commit_edit(3)["value"]).all()
    assert grown["y"] is base["y"]


@pytest.mark.parametrize("kind", ["xr_append", "held_open"])
def test_a_kind_run_without_a_kill_is_whole(tmp_path, kind):
    path, ledger = str(tmp_path / "f.h5"), str(tmp_path / "ledger")
    build_template(path, "xarray_vhdf5", family(kind))
    model = template_model()
    current = f"v{TEMPLATE_VERSIONS - 1}"
    child_loop("xarray_vhdf5", kind, path, ledger, threading.Event(), 0, [], {"chunks": [5, 25]}, 0, max_ops=4)
    returned = set()
    for record in Ledger(ledger).read():
        if record["phase"] == "failed":
            pytest.fail(record["error"])
        if record["phase"] == "done":
            assert record["parent"] == current
            model[record["version"]] = apply_edit(model[record["parent"]], record)
            current = record["version"]
            returned.add(current)
    assert len(returned) == 4
    hashes = {v: data_hash(a["x"], a["y"]) for v, a in model.items()}
    result = verify_file("xarray_vhdf5", kind, path, list(model)[-2:], None)
    assert set(result["history_hashes"]) == set(model) and result["history_hashes"] == result["hashes"]
    counts = classify(hashes, hashes, returned, set(), None, None, result, None)
    damage = {k: v for k, v in counts.items() if k != "problems" and k not in crash.INFORMATIVE_COLUMNS and v}
    assert damage == {} and counts["problems"] == []


def test_the_engine_reading_a_version_libhdf5_cannot_is_judged_against_the_model():
    """A torn chunk index (found by the kill harness): VersionedHDF5File cannot read a version the
    engine reads as byte ranges. Right values are not a misread; wrong ones still are."""
    from xarray_vhdf5.testing._crash_verify import blank_verdict

    model = {"v1": "h1", "v2": "h2"}
    result = blank_verdict()
    result.update(
        opened=True,
        versions=["v1", "v2"],
        current="v2",
        hashes={"v1": "h1"},
        read_errors={"v2": "OSError: wrong B-tree signature"},
        xr_opened=True,
        xr_hashes={"v2": "h2", "<current>": "h2"},
        check_ok=True,
    )
    right = classify(model, model, {"v1", "v2"}, set(), None, None, result, None)
    assert right["xr_wrong"] == 0 and right["versions_altered"] == 1  # libhdf5's failure still counts
    result["xr_hashes"] = {"v2": "other", "<current>": "other"}
    wrong = classify(model, model, {"v1", "v2"}, set(), None, None, result, None)
    assert wrong["xr_wrong"] == 2
