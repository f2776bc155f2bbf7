"""Names a package loads on first use (PEP 562), shared by ``xarray_vhdf5`` and ``xarray_vhdf5.xr``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["lazy_attribute", "lazy_module"]


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


def lazy_module(
    package: str, homes: Mapping[str, str], names: Collection[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module-level ``__getattr__`` and ``__dir__`` (PEP 562) over :func:`lazy_attribute`.

    ``__dir__`` lists what the package has loaded and ``names`` (its ``__all__``).
    Use: ``__getattr__, __dir__ = lazy_module(__name__, _HOMES, __all__)``.
    """
    module = sys.modules[package]

    def __getattr__(name: str) -> Any:
        return lazy_attribute(package, homes, name)

    def __dir__() -> list[str]:
        return sorted({*vars(module), *names})

    return __getattr__, __dir__
