"""Compiled kernels (private).

Built by meson from ``_ext/<name>.pyx`` at the repository root. They reach
libhdf5 through one symbol table, resolved once by :mod:`._hdf5api` (its
docstring says how). Python imports them in one place,
:mod:`xarray_vhdf5._backend._kernels`, and uses them through the backend
modules that validate every input (:mod:`xarray_vhdf5._backend.transfer`,
:mod:`xarray_vhdf5._backend.chunkmap`, ...).
"""
