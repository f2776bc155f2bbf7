"""Compiled kernels (private).

Built by meson from ``_ext/<name>.pyx`` at the repository root; see the module
docstring of :mod:`xarray_vhdf5._ext.slicetools` for how they reach libhdf5.
Use them through :mod:`xarray_vhdf5.backend.transfer` and
:mod:`xarray_vhdf5.backend.chunkmap`, which validate every input.
"""
