"""Type stub of the compiled chunk reader (``_ext/preadtools.pyx``); private.

Use :meth:`xarray_vhdf5._backend.manifest.ChunkManifest.read`, which checks
the boxes and keeps the pure-Python twin (``_read_unfiltered_reference``).
"""

import numpy as np
import numpy.typing as npt

__all__ = ["read_chunks_into"]

def read_chunks_into(
    fd: int,
    out: np.ndarray,
    chunks: tuple[int, ...],
    offsets: npt.NDArray[np.uint64],
    in_start: npt.NDArray[np.intp],
    out_start: npt.NDArray[np.intp],
    counts: npt.NDArray[np.intp],
) -> int:
    """Read whole stored chunks and put their boxes into ``out``; -1, or the chunk the file ended inside."""
