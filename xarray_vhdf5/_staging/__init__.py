"""The staging engine: a numpy-like array that holds every change in memory.

:class:`StagedChangesArray` implements versioned-hdf5's ``staged_changes.rst`` ("Staging
changes in memory"); a version's dataset is opened as one with
``base_slabs=[raw_data]`` and the slab arrays of
:func:`xarray_vhdf5._backend.chunkmap.build_slab_indices_and_offsets`.

Layers, bottom up::

    casting.py            cast_for_storage: a written value in the dataset's dtype, or refused
    reference_kernels.py  pure-Python plan-building kernels (the oracle) and their constants
    read_basic.py         reference of the fused __getitem__ fast path (compiled read_basic)
    kernels.py            plan-building kernels: dispatch compiled _ext/plantools vs references
    chunk_mapper.py       IndexChunkMapper: the selection along one axis, by chunk
    _normalised_index.py  IndexMapping: a normalised index and the views back to numpy
    index_elements.py     Ellipsis expansion, array indices validated with ndindex
    _map_index.py         map_index: a user's index -> its IndexMapping (one
                          IndexChunkMapper per axis)
    transfer_plan.py      TransferPlan: slice pairs per (source, destination); execution
    _plan_base.py         what the plans share: the overview, helpers, base classes
    item_plans.py         GetItemPlan, SetItemPlan
    shape_plans.py        LoadPlan, ResizePlan
    changes.py            ChangesPlan: what a commit needs
    array.py              StagedChangesArray
"""

from ._map_index import IndexChunkMapper, IndexMapping, map_index
from ._plan_base import slab_shape
from .array import StagedChangesArray
from .casting import cast_for_storage
from .changes import ChangedChunk, ChangesPlan
from .item_plans import GetItemPlan, SetItemPlan
from .shape_plans import LoadPlan, ResizePlan
from .transfer_plan import OUT, VALUE, Transfer, TransferPlan

__all__ = [
    "OUT",
    "VALUE",
    "ChangedChunk",
    "ChangesPlan",
    "GetItemPlan",
    "IndexChunkMapper",
    "IndexMapping",
    "LoadPlan",
    "ResizePlan",
    "SetItemPlan",
    "StagedChangesArray",
    "Transfer",
    "TransferPlan",
    "cast_for_storage",
    "map_index",
    "slab_shape",
]
