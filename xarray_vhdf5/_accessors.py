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
"""

from __future__ import annotations

import importlib
from typing import Any

import xarray as xr

__all__ = ["ACCESSOR_MODULE", "NAME", "LazyAccessor", "install"]

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
    for owner in (xr.Dataset, xr.DataTree):
        if NAME not in vars(owner):
            setattr(owner, NAME, LazyAccessor(owner))
