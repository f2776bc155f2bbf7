"""How xarray's names (dimensions, encodings) and netCDF-4's bookkeeping are stored on a version's datasets.

In the backend layer because every layer above reads them: the version log
(``versions``), the zarr store (``store``) and the xarray engine (``xr``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "DIMENSIONS_ATTR",
    "HIDDEN_GROUP_ATTRS",
    "HIDDEN_VARIABLE_ATTRS",
    "MERGE_PARENT_ATTR",
    "MESSAGE_ATTR",
    "NETCDF_DIMENSION_ATTRS",
    "NETCDF_NOT_A_VARIABLE",
    "NETCDF_REFERENCE_ATTRS",
    "SCALAR_DIM",
    "is_dimension_scale",
    "is_netcdf_dimension_only",
    "marks_netcdf_dimension_only",
    "names_dimensions",
    "phony_dims",
    "visible_attrs",
]

#: Attribute listing a variable's dimension names (the convention zarr and xarray use).
DIMENSIONS_ATTR = "_ARRAY_DIMENSIONS"
#: Attributes of a version's dataset that are storage details, not variable attrs.
HIDDEN_VARIABLE_ATTRS = frozenset({DIMENSIONS_ATTR, "raw_data", "chunks"})
#: Attribute of a version group holding the commit message.
MESSAGE_ATTR = "_vhdf5_message"
#: Attribute of a merge version's group naming the version merged into it (its second parent).
MERGE_PARENT_ATTR = "_vhdf5_merge_parent"
#: Attributes of a version group that describe the version, not the Dataset.
HIDDEN_GROUP_ATTRS = frozenset({"committed", "prev_version", "timestamp", MESSAGE_ATTR, MERGE_PARENT_ATTR})

# -- netCDF-4 bookkeeping (see ``dimscales``): written so that netCDF tools read a
# version group, hidden from the Datasets this engine returns.

#: Attributes of the HDF5 Dimension Scales API and of netCDF-4 on a version's datasets.
#: ``CLASS`` and ``NAME`` are hidden only on a dimension scale (``CLASS == "DIMENSION_SCALE"``).
NETCDF_DIMENSION_ATTRS = frozenset({"DIMENSION_LIST", "REFERENCE_LIST", "_Netcdf4Dimid", "_Netcdf4Coordinates"})
#: Those of them holding object references: slow to read (h5py's compound and
#: variable-length conversions), so readers leave their values unread until asked.
NETCDF_REFERENCE_ATTRS = frozenset({"DIMENSION_LIST", "REFERENCE_LIST"})
#: ``NAME`` prefix of a dimension scale that is not a variable (netCDF-4's "phony" scale).
NETCDF_NOT_A_VARIABLE = b"This is a netCDF dimension but not a netCDF variable."
#: Dimension that netCDF tools see on scalar variables, which the format stores as one
#: point (``_ARRAY_DIMENSIONS == []``, shape ``(1,)``); this engine shows them as 0-d.
SCALAR_DIM = "_vhdf5_scalar"


def is_dimension_scale(attrs) -> bool:
    """True if ``attrs`` (an h5py ``AttributeManager``) mark an HDF5 dimension scale."""
    value = attrs["CLASS"] if "CLASS" in attrs else None  # no KeyError raised inside h5py
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    return isinstance(value, str) and value == "DIMENSION_SCALE"


def is_netcdf_dimension_only(ds) -> bool:
    """True for a netCDF-4 dimension scale that is not a variable (an h5py dataset).

    Such datasets only carry a dimension's length for netCDF tools; the engine
    does not show them. :func:`marks_netcdf_dimension_only` of its attributes.
    """
    return marks_netcdf_dimension_only(ds.attrs)


def marks_netcdf_dimension_only(attrs) -> bool:
    """True if a dataset's attributes (an h5py ``AttributeManager``, or a dict of them as read) mark a
    netCDF-4 dimension that is not a variable: ``CLASS`` ``DIMENSION_SCALE`` and a ``NAME`` starting with
    :data:`NETCDF_NOT_A_VARIABLE`."""
    if not is_dimension_scale(attrs):
        return False
    name = attrs["NAME"] if "NAME" in attrs else b""
    if isinstance(name, str):
        name = name.encode()
    return isinstance(name, bytes) and name.startswith(NETCDF_NOT_A_VARIABLE)


def visible_attrs(attrs) -> dict:
    """The user attributes of a version's dataset (an h5py ``AttributeManager``).

    Drops the format's (``raw_data``, ``chunks``), xarray_vhdf5's
    (``_ARRAY_DIMENSIONS``) and netCDF-4's bookkeeping attributes; the values
    of hidden attributes are not read (object references are slow to read).
    """
    scale = is_dimension_scale(attrs)
    hidden = HIDDEN_VARIABLE_ATTRS | NETCDF_DIMENSION_ATTRS
    if scale:
        hidden = hidden | {"CLASS", "NAME"}
    return {key: attrs[key] for key in attrs.keys() if key not in hidden}


_PHONY = re.compile(r"phony_dim_\d+")


def names_dimensions(dims: Iterable, stored_with_names: bool) -> bool:
    """Whether a variable's dimension names are written (``_ARRAY_DIMENSIONS``) on its dataset.

    Names a reader invents for a dataset stored without any (``phony_dim_<n>``:
    :func:`phony_dims`, h5netcdf's phony dimensions) are not written for a
    dataset that had none, or for a new one: the version keeps the layout
    versioned-hdf5 gave it (no ``_ARRAY_DIMENSIONS``, no netCDF-4 dimension
    scales added to it), and readers invent them again. Any other name, a
    dataset stored with names, and a scalar (an empty list marks it) are written.

    Parameters
    ----------
    dims : iterable of str
        The variable's dimension names.
    stored_with_names : bool
        The dataset it replaces or edits had ``_ARRAY_DIMENSIONS``.
    """
    dims = [str(d) for d in dims]
    return stored_with_names or not dims or not all(_PHONY.fullmatch(d) for d in dims)


def phony_dims(shape: tuple[int, ...], dims_by_size: dict) -> tuple[str, ...]:
    """Dimension names for a dataset written without them (e.g. by versioned-hdf5).

    Axes of equal length share a name across variables (``phony_dim_0``, ...),
    like h5netcdf's phony dimensions; repeated lengths within one dataset get
    distinct names.
    """
    dims: list[str] = []
    for size in shape:
        names = dims_by_size.setdefault(size, [])
        free = [n for n in names if n not in dims]
        if free:
            dims.append(free[0])
        else:
            name = f"phony_dim_{sum(len(v) for v in dims_by_size.values())}"
            names.append(name)
            dims.append(name)
    return tuple(dims)
