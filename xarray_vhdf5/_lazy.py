"""Names a package loads on first use (PEP 562), shared by ``xarray_vhdf5`` and ``xarray_vhdf5.xr``."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["lazy_attribute"]


def lazy_attribute(package: str, homes: Mapping[str, str], name: str) -> Any:
    """``package``'s attribute ``name``: from its module in ``homes``, else the submodule ``name``.

    Parameters
    ----------
    package : str
        The package's dotted name (its ``__name__``).
    homes : mapping of str to str
        Attribute name -> the module holding it, relative to ``package``.
    name : str
        The attribute asked for.

    Raises
    ------
    AttributeError
        ``name`` is neither in ``homes`` nor a submodule of ``package``.
    """
    home = homes.get(name)
    if home is None:  # a submodule not imported yet
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(f"{package}.{home}"), name)
