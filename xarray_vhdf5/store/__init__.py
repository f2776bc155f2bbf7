"""The zarr world's door: versions of a versioned HDF5 file as zarr-python 3 stores.

- :class:`VersionStore`: a committed version, read-only; ``xr.open_zarr(store)``
  and ``zarr.open_group(store)`` read it as ``engine="vhdf5"`` does.

This layer sits over ``versions`` and ``backend`` (and beside ``xr``); zarr-python
is imported here only.
"""

from ._codecs import FILTER_NAMES, numcodecs_pipeline, zarr_v3_codecs
from ._metadata import ArrayNode, GroupNode, json_value, version_nodes, zarr_json_documents
from ._store import VersionStore

__all__ = [
    "ArrayNode",
    "FILTER_NAMES",
    "GroupNode",
    "VersionStore",
    "json_value",
    "numcodecs_pipeline",
    "version_nodes",
    "zarr_json_documents",
    "zarr_v3_codecs",
]
