"""The one place the compiled kernels are imported (private).

Every module that calls a kernel of ``_ext/`` takes it from here, never from
``xarray_vhdf5._ext`` directly, so that "is it built?" is asked once and the
answer is the same everywhere. Each name below is the compiled module, or None
when it cannot be imported (not built, or libhdf5's symbols not found in
h5py's library: ``_ext/_hdf5api.pyx``). The callers then take the kernel's
pure-Python twin, which lives beside them:

==============  ===========================================  ======================================
module          used by                                      pure-Python twin
==============  ===========================================  ======================================
``slicetools``  ``transfer``, ``chunkmap``,                  ``read_many_slices_reference``,
                ``staging.transfer_plan``                    ``build_slab_indices_and_offsets_reference``
``rowtools``    ``rows``                                     h5py's low-level calls in ``rows``
``attrtools``   ``h5attrs``                                  ``h5py.h5a`` calls in ``h5attrs``
``vdstools``    ``virtual``                                  ``virtual.set_virtual_mappings``
``plantools``,  ``staging.kernels``                          ``staging.reference_kernels``,
``readtools``                                                ``staging.read_basic``
``preadtools``  ``manifest``                                 ``ChunkManifest._read_unfiltered``
==============  ===========================================  ======================================

Which of the two runs is chosen by :func:`xarray_vhdf5._backend.transfer.get_kernel_backend`
(``XARRAY_VHDF5_KERNELS``); selecting ``"cython"`` when ``slicetools`` is None
raises ImportError with :data:`slicetools_error` as its cause. The kernels all
reach libhdf5 through the one symbol table of ``_ext/_hdf5api.pyx``.
"""

from __future__ import annotations

__all__ = [
    "attrtools",
    "plantools",
    "preadtools",
    "readtools",
    "rowtools",
    "slicetools",
    "slicetools_error",
    "vdstools",
]

# A None is typed as the module (``type: ignore``) so that the callers keep the
# stubs' signatures; each of them checks for None before a call.
try:
    from .._ext import slicetools
except ImportError as exc:  # not built, or libhdf5 symbols missing
    slicetools = None  # type: ignore[assignment]
    #: Why ``slicetools`` is None (None when it imported): the cause of the
    #: ImportError raised when the compiled kernels are selected without it.
    slicetools_error: ImportError | None = exc
else:
    slicetools_error = None

try:
    from .._ext import rowtools
except ImportError:  # no compiled kernels: the h5py path (slicetools_error says why)
    rowtools = None  # type: ignore[assignment]

try:
    from .._ext import attrtools
except ImportError:  # no compiled kernels: the h5py path (slicetools_error says why)
    attrtools = None  # type: ignore[assignment]

try:
    from .._ext import vdstools
except ImportError:  # no compiled kernels: the h5py path (slicetools_error says why)
    vdstools = None  # type: ignore[assignment]

try:
    from .._ext import plantools, readtools
except ImportError:  # the plan kernels come as a pair: both, or the references for both
    plantools = readtools = None  # type: ignore[assignment]

try:
    from .._ext import preadtools
except ImportError:  # no compiled kernels: ChunkManifest._read_unfiltered reads chunk by chunk
    preadtools = None  # type: ignore[assignment]
