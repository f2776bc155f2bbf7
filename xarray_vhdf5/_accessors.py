"""The ``.vhdf5`` accessors, registered by ``import xarray_vhdf5`` and loaded on first use.

:mod:`xarray_vhdf5.xr._accessor` registers the accessors through xarray's
extension API (:func:`xarray.register_dataset_accessor`,
:func:`xarray.register_datatree_accessor`), but importing it loads the whole
package: h5py, the version history and the compiled kernels. The package's
``__init__`` runs whenever xarray lists its engines (the entry point
:mod:`xarray_vhdf5.xr._engine` lies inside the package), so it only puts a
:class:`LazyAccessor` in the accessors' place; the first ``ds.vhdf5`` (or
``xr.Dataset.vhdf5``) imports the accessor module, whose registration then
replaces it.

``import xarray_vhdf5`` does not import xarray either: where xarray is not
imported yet (the ``vhdf5`` command, h5py-level scripts), :func:`install_when_imported`
puts the stand-ins in place right after xarray's own import, whenever that
comes. Importing xarray costs 0.5-0.8 s, most of what ``vhdf5 log`` would take.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["ACCESSOR_MODULE", "NAME", "LazyAccessor", "install", "install_when_imported"]

#: The attribute the accessors live under.
NAME = "vhdf5"

#: The module whose import registers the real accessors.
ACCESSOR_MODULE = "xarray_vhdf5.xr._accessor"


class LazyAccessor:
    """Stands for the ``.vhdf5`` accessor of ``owner`` until :data:`ACCESSOR_MODULE` is imported.

    A descriptor on ``owner`` (``xarray.Dataset`` or ``xarray.DataTree``). On
    first access it removes itself and imports :data:`ACCESSOR_MODULE`, whose
    ``register_*_accessor`` call then finds the name free (so xarray warns of no
    override) and sets the real accessor, which answers this access and every
    later one. The module imported by another route while this stand-in is in
    place asks ``hasattr(owner, "vhdf5")`` before registering: this stand-in
    then removes itself and answers no, so that registration is silent too.

    Raises
    ------
    ImportError
        From the accessor module's import (e.g. the compiled kernels missing),
        on first access.
    """

    def __init__(self, owner: type, name: str = NAME):
        self.owner, self.name = owner, name

    def __get__(self, obj: Any, cls: type | None = None) -> Any:
        if vars(self.owner).get(self.name) is self:
            try:
                delattr(self.owner, self.name)
            except AttributeError:  # another thread removed it first
                pass
        importlib.import_module(ACCESSOR_MODULE)
        real = vars(self.owner).get(self.name)
        if real is None:  # the accessor module is being imported and asks whether the name is taken
            raise AttributeError(f"type object {self.owner.__name__!r} has no attribute {self.name!r} yet")
        return real.__get__(obj, cls)


def install() -> None:
    """Put a :class:`LazyAccessor` on ``xarray.Dataset`` and ``xarray.DataTree``, unless one is registered."""
    import xarray as xr

    for owner in (xr.Dataset, xr.DataTree):
        if NAME not in vars(owner):
            setattr(owner, NAME, LazyAccessor(owner))


class _AfterXarrayImport(importlib.abc.MetaPathFinder):
    """A finder that finds nothing itself: it has xarray's loader call :func:`install` after xarray's import.

    First on ``sys.meta_path``, it answers the search for ``xarray`` by leaving
    the path and asking the other finders (:func:`importlib.util.find_spec`),
    then wraps the ``exec_module`` of the loader they return (an instance made
    for this import only) so that :func:`install` runs once the module has
    executed in full. Every other name, and a search that finds no xarray, it
    leaves to the other finders.
    """

    _lock = threading.Lock()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "xarray":
            return None
        with self._lock:
            if self not in sys.meta_path:  # another thread's import took it off
                return None
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            install()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install_when_imported() -> None:
    """:func:`install` now if xarray is imported, else right after its import (a finder on ``sys.meta_path``)."""
    if "xarray" in sys.modules:
        install()
    elif not any(isinstance(f, _AfterXarrayImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterXarrayImport())
