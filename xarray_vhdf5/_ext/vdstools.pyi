# Stub of the private compiled kernel _ext/vdstools.pyx (see backend/virtual.py).
import numpy as np

def set_virtual_mappings(
    dcpl_id: int,
    vspace_id: int,
    src_space_id: int,
    src_dset_name: bytes,
    dst_start: np.ndarray,
    src_start: np.ndarray,
    count: np.ndarray,
) -> None: ...
