"""The zarr world's door: versions of a versioned HDF5 file as zarr-python 3 stores.

- :class:`VersionStore`: a committed version, read-only; ``xr.open_zarr(store)``
  and ``zarr.open_group(store)`` read it as ``engine="vhdf5"`` does. With
  ``read_only=False``, ``ds.to_zarr(store)`` writes over the version and
  ``store.commit()`` makes a new one.
- :class:`StoreFork`: ``store.fork()``, a picklable writable handle for dask
  workers; ``store.merge(*forks)`` brings their writes back before ``commit()``.
- :func:`version_refs`: a committed version as a kerchunk reference set (Zarr v2
  metadata and byte ranges of the file), read by fsspec without libhdf5.

This layer sits over ``versions`` and ``backend`` (and beside ``xr``); zarr-python
is imported here only.
"""

from ._codecs import FILTER_NAMES, numcodecs_pipeline, zarr_v3_codecs
from ._forks import StoreFork
from ._metadata import ArrayNode, GroupNode, json_value, version_nodes, zarr_json_documents
from ._refs import UnreferencedArrayWarning, version_refs, write_refs
from ._store import VersionStore

__all__ = [
    "FILTER_NAMES",
    "ArrayNode",
    "GroupNode",
    "StoreFork",
    "UnreferencedArrayWarning",
    "VersionStore",
    "json_value",
    "numcodecs_pipeline",
    "version_nodes",
    "version_refs",
    "write_refs",
    "zarr_json_documents",
    "zarr_v3_codecs",
]
