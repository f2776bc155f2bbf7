"""The plans of :class:`~xarray_vhdf5.staging.array.StagedChangesArray`.

versioned-hdf5's ``staged_changes.rst``, "Plans" and "General plans algorithm".

Each plan decides everything an operation will do - which slabs to append,
which slice pairs to transfer between which slabs, how ``slab_indices`` and
``slab_offsets`` change, which slabs to drop - from shapes, chunks and
indices alone.  Plans never touch data; the array executes them.  They
pretty-print their instructions (``repr``) for debugging::

    SetItemPlan<value_shape=(3, 3), value_view=[:, :], append 2 empty slabs,
    7 slice transfers among 3 slab pairs, drop 0 slabs>
      slabs.append(np.empty((6, 2)))  # slabs[2]
      slabs.append(np.empty((2, 2)))  # slabs[3]
      # 3 transfers from slabs[1] to slabs[2]
      slabs[2][0:2, 0:2] = slabs[1][10:12, 0:2]
      ...

==============  ==================================================================
GetItemPlan     ``__getitem__``: every selected chunk -> ``out``.
SetItemPlan     ``__setitem__``: partially selected chunks on the full / base slabs
                are copied to a new staged slab; wholly selected ones get a fresh
                slab; then the value is written into the staged chunks.
ResizePlan      ``resize()``: new chunks on the full slab; enlarged edge chunks
                moved off the base slabs and their new area filled from the full
                slab.
LoadPlan        ``load()``: every chunk on a base slab -> one new staged slab.
==============  ==================================================================

The commit's view, :class:`~xarray_vhdf5.staging.changes.ChangesPlan`, lives in
:mod:`xarray_vhdf5.staging.changes`.

The helpers they share, and the slab layout (:func:`slab_shape`), are in
:mod:`xarray_vhdf5.staging.plan_common`.
"""

from .item_plans import GetItemPlan, SetItemPlan
from .plan_common import slab_shape
from .shape_plans import LoadPlan, ResizePlan

__all__ = [
    "GetItemPlan",
    "LoadPlan",
    "ResizePlan",
    "SetItemPlan",
    "slab_shape",
]
