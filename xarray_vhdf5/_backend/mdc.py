"""Bounding what libhdf5's metadata cache holds of the virtual datasets a process creates.

libhdf5 keeps every object it creates in the file's metadata cache, decoded: a
virtual dataset with its layout, every mapping's two hyperslab selections
included (``H5D__virtual_copy_layout``, ``H5S__hyper_copy``). The cache sizes
its entries by their bytes on disk, far fewer than they take in memory, so a
process committing version after version to one open file grows by about
140 KiB a version for a (t, 180, 360) variable with chunks (8, 180, 360)
(``docs/benchmarks.md``, "File size and peak memory"); closing the file frees
it all, and ``H5garbage_collect`` or free-list limits free nothing.

:func:`trim_metadata_cache` lets the cache shrink to a few entries and grow
back: it lowers the cache's size, flushes the file (libhdf5 evicts entries as
it writes them, and evicts clean entries when it loads one: HDF5 User
Guide, "Metadata Caching in HDF5", and ``H5Fset_mdc_config``), then restores
the configuration it found.
:class:`~xarray_vhdf5.VersionedHDF5File` calls it every
``metadata_trim_every`` commits (default 256). A trim is not free: the flush
and the metadata read back afterwards cost about one small commit's time
(one-point commits trimmed every 64: about 5% slower on average), and each
flush leaves 10-20 KB of the file unused (libhdf5 gives up the unused part of
its metadata aggregators: sparse edits trimmed every 64 commits, 0.05% larger).
"""

from __future__ import annotations

from h5py import h5f, h5g

__all__ = ["trim_metadata_cache"]

#: The cache size the trim lowers to (bytes as libhdf5 counts them: on-disk sizes).
TRIM_BYTES = 64 * 1024


def trim_metadata_cache(fid: h5f.FileID, keep_bytes: int = TRIM_BYTES) -> int:
    """Evict what the file's metadata cache holds beyond ``keep_bytes``, then restore its configuration.

    Parameters
    ----------
    fid : h5py.h5f.FileID
        An open file's id (``h5py.File.id``), open for writing (a read-only
        file has nothing dirty; it is trimmed all the same).
    keep_bytes : int
        The cache size during the trim, in libhdf5's accounting (bytes of the
        entries on disk).

    Returns
    -------
    int
        Entries in the cache after the trim (``H5Fget_mdc_size``'s count).

    Raises
    ------
    RuntimeError, OSError
        h5py's errors when libhdf5 cannot write the file (e.g. a full disk);
        the cache's configuration is restored first.

    Notes
    -----
    The file is flushed (``H5Fflush``, local scope): dirty metadata and raw
    data chunks are written now rather than later, which is what costs time
    (a few milliseconds after 16 commits). The configuration restored is the
    one read before, its current size included, so the cache keeps its size
    and adaptive resizing.
    """
    config = fid.get_mdc_config()
    size = fid.get_mdc_size()[0]
    small = fid.get_mdc_config()
    small.set_initial_size = True
    small.initial_size = small.min_size = small.max_size = keep_bytes
    fid.set_mdc_config(small)
    try:
        h5f.flush(fid)
        # Entries already clean (a commit flushes the file) leave only when libhdf5 makes
        # room for an entry it loads: reading the root group's header is one.
        h5g.open(fid, b"/").get_num_objs()
    finally:
        config.set_initial_size = True
        config.initial_size = max(config.min_size, min(size, config.max_size))
        fid.set_mdc_config(config)
    return fid.get_mdc_size()[3]
