"""The ``vhdf5`` xarray engine: ``xr.open_dataset(path, engine="vhdf5", version=...)``.

Implements xarray's public backend API (``BackendEntrypoint``; xarray's "How to
add a new backend" guide). xarray imports this module through the
``xarray.backends`` entry point every time it lists its engines (any
``open_dataset`` that names no built-in engine), so it imports nothing of the
package at module level: h5py, the version history and the compiled kernels
load on the first open (:mod:`~xarray_vhdf5.xr._reading` holds the machinery;
``tests/test_light_import.py`` keeps it so).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from xarray.backends import BackendEntrypoint

if TYPE_CHECKING:
    import xarray as xr

    from .._versions.registry import VersionKey

__all__ = ["BRANCH_KEY", "VHDF5BackendEntrypoint"]

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"

#: ``ds.encoding`` key naming the branch a Dataset was opened from (``version="qc"``):
#: ``ds.vhdf5.stage()`` then commits on that branch.
BRANCH_KEY = "vhdf5_branch"

#: Names this module held before its machinery moved to :mod:`~xarray_vhdf5.xr._reading`.
_MOVED = frozenset(
    {"acquire_file", "close_read_handles", "group_dataset", "open_version_group", "opened", "register_read_handle"}
)


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        from . import _reading

        return getattr(_reading, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class VHDF5BackendEntrypoint(BackendEntrypoint):
    """Open one version of a versioned HDF5 file (versioned-hdf5 format) as a Dataset.

    Use through ``xr.open_dataset(path, engine="vhdf5", version=..., group=...)``;
    ``xr.open_datatree`` and ``xr.open_groups`` open a version's whole group tree.
    """

    description = "Open any version of a versioned HDF5 (versioned-hdf5 format) file"
    url = "https://github.com/xarray-vhdf5/xarray_vhdf5"
    supports_groups = True  # open_datatree / open_groups_as_dict
    open_dataset_parameters = (
        "filename_or_obj",
        "drop_variables",
        "mask_and_scale",
        "decode_times",
        "concat_characters",
        "decode_coords",
        "use_cftime",
        "decode_timedelta",
        "version",
        "group",
        "verify",
        "as_of",
    )

    def open_dataset(
        self,
        filename_or_obj,
        *,
        drop_variables: str | Iterable[str] | None = None,
        mask_and_scale=True,
        decode_times=True,
        concat_characters=True,
        decode_coords=True,
        use_cftime=None,
        decode_timedelta=None,
        version: VersionKey = None,
        group: str | None = None,
        verify: bool = False,
        as_of=None,
    ) -> xr.Dataset:
        """Open ``version`` (default: the current one) of ``filename_or_obj`` lazily.

        Parameters
        ----------
        filename_or_obj : str, os.PathLike or binary file object
            The versioned HDF5 file.
        version : str, int, datetime, numpy.datetime64 or None
            Which version, as pandas indexes a log of versions (rules in
            :func:`~xarray_vhdf5._versions.lookup.lookup_version`):

            - None: the current version;
            - a name (``"v3"``); a string that names no version but is an ISO
              8601 time (``"2024-06-01T00:00"``; naive means UTC) or a
              datetime / numpy.datetime64: the version current at that time
              (committed at it, else the latest before it; ``as_of``);
            - an int ``n >= 0``: the (n+1)-th version from the first, in the
              order of ``ds.vhdf5.versions`` / ``vhdf5 log`` (oldest first):
              ``version=0`` is the first version, ``version=50`` the 51st;
            - an int ``-n``: the n-th ancestor of the current version along
              ``prev_version`` (``-1``: its parent), as versioned-hdf5's ``vf[-n]``.
            - a list or tuple of such keys: every one of those versions,
              stacked along a new leading ``version`` dimension
              (:func:`~xarray_vhdf5.xr._stacked.open_versions`; a path only).

            Ambiguous cases: a version *named* like a time
            (``"2024-06-01"``) is opened by its name, never as a time; to ask
            for a time then, pass a datetime. ``version=0`` here is the first
            version, whereas ``VersionedHDF5File``'s ``vf[0]`` (versioned-hdf5's
            API) is the current one and ``vf[50]`` an ``IndexError``. A position
            past the last version, a time before the first version, ``-n``
            past the oldest ancestor, and a string that is neither a name nor a
            time raise :class:`~xarray_vhdf5.errors.VersionNotFoundError`
            (a ``KeyError``, ``ValueError`` and ``IndexError``) saying what
            exists.
        group : str, optional
            A group inside the version (default its root).
        verify : bool
            Re-hash every chunk as it is read (SHA-256, the format's rule) and
            compare it with the hash table's digest: a chunk changed on disk
            raises :class:`~xarray_vhdf5.errors.CorruptFileError` instead of
            giving wrong values. Applies to variables read from their chunk
            bytes (not to variable-length strings). Default False.
        as_of : datetime, numpy.datetime64 or str, optional
            The version ``version``'s branch had at that time: the newest
            version along its ``prev_version`` chain committed at or before it
            (``version="qc", as_of="2024-06-01"``; ``version=None``: branch
            ``main``). A time given as ``version`` instead picks the last version
            committed before it anywhere in the file.
        drop_variables, mask_and_scale, decode_times, concat_characters, decode_coords, use_cftime, decode_timedelta
            As for every xarray engine (CF decoding by xarray).

        Returns
        -------
        xarray.Dataset
            Lazy variables; ``ds.encoding`` holds ``source``, ``vhdf5_version``
            and ``vhdf5_group``.

        Raises
        ------
        NotVersionedError
            The file has no version history.
        NotHDF5Error
            The file is not an HDF5 file (e.g. netCDF-3): a ``NotVersionedError``
            and an ``OSError``.
        VersionNotFoundError
            No such version: a name that is not a version nor a time, a
            position past the last version, a time before the first one
            (a ``KeyError``, ``ValueError`` and ``IndexError``; the message
            says what exists).
        VersionKeyTypeError
            ``version`` of another type, e.g. a float (a ``TypeError``).
        KeyError
            No such group in that version.
        TypeError
            ``filename_or_obj`` is neither a path nor a binary file object.
        FileBusyError
            A commit kept the file's metadata locked past the reader's timeout
            (:mod:`~xarray_vhdf5._versions.locking`).

        Notes
        -----
        Opened by path, the file is read through libhdf5 only while the version
        is resolved, under the file's lock; variables then read their chunks'
        bytes directly (:mod:`~xarray_vhdf5._backend.manifest`). A writer may
        commit meanwhile: this Dataset keeps reading its version.
        """
        if isinstance(version, (list, tuple)):  # many versions, stacked along "version"
            from ._stacked import open_versions

            return open_versions(
                filename_or_obj,
                version,
                group=group,
                drop_variables=drop_variables,
                verify=verify,
                mask_and_scale=mask_and_scale,
                decode_times=decode_times,
                concat_characters=concat_characters,
                decode_coords=decode_coords,
                use_cftime=use_cftime,
                decode_timedelta=decode_timedelta,
            )
        from ._reading import file_source, group_dataset, open_version_group, opened, opened_branch, source_path

        manager = file_source(filename_or_obj, verify=verify)
        decoders = dict(
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
        )
        try:
            with opened(manager, filename_or_obj) as f:
                name, grp = open_version_group(f, version, group, as_of)
                ds = group_dataset(manager, name, grp, source_path(filename_or_obj), drop_variables, decoders)
                branch = opened_branch(f, version, name) if as_of is None else None
                if branch is not None:
                    ds.encoding[BRANCH_KEY] = branch
        except BaseException:
            manager.close()
            raise
        ds.set_close(manager.close)
        return ds

    def open_groups_as_dict(
        self,
        filename_or_obj,
        *,
        drop_variables: str | Iterable[str] | None = None,
        mask_and_scale=True,
        decode_times=True,
        concat_characters=True,
        decode_coords=True,
        use_cftime=None,
        decode_timedelta=None,
        version: VersionKey = None,
        group: str | None = None,
    ) -> dict[str, xr.Dataset]:
        """Open every group of ``version`` (below ``group``) as ``{"/path": Dataset}``.

        Used by ``xr.open_groups(path, engine="vhdf5", version=...)``; see
        :func:`xarray_vhdf5.xr._datatree.open_groups_as_dict`.
        """
        from ._datatree import open_groups_as_dict

        return open_groups_as_dict(
            filename_or_obj,
            version=version,
            group=group,
            drop_variables=drop_variables,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
        )

    def open_datatree(
        self,
        filename_or_obj,
        *,
        drop_variables: str | Iterable[str] | None = None,
        mask_and_scale=True,
        decode_times=True,
        concat_characters=True,
        decode_coords=True,
        use_cftime=None,
        decode_timedelta=None,
        version: VersionKey = None,
        group: str | None = None,
    ) -> xr.DataTree:
        """Open ``version``'s group tree (from ``group``, default its root) as a DataTree.

        Used by ``xr.open_datatree(path, engine="vhdf5", version=...)``; see
        :func:`xarray_vhdf5.xr._datatree.open_datatree`.
        """
        from ._datatree import open_datatree

        return open_datatree(
            filename_or_obj,
            version=version,
            group=group,
            drop_variables=drop_variables,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
        )

    def guess_can_open(self, filename_or_obj) -> bool:
        """True for an HDF5 file that holds a ``_version_data/versions`` group."""
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        try:
            with open(filename_or_obj, "rb") as fh:
                if fh.read(8) != _HDF5_MAGIC:
                    return False
            # An HDF5 file: only now load h5py and the version history
            from .._backend.signature import open_for_reading
            from .._versions.registry import is_versioned

            with open_for_reading(filename_or_obj) as f:
                return is_versioned(f)
        except (OSError, ValueError):
            return False
