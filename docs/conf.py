"""Sphinx configuration of the xarray_vhdf5 documentation.

Build (from the repository root, with ``pip install ".[docs]"``)::

    sphinx-build -W --keep-going -b html docs docs/_build/html

Every script in ``docs/examples/`` runs once per build (``run_examples`` below), in a
fresh temporary directory; what it prints and the files it writes into its output
folder land in ``docs/_generated/``, which the pages include. A script that raises
fails the build, so every example shown on the site is code that ran.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import shutil
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import xarray_vhdf5

DOCS = Path(__file__).resolve().parent
EXAMPLES = DOCS / "examples"
GENERATED = DOCS / "_generated"

project = "xarray_vhdf5"
author = "the xarray_vhdf5 developers"
copyright = "2026, the xarray_vhdf5 developers"
release = version = xarray_vhdf5.__version__

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx_click",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated/*.txt", "examples", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "inherited-members": False}
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

# No network at build time: intersphinx inventories are not fetched. The mapping stays
# empty so that roles like :class:`numpy.ndarray` render as plain literals.
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}

nitpicky = False
html_theme = "alabaster"
html_static_path: list[str] = []
templates_path = ["_templates"]
html_theme_options = {"description": "Git-like versions of HDF5 files, native to xarray"}


def run_examples(app) -> None:
    """Run every ``docs/examples/*.py`` script; store its output for the pages.

    Each script runs in a fresh temporary working directory with the environment
    variable ``VHDF5_DOCS_OUT`` naming ``docs/_generated/<script stem>/``, where it
    may write figures and tables. Its standard output goes to
    ``docs/_generated/<script stem>.txt``. Any exception fails the build.
    """
    GENERATED.mkdir(exist_ok=True)
    for script in sorted(EXAMPLES.glob("*.py")):
        out_dir = GENERATED / script.stem
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        printed = io.StringIO()
        old_cwd = os.getcwd()
        old_env = os.environ.get("VHDF5_DOCS_OUT")
        with tempfile.TemporaryDirectory(prefix="vhdf5-docs-") as work:
            os.chdir(work)
            os.environ["VHDF5_DOCS_OUT"] = str(out_dir)
            try:
                with contextlib.redirect_stdout(printed):
                    runpy.run_path(str(script), run_name="__main__")
            finally:
                os.chdir(old_cwd)
                if old_env is None:
                    os.environ.pop("VHDF5_DOCS_OUT", None)
                else:
                    os.environ["VHDF5_DOCS_OUT"] = old_env
        (GENERATED / f"{script.stem}.txt").write_text(printed.getvalue())
        print(f"docs example {script.name}: ran", file=sys.stderr)


def setup(app) -> None:
    app.connect("builder-inited", run_examples)
