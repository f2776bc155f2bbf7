"""Stage one dataset of a committed version for editing, outside a ``stage_version`` tree.

``VersionedHDF5File.stage_version`` stages a whole version as an
:class:`~xarray_vhdf5._wrappers.group.InMemoryGroup`, whose datasets build
their :class:`~xarray_vhdf5._staging.StagedChangesArray` on first write. The
xarray layer (``ds.vhdf5.stage()``) stages single variables through a
read-only handle instead, long before the commit that writes them:
:func:`stage_committed_dataset` is that call. Both build the array from a
:class:`~xarray_vhdf5._wrappers.chunked.CommittedChunks` (where each chunk
lies in raw_data, and the hash table's state when that was read); here the
map comes from the commit's stored chunk map when there is one
(:mod:`~xarray_vhdf5._versions.chunkmaps`: the virtual dataset is not opened,
so libhdf5 decodes none of its mappings), else from the virtual dataset
(:func:`~xarray_vhdf5._backend.chunkmap.build_slab_indices_and_offsets`).

The array is then handed to the staged tree of the commit with
:meth:`~xarray_vhdf5._wrappers.chunked.InMemoryDataset.replace_array`, which
checks it is over the same raw_data and that raw_data was not rewritten
since (``table_state``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import h5py
import numpy as np

from .._backend.chunkmap import build_slab_indices_and_offsets, version_dataset_layout
from .._backend.hashtable import hash_table_id, table_state
from .._backend.layout import VERSION_DATA, VERSIONS
from .._staging import StagedChangesArray
from .._wrappers.chunked import CommittedChunks, storage_fill
from . import chunkmaps

__all__ = ["StagedDataset", "stage_committed_dataset"]


@dataclasses.dataclass(frozen=True, eq=False)
class StagedDataset:
    """A committed dataset staged for editing: its array and what describes it.

    Attributes
    ----------
    path : str
        The dataset's path inside the version (``"sst"``, ``"ocean/sst"``).
    raw_path : str
        Absolute HDF5 path of its raw_data.
    raw_data : h5py.Dataset
        Its raw_data, open in the handle it was staged through: the array's
        only base slab.
    chunk_map : CommittedChunks
        Where each chunk lies in raw_data, and the hash-table state then.
    array : StagedChangesArray
        The dataset's points as committed (no changes), stored dtype.
    dtype : numpy.dtype
        The version dataset's dtype (stored values).
    attrs : Mapping
        The version dataset's attributes (the format's ``raw_data`` and
        ``chunks`` included); look them up by name: iterating the attributes
        of a virtual dataset through h5py copies its every mapping.
    """

    path: str
    raw_path: str
    raw_data: h5py.Dataset
    chunk_map: CommittedChunks
    array: StagedChangesArray
    dtype: np.dtype
    attrs: Mapping[str, Any]

    @property
    def shape(self) -> tuple[int, ...]:
        """In points."""
        return self.chunk_map.shape

    @property
    def ndim(self) -> int:
        return len(self.chunk_map.shape)

    @property
    def table_state(self) -> tuple[int, bytes] | None:
        """raw_data's hash-table state when the map was read (None: no hash table)."""
        return self.chunk_map.table_state


def _table(raw: h5py.Dataset):
    try:
        return hash_table_id(raw)
    except KeyError:
        return None


def stage_committed_dataset(f: h5py.File, version: str, path: str) -> StagedDataset | None:
    """Stage dataset ``path`` of committed version ``version`` for editing.

    Parameters
    ----------
    f : h5py.File
        The versioned file, open (read-only is enough). Hold the file's read
        lock meanwhile (``StageFile.reading`` in the xarray layer): a commit
        of another process half written would be read torn.
    version : str
        A committed version's name (resolved already).
    path : str
        The dataset's path inside the version, relative (``"ocean/sst"``).

    Returns
    -------
    StagedDataset or None
        None when the dataset is not stored chunk by chunk in a raw_data (a
        scalar, or not a virtual dataset with the format's ``raw_data`` and
        ``chunks`` attributes).

    Raises
    ------
    KeyError
        No dataset ``path`` in ``version``.
    """
    layout = chunkmaps.load(f, version, path)
    if layout is not None:  # the commit's stored map: the virtual dataset is not opened
        raw_path = layout.attrs.get("raw_data")
        if not isinstance(raw_path, str) or not layout.shape:
            return None
        raw = layout.raw_data
        table = _table(raw)
        chunk_map = CommittedChunks.from_starts(
            layout.shape, layout.chunks, layout.starts, table_state(table) if table is not None else None
        )
        dtype, attrs = raw.dtype, layout.attrs
    else:
        dset = f[f"/{VERSION_DATA}/{VERSIONS}/{version}/{path}"]
        if not isinstance(dset, h5py.Dataset):
            raise KeyError(f"{path!r} in version {version!r} is not a dataset")
        attrs = dset.attrs
        if "raw_data" not in attrs or "chunks" not in attrs or not dset.is_virtual or dset.ndim == 0:
            return None
        chunks, raw_path = version_dataset_layout(dset)
        raw = f[raw_path]
        shape = dset.shape
        chunk_map = CommittedChunks.read(
            shape, chunks, _table(raw), lambda: build_slab_indices_and_offsets(dset, shape, chunks, raw)
        )
        dtype = dset.dtype
    array = chunk_map.over(raw, storage_fill(raw), raw.dtype)
    return StagedDataset(path, raw_path, raw, chunk_map, array, np.dtype(dtype), attrs)
