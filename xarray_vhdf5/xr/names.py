"""How xarray's names (dimensions, encodings) are stored on a version's datasets."""

from __future__ import annotations

__all__ = ["DIMENSIONS_ATTR", "HIDDEN_VARIABLE_ATTRS", "HIDDEN_GROUP_ATTRS", "MESSAGE_ATTR", "phony_dims"]

#: Attribute listing a variable's dimension names (the convention zarr and xarray use).
DIMENSIONS_ATTR = "_ARRAY_DIMENSIONS"
#: Attributes of a version's dataset that are storage details, not variable attrs.
HIDDEN_VARIABLE_ATTRS = frozenset({DIMENSIONS_ATTR, "raw_data", "chunks"})
#: Attribute of a version group holding the commit message.
MESSAGE_ATTR = "_vhdf5_message"
#: Attributes of a version group that describe the version, not the Dataset.
HIDDEN_GROUP_ATTRS = frozenset({"committed", "prev_version", "timestamp", MESSAGE_ATTR})


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
