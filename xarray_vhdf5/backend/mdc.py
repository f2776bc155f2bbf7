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
it writes them: HDF5 User Guide, "Metadata Caching in HDF5", and
``H5Fset_mdc_config``), then restores the configuration it found.
:class:`~xarray_vhdf5.VersionedHDF5File` calls it when :class:`TrimSchedule`
says: often enough to bound the memory, seldom enough to cost at most a
twentieth of the time spent committing.
"""

from __future__ import annotations

from h5py import h5f

__all__ = ["TrimSchedule", "trim_metadata_cache"]

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
    finally:
        config.set_initial_size = True
        config.initial_size = max(config.min_size, min(size, config.max_size))
        fid.set_mdc_config(config)
    return fid.get_mdc_size()[3]


class TrimSchedule:
    """When to trim: within a time budget, and at the latest every ``max_commits`` commits.

    A trim costs what flushing the file costs (about as much as one small
    commit), so trimming after every few commits would slow small commits by
    a tenth or more. The schedule trims once the commits since the last trim
    took ``1 / budget`` times as long as that trim did (at least
    ``min_commits`` commits), or after ``max_commits`` commits whatever they
    cost: trims take at most about ``budget`` of the committing time, and at
    most ``max_commits`` versions' virtual datasets are held between two trims.

    Parameters
    ----------
    max_commits : int
        Trim at the latest after this many commits (> 0).
    budget : float
        The share of committing time trims may take (0 < budget < 1).
    min_commits : int
        Never trim more often than every this many commits.
    """

    def __init__(self, max_commits: int = 64, budget: float = 0.05, min_commits: int = 8):
        if max_commits < 1 or not 0 < budget < 1 or min_commits < 1:
            raise ValueError(
                f"max_commits and min_commits must be positive and 0 < budget < 1, got "
                f"{max_commits}, {min_commits} and {budget}"
            )
        self.max_commits = max_commits
        self.budget = budget
        self.min_commits = min(min_commits, max_commits)
        self.commits = 0
        self.seconds = 0.0
        self.last_trim_seconds = 0.0

    def committed(self, seconds: float) -> bool:
        """Count a commit that took ``seconds``; True when a trim is due now."""
        self.commits += 1
        self.seconds += seconds
        if self.commits >= self.max_commits:
            return True
        return self.commits >= self.min_commits and self.seconds * self.budget >= self.last_trim_seconds

    def trimmed(self, seconds: float) -> None:
        """A trim took ``seconds``: start counting again."""
        self.commits = 0
        self.seconds = 0.0
        self.last_trim_seconds = seconds
