"""Names, dtypes and constants of the on-disk format.

The layout is the one versioned-hdf5 2.6.0 writes (``docs/format.md``)::

    /_version_data/
        <dataset path>/raw_data      unique chunks, concatenated along axis 0
        <dataset path>/hash_table    one row per chunk of raw_data
        versions/                    attrs: current_version, data_version
            __first_version__/       attrs: timestamp
            <version>/               attrs: committed, prev_version, timestamp, user attrs
                <dataset>            virtual dataset, attrs: raw_data, chunks, user attrs
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BOOKKEEPING",
    "DATASET_ATTRS",
    "DATA_VERSION",
    "DEFAULT_CHUNKS_1D",
    "FIRST_VERSION",
    "HASH_TABLE_CHUNKS",
    "HASH_TABLE_DTYPE",
    "NETCDF_DIMENSIONS",
    "RESERVED_NAMES",
    "TIMESTAMP_FORMAT",
    "VERSIONS",
    "VERSION_ATTRS",
    "VERSION_DATA",
    "VERSION_INDEX",
    "dataset_data_path",
    "split_version_path",
    "version_path",
    "versions_path",
]

#: Group holding everything the format stores.
VERSION_DATA = "_version_data"
#: Group (inside VERSION_DATA) holding one group per version.
VERSIONS = "versions"
#: Name of the empty root of the version DAG.
FIRST_VERSION = "__first_version__"
#: ``data_version`` attribute written on the versions group (hash format 4).
DATA_VERSION = 4
#: UTC timestamps of versions, as strings (``2020-01-01 00:00:00.000000+0000``).
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f%z"
#: One row of a hash table: SHA-256 digest and (start, stop) rows in raw_data.
HASH_TABLE_DTYPE = np.dtype([("hash", "u1", (32,)), ("shape", "<i8", (2,))])
#: HDF5 chunk shape of the hash_table datasets this package creates, in rows (6 KB a
#: chunk, unfiltered: a commit rewrites the rows it appends in place). versioned-hdf5
#: 2.6 makes (4096,) with lzf; any chunking reads the same. Smaller chunks cost a
#: dataset of few chunks less (the first chunk is allocated whole).
HASH_TABLE_CHUNKS = (128,)
#: Chunk shape of a 1-d dataset created without ``chunks=``, in points.
DEFAULT_CHUNKS_1D = (4096,)
#: Root-level group holding this package's bookkeeping: the version index, the write
#: counters, the commit token (``_versions/bookkeeping.py``). Outside ``_version_data``, so
#: that versioned-hdf5 and whoever lists ``_version_data`` see only what versioned-hdf5 writes.
BOOKKEEPING = "__vhdf5__"
#: Where files written before the bookkeeping moved to the root kept it:
#: ``/_version_data/__vhdf5_version_index__`` (read; moved to :data:`BOOKKEEPING` by the next write).
VERSION_INDEX = "__vhdf5_version_index__"
#: The shared raw_data of netCDF-4 phony dimension scales (``xr/_dimscales.py``).
NETCDF_DIMENSIONS = "__netcdf_dimensions__"
#: Names under ``_version_data`` the format or this package use: no dataset may take them;
#: nor :data:`BOOKKEEPING`, which the root view (``_versions/rootview.py``) would otherwise link.
RESERVED_NAMES = frozenset({VERSIONS, VERSION_INDEX, NETCDF_DIMENSIONS, BOOKKEEPING})
#: Attributes of a version group that belong to the format, not to the user.
VERSION_ATTRS = frozenset({"committed", "prev_version", "timestamp"})
#: Attributes of a version's virtual dataset that belong to the format.
DATASET_ATTRS = frozenset({"raw_data", "chunks"})


def versions_path() -> str:
    """Return the absolute path of the versions group."""
    return f"/{VERSION_DATA}/{VERSIONS}"


def version_path(name: str) -> str:
    """Return the absolute path of the group of version ``name``."""
    return f"/{VERSION_DATA}/{VERSIONS}/{name}"


def dataset_data_path(name: str) -> str:
    """Return the absolute path of the group holding raw_data and hash_table of ``name``.

    ``name`` is the dataset's path inside a version (``"a"``, ``"grp/b"``).
    """
    return f"/{VERSION_DATA}/{name.strip('/')}"


def split_version_path(path: str) -> tuple[str, str] | None:
    """``(path of the version's group, version name)`` for an object inside a version, else None.

    ``path`` is an absolute HDF5 path such as ``/_version_data/versions/v1/grp/x``
    (``("/_version_data/versions/v1", "v1")``); the versioned root may be a
    subgroup of the file (``/sub/_version_data/versions/v1/x``). The first
    ``_version_data/versions`` on the path is the versioned root's.
    """
    marker = f"/{VERSION_DATA}/{VERSIONS}/"
    at = path.find(marker)
    if at < 0:
        return None
    version = path[at + len(marker) :].split("/", 1)[0]
    if not version:
        return None
    return path[: at + len(marker)] + version, version
