"""Every dotted ``xarray_vhdf5.…`` name written in a docstring or in ``docs/*.md`` resolves.

Splitting a module moves names; a cross-reference to the old place
(``:func:`history.lookup_version``` once
``lookup_version`` moved to ``_versions/lookup.py``) then dangles, and Sphinx
only warns. Here each name is imported (the longest importable module prefix,
then ``getattr`` for the rest), from the docstrings of the package, the tests
and the benchmarks (``ast``: module, class and function docstrings) and from the
whole text of ``docs/*.md``, code blocks included (their examples name public
objects, which must exist too).

A function or class named through a private module (a dotted path with a
``_`` segment) must also be defined in that module, or listed in its
``__all__``: a module that merely imports the name for its own use is an old
location, not a home. Attributes a class sets on its instances
(``self.name = ...`` in its source) count as its attributes.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"xarray_vhdf5(?:\.[A-Za-z_]\w*)+")
DOCSTRING_OWNERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstring_names(path: Path) -> set[str]:
    """Dotted ``xarray_vhdf5`` names in the docstrings of the Python file ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, DOCSTRING_OWNERS):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                names.update(DOTTED.findall(doc))
    return names


@cache
def instance_attributes(cls: type) -> frozenset[str]:
    """Names assigned as ``self.<name>`` in the source of ``cls`` and of its bases."""
    names: set[str] = set()
    for klass in cls.__mro__:
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):  # builtins, compiled classes
            continue
        names.update(re.findall(r"\bself\.([A-Za-z_]\w*)\s*(?::[^=\n]+)?=(?!=)", source))
    return frozenset(names)


def dangling(name: str) -> str | None:
    """Why dotted ``name`` does not resolve to its home, or None when it does."""
    parts = name.split(".")
    for stop in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:stop]))
        except ImportError:
            continue
        break
    else:  # pragma: no cover - "xarray_vhdf5" itself always imports
        return "no importable prefix"
    obj: object = module
    for i, attr in enumerate(parts[stop:]):
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
            continue
        if inspect.isclass(obj) and attr in instance_attributes(obj) and i == len(parts) - stop - 1:
            return None  # an instance attribute, the last part of the name
        return f"{'.'.join(parts[: stop + i])} has no attribute {attr!r}"
    if stop < len(parts):
        first = getattr(module, parts[stop])
        private = any(segment.startswith("_") for segment in module.__name__.split("."))
        is_package = hasattr(module, "__path__")
        if (
            private
            and not is_package
            and (inspect.isfunction(first) or inspect.isclass(first))
            and first.__module__ != module.__name__
            and parts[stop] not in getattr(module, "__all__", ())
        ):
            return f"{parts[stop]} is defined in {first.__module__}, not in {module.__name__}"
    return None


def sources() -> list[Path]:
    files = [*sorted((ROOT / "xarray_vhdf5").rglob("*.py")), *sorted((ROOT / "tests").glob("*.py"))]
    files += sorted((ROOT / "benchmarks").glob("*.py"))
    return files + sorted((ROOT / "docs").glob("*.md"))


def names_in(path: Path) -> set[str]:
    if path.suffix == ".md":
        return set(DOTTED.findall(path.read_text(encoding="utf-8")))
    return docstring_names(path)


SOURCES = [p for p in sources() if names_in(p)]


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES])
def test_dotted_names_resolve(path: Path) -> None:
    bad = {name: why for name in sorted(names_in(path)) if (why := dangling(name)) is not None}
    assert not bad, f"dangling references in {path.relative_to(ROOT)}: {bad}"


def test_the_check_sees_each_kind_of_dangling_name() -> None:
    # Resolving names: the module's own function, a re-export through a public package,
    # a method, an instance attribute.
    assert dangling("xarray_vhdf5._versions.lookup.lookup_version") is None
    assert dangling("xarray_vhdf5.VersionedHDF5File") is None
    assert dangling("xarray_vhdf5._wrappers.chunked.InMemoryDataset.replace_array") is None
    assert dangling("xarray_vhdf5._wrappers.group.InMemoryGroup.chunk_map_cache") is None
    # No such module or attribute.
    assert "has no attribute 'no_such_name'" in str(dangling("xarray_vhdf5._versions.lookup.no_such_name"))
    assert "has no attribute 'index_mapper'" in str(dangling("xarray_vhdf5._staging.index_mapper.map_index"))
    # A moved function the old module still imports for its own use.
    assert dangling("xarray_vhdf5._versions.history.changed_attrs") == (
        "changed_attrs is defined in xarray_vhdf5._versions.states, not in xarray_vhdf5._versions.history"
    )


def test_docstring_names_reads_docstrings_only(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        '"""See :func:`xarray_vhdf5.a.b`."""\n'
        "# xarray_vhdf5.in_a_comment\n"
        "def f():\n"
        '    """Uses ``xarray_vhdf5.c``."""\n'
        '    return "xarray_vhdf5.in_a_string"\n'
    )
    assert docstring_names(src) == {"xarray_vhdf5.a.b", "xarray_vhdf5.c"}
