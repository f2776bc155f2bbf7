# Stub of the private compiled kernel _ext/vdstools.pyx (see _backend/virtual.py).
import numpy as np

def create_virtual_dataset(
    loc_id: int,
    name: bytes,
    type_id: int,
    dcpl_template: int,
    shape: tuple[int, ...],
    raw_id: int,
    src_dset_name: bytes,
    dst_start: np.ndarray,
    src_start: np.ndarray,
    count: np.ndarray,
) -> int: ...
