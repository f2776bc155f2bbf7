"""xarray imports the ``vhdf5`` entry point lightly, and the package's names load on first use.

xarray imports every installed engine's entry point whenever it lists its engines
(``xr.backends.list_engines()``; any ``open_dataset`` naming no built-in engine).
Each check runs in a fresh interpreter, since this one has imported the whole package.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5
import xarray_vhdf5.xr

#: The modules of the package that listing xarray's engines may import.
LIGHT = {
    "xarray_vhdf5",
    "xarray_vhdf5._accessors",
    "xarray_vhdf5._lazy",
    "xarray_vhdf5.errors",
    "xarray_vhdf5.xr",
    "xarray_vhdf5.xr._engine",
}


def _run(code: str, cwd) -> dict:
    """Run ``code`` in a fresh interpreter (warnings as errors); return what it printed last, as JSON."""
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_listing_engines_loads_only_the_entry_point(tmp_path):
    got = _run(
        """
        import json, sys
        import xarray
        engines = xarray.backends.list_engines()
        print(json.dumps({
            "vhdf5": type(engines["vhdf5"]).__name__,
            "modules": sorted(m for m in sys.modules if m.split(".")[0] == "xarray_vhdf5"),
        }))
        """,
        tmp_path,
    )
    assert got["vhdf5"] == "VHDF5BackendEntrypoint"
    assert set(got["modules"]) <= LIGHT, sorted(set(got["modules"]) - LIGHT)


def test_the_entry_point_imports_no_h5py_nor_kernels(tmp_path):
    """The entry point, its class and ``guess_can_open`` on a file that is not HDF5 import
    neither h5py, nor the version history, nor the compiled kernels."""
    (tmp_path / "a.txt").write_text("not HDF5")
    got = _run(
        """
        import json, sys
        from xarray_vhdf5.xr._engine import VHDF5BackendEntrypoint
        can = VHDF5BackendEntrypoint().guess_can_open("a.txt")
        print(json.dumps({"can": can, "modules": sorted(sys.modules)}))
        """,
        tmp_path,
    )
    assert got["can"] is False
    heavy = [
        m
        for m in got["modules"]
        if m.split(".")[0] == "h5py"
        or m.startswith(("xarray_vhdf5._ext", "xarray_vhdf5._versions", "xarray_vhdf5._backend"))
    ]
    assert heavy == []


def test_import_registers_the_accessors(tmp_path):
    """After the engines are listed, ``import xarray_vhdf5`` gives ``.vhdf5`` on Datasets and
    DataTrees: the real accessor classes, registered without xarray's override warning."""
    got = _run(
        """
        import json
        import xarray as xr
        xr.backends.list_engines()
        import xarray_vhdf5
        from xarray_vhdf5.xr._accessor import VHDF5DatasetAccessor, VHDF5DataTreeAccessor
        print(json.dumps({
            "dataset": type(xr.Dataset().vhdf5) is VHDF5DatasetAccessor,
            "class": xr.Dataset.vhdf5 is VHDF5DatasetAccessor,
            "tree": type(xr.DataTree().vhdf5) is VHDF5DataTreeAccessor,
            "version": xr.Dataset().vhdf5.version,
        }))
        """,
        tmp_path,
    )
    assert got == {"dataset": True, "class": True, "tree": True, "version": None}


def test_accessor_module_imported_directly_replaces_the_stand_in(tmp_path):
    """The accessor module imported before any ``.vhdf5`` access registers silently (``-W error``)."""
    got = _run(
        """
        import json
        import xarray as xr
        import xarray_vhdf5.xr._accessor as accessor
        print(json.dumps({
            "dataset": type(xr.Dataset().vhdf5) is accessor.VHDF5DatasetAccessor,
            "tree": xr.DataTree.vhdf5 is accessor.VHDF5DataTreeAccessor,
        }))
        """,
        tmp_path,
    )
    assert got == {"dataset": True, "tree": True}


def test_opened_by_the_engine_alone_has_the_accessor(tmp_path):
    """A user who only imports xarray and opens a file with ``engine="vhdf5"`` gets ``ds.vhdf5``."""
    path = tmp_path / "a.h5"
    xr.Dataset({"t": (("x",), np.arange(4.0))}).vhdf5.commit("v1", path=path)
    got = _run(
        """
        import json
        import xarray as xr
        with xr.open_dataset("a.h5", engine="vhdf5") as ds:
            print(json.dumps({"version": ds.vhdf5.version, "t": ds["t"].values.tolist()}))
        """,
        tmp_path,
    )
    assert got == {"version": "v1", "t": [0.0, 1.0, 2.0, 3.0]}


@pytest.mark.parametrize("module", [xarray_vhdf5, xarray_vhdf5.xr], ids=lambda m: m.__name__)
def test_every_public_name_resolves(module):
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name


def test_lazy_names_are_the_defining_modules_objects():
    from xarray_vhdf5._versions.file import VersionedHDF5File
    from xarray_vhdf5.xr._engine import VHDF5BackendEntrypoint
    from xarray_vhdf5.xr._stacked import open_versions

    assert xarray_vhdf5.VersionedHDF5File is VersionedHDF5File
    assert xarray_vhdf5.VHDF5BackendEntrypoint is VHDF5BackendEntrypoint
    assert xarray_vhdf5.xr.open_versions is open_versions


def test_import_before_xarray_registers_on_xarrays_import(tmp_path):
    """``import xarray_vhdf5`` does not import xarray; the accessors appear once xarray is imported
    (also through a submodule first), silently (``-W error``)."""
    got = _run(
        """
        import json, sys
        import xarray_vhdf5
        before = "xarray" in sys.modules
        import xarray.coding.times
        import xarray as xr
        from xarray_vhdf5.xr._accessor import VHDF5DatasetAccessor, VHDF5DataTreeAccessor
        print(json.dumps({
            "before": before,
            "dataset": type(xr.Dataset().vhdf5) is VHDF5DatasetAccessor,
            "tree": xr.DataTree.vhdf5 is VHDF5DataTreeAccessor,
            "finders": sum(type(f).__name__ == "_AfterXarrayImport" for f in sys.meta_path),
        }))
        """,
        tmp_path,
    )
    assert got == {"before": False, "dataset": True, "tree": True, "finders": 0}


def test_log_command_imports_neither_xarray_nor_pandas(tmp_path):
    """``vhdf5 log`` loads only what it needs: its time is mostly imports otherwise (issue 19)."""
    path = tmp_path / "a.h5"
    xr.Dataset({"t": (("x",), np.arange(4.0))}).vhdf5.commit("v1", path=path)
    got = _run(
        """
        import json, sys, contextlib, io
        from xarray_vhdf5.cli import cli
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                cli(["log", "a.h5"])
            except SystemExit as exit:
                code = exit.code
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("xarray", "pandas", "zarr", "dask"))
        ours = sorted(m for m in sys.modules if m.startswith(("xarray_vhdf5.resplit", "xarray_vhdf5.xr")))
        print(json.dumps({"code": code, "v1": "v1" in out.getvalue(), "heavy": heavy, "ours": ours}))
        """,
        tmp_path,
    )
    assert got == {"code": 0, "v1": True, "heavy": [], "ours": []}
