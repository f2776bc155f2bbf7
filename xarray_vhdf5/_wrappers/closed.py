"""Errors of wrappers whose h5py file was closed under them.

libhdf5 answers a read of a closed object with whatever error its call
raises (``RuntimeError: identifier is not of specified type``, a ``KeyError``
from h5py, ...). The wrappers turn them into :class:`~xarray_vhdf5.errors.ClosedFileError`
and ask whether the file is closed only once a call failed.
"""

from __future__ import annotations

import functools

from ..errors import ClosedFileError

__all__ = ["REOPEN", "RESTAGE", "closed_file_error", "reads_file"]


#: What to do about a committed version whose file was closed.
REOPEN = "reopen the file and get the version again (VersionedHDF5File(h5py.File(path))[version])"
#: What to do about a staged version whose file was closed inside the ``stage_version`` block.
RESTAGE = (
    "the file was closed inside the stage_version() block, so this version cannot be "
    "committed: reopen the file and stage it again"
)


def closed_file_error(what: str, todo: str = REOPEN) -> ClosedFileError:
    """The error for using ``what`` (e.g. "version 'v1'") once its h5py file was closed."""
    return ClosedFileError(f"cannot access {what}: its h5py file was closed; {todo}")


def reads_file(method):
    """Turn libhdf5's errors on a closed file into :class:`ClosedFileError` in ``method``.

    ``self._raise_if_closed()`` raises it when the file is closed. It is asked
    only once the h5py call failed: reads of an open file pay for one Python
    call and a ``try`` block.
    """

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception:
            self._raise_if_closed()
            raise

    return guarded
