"""Test kit shipped with xarray_vhdf5 (requires hypothesis, a test dependency).

- :mod:`xarray_vhdf5.testing.strategies`: hypothesis strategies for shapes,
  chunkings, dtypes, indices and values;
- :mod:`xarray_vhdf5.testing.layouts`: base slabs laid out like
  versioned-hdf5's ``raw_data`` (shuffled, deduplicated, with unmapped
  chunks and garbage padding), in numpy or HDF5;
- :mod:`xarray_vhdf5.testing.snapshot`: everything a versioned file stores as
  plain values, compared path by path (the parity tests against versioned-hdf5).

The submodules load on first use (``xarray_vhdf5.testing.strategies``, PEP 562):
importing this package imports nothing.
"""

from typing import Any

from .._lazy import lazy_attribute

__all__ = ["layouts", "snapshot", "strategies"]


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, {}, name)
