"""Test kit shipped with xarray_vhdf5 (requires hypothesis, a test dependency).

- :mod:`xarray_vhdf5.testing.strategies`: hypothesis strategies for shapes,
  chunkings, dtypes, indices and values;
- :mod:`xarray_vhdf5.testing.layouts`: base slabs laid out like
  versioned-hdf5's ``raw_data`` (shuffled, deduplicated, with unmapped
  chunks and garbage padding), in numpy or HDF5;
- :mod:`xarray_vhdf5.testing.snapshot`: everything a versioned file stores as
  plain values, compared path by path (the parity tests against versioned-hdf5).

Import the submodules explicitly; importing this package imports nothing.
"""

__all__ = ["layouts", "snapshot", "strategies"]
