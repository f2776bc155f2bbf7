"""The ``.vhdf5`` accessors on xarray Datasets and DataTrees.

Registered through xarray's public extension API
(:func:`xarray.register_dataset_accessor`, :func:`xarray.register_datatree_accessor`)
when ``xarray_vhdf5`` is imported, and when the ``vhdf5`` engine opens a file.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from typing import Any

import xarray as xr

from ._accessor_base import DATASET_WORDS, DATATREE_WORDS, AccessorBase, version_log_frame
from ._chunkverbs import ChunkVerbs
from ._writer import commit_dataset, commit_datatree

__all__ = ["VHDF5DataTreeAccessor", "VHDF5DatasetAccessor", "version_log_frame"]


@xr.register_dataset_accessor("vhdf5")
class VHDF5DatasetAccessor(AccessorBase[xr.Dataset], ChunkVerbs):
    """Versioning operations on a Dataset: ``ds.vhdf5.commit(...)``, ``ds.vhdf5.version``, refs, rechunk."""

    _words = DATASET_WORDS

    def __init__(self, dataset: xr.Dataset):
        super().__init__(dataset)
        self._ds = dataset  # what ChunkVerbs reads

    def _datasets(self) -> list[xr.Dataset]:
        return [self._ds]

    def _diff(self, source: str, other, **options: Any) -> xr.Dataset:
        from ._diff import diff_versions

        return diff_versions(source, other, self.version, **options)

    def _stage(self) -> xr.Dataset:
        from ._stage import stage_dataset

        return stage_dataset(self._ds)

    def append(self, other: xr.Dataset, dim: str, *, allow_unsorted: bool = False) -> xr.Dataset:
        """This staged Dataset grown along ``dim`` by ``other`` (returned; this one is unchanged).

        Time and memory proportional to ``other``; see
        :func:`~xarray_vhdf5.xr._stage.append_staged`. Labels along ``dim``
        must keep its index sorted (increasing or decreasing, as it was)
        unless ``allow_unsorted=True``.

        Raises
        ------
        ValueError
            The Dataset does not come from :meth:`stage`.
        IncompatibleDataError
            ``other`` lacks a variable along ``dim`` or its sizes differ; it
            has a data variable the Dataset lacks; an indexed coordinate of
            another dimension differs in values or order (as
            ``xr.concat(..., join="exact")``); a label it adds along
            ``dim`` is already there; or, without ``allow_unsorted``, the
            labels along ``dim`` would no longer be sorted. Nothing is staged then
            (:func:`~xarray_vhdf5.xr._stage.append_staged`).
        """
        from ._stage import append_staged, is_staged

        if not is_staged(self._ds):
            raise ValueError("append() needs a Dataset from ds.vhdf5.stage(); stage the opened Dataset first")
        return append_staged(self._ds, other, dim, allow_unsorted=allow_unsorted)

    def _refuse_path_write(self, what: str, path, prev_version, force) -> None:
        """The checks common to ``commit(path=, append_dim= / region= / mode="a" or "r+")``."""
        from ._stage import is_staged

        if path is None:
            raise TypeError(f"commit({what}) needs path=: the versioned HDF5 file to write into")
        if prev_version is not None or force:
            raise ValueError(
                f"commit({what}) writes onto the current version: prev_version= and force= "
                "do not apply (stage a version yourself to write elsewhere)"
            )
        if is_staged(self._ds):
            raise ValueError(
                f"commit({what}) writes a plain Dataset; a staged Dataset is edited in place "
                "(staged[name][...] = values, staged.vhdf5.append(other, dim=...)) and committed "
                "with staged.vhdf5.commit()"
            )

    def _staged_commit(
        self,
        path,
        version,
        create,
        edit,
        *,
        group,
        message,
        timestamp,
        make_current,
        progress,
        max_bytes,
        rebase,
        allow_empty,
        allow_unsorted,
    ) -> str:
        """Open the current version, stage it, ``edit(staged)``, commit; a file without versions: commit as is."""
        from ._region import open_current

        current = open_current(path, group, create=create)
        if current is None:  # no version yet: this Dataset is the first
            return self.commit(
                version,
                path,
                group=group,
                message=message,
                timestamp=timestamp,
                make_current=make_current,
                progress=progress,
                max_bytes=max_bytes,
                allow_empty=allow_empty,
                allow_unsorted=allow_unsorted,
            )
        with current:
            staged = edit(current.vhdf5.stage())
            try:
                return staged.vhdf5.commit(
                    version,
                    message=message,
                    timestamp=timestamp,
                    make_current=make_current,
                    progress=progress,
                    max_bytes=max_bytes,
                    rebase=rebase,
                    allow_empty=allow_empty,
                )
            finally:
                staged.close()

    def _mode_commit(self, path, version, mode, append_dim, region, *, prev_version, force, **kw) -> str:
        """``commit(path=, mode="a" or "r+")``: append along ``append_dim``, or write (into ``region``)."""
        from ..errors import UnsupportedError
        from ._append import commit_appended
        from ._region import apply_write
        from ._stage import append_staged

        what = f"append_dim={append_dim!r}" if append_dim is not None else f"mode={mode!r}"
        self._refuse_path_write(what, path, prev_version, force)
        if append_dim is not None:
            if region is not None:
                if region != "auto" and append_dim in region:
                    raise ValueError(
                        f"cannot list the same dimension in both ``append_dim`` and ``region`` with "
                        f"commit(), got {append_dim!r} in both"
                    )
                raise UnsupportedError(
                    "commit(append_dim=, region=): appending and writing into a region in one "
                    "commit is not supported; commit them one after the other"
                )
            if append_dim not in self._ds.dims:
                raise ValueError(
                    f"append_dim={append_dim!r} is not a dimension of this Dataset (dimensions: "
                    f"{list(map(str, self._ds.dims))})"
                )

            name = commit_appended(
                self._ds,
                path,
                append_dim,
                version=version,
                group=kw["group"],
                message=kw["message"],
                timestamp=kw["timestamp"],
                make_current=kw["make_current"],
                allow_unsorted=kw["allow_unsorted"],
            )
            if name is not None:  # one open of the file; else the general path below
                return name

            def edit(staged):
                return append_staged(staged, self._ds, append_dim, allow_unsorted=kw["allow_unsorted"])
        else:

            def edit(staged):
                return apply_write(staged, self._ds, mode=mode, region=region)

        return self._staged_commit(path, version, mode == "a" and region is None, edit, **kw)

    def commit(
        self,
        version: str | None = None,
        path: str | os.PathLike | None = None,
        *,
        group: str | None = None,
        prev_version: str | None = None,
        message: str | None = None,
        timestamp=None,
        make_current: bool = True,
        progress: bool | None = None,
        max_bytes: int | None = None,
        force: bool = False,
        rebase: bool = False,
        allow_empty: bool = False,
        allow_unsorted: bool = False,
        append_dim: str | None = None,
        region: Mapping[Hashable, slice | str] | str | None = None,
        mode: str | None = None,
    ) -> str:
        """Commit this Dataset as a new version of the file at ``path``.

        A Dataset from :meth:`stage` commits without ``path``, into the file it
        was staged from, with the staged-from version as parent and only the
        changed chunks written (:func:`~xarray_vhdf5.xr._stage.commit_staged`).

        Parameters
        ----------
        version : str, optional
            Name of the new version (default ``r<N>``, see
            :func:`~xarray_vhdf5.xr._writer.next_version_name`).
        path : str or os.PathLike
            The versioned HDF5 file (created if missing); optional for a staged Dataset.
        group, prev_version, message, timestamp, make_current, progress, max_bytes
            See :func:`~xarray_vhdf5.xr._writer.commit_dataset` (``group`` and
            ``prev_version`` do not apply to a staged Dataset).
        force : bool
            Commit even if another version was committed since :meth:`stage`, or,
            for a Dataset opened from a version of the same file
            (``encoding["vhdf5_version"]``), since that version (default False:
            :class:`~xarray_vhdf5.errors.StaleVersionError`). The new version's
            parent is then the staged-from or opened-from version (a branch).
        rebase : bool
            For a staged Dataset: if another version was committed since
            :meth:`stage`, merge the staged changes with the changes committed
            since and commit onto the file's current version, which becomes the
            parent (:func:`~xarray_vhdf5.xr._stage.commit_staged`; rules in
            :mod:`~xarray_vhdf5._versions.merge`: chunks one side changed are
            mapped, points one side changed merge, points both sides changed
            to different values conflict). The Dataset is then staged again
            from the new version. Not with ``force``.
        allow_empty : bool
            Commit even if nothing changed from the parent version (no
            variable, point or attribute; the message does not count).
            Default False: :class:`~xarray_vhdf5.errors.NothingToCommitError`,
            icechunk's rule. (``VersionedHDF5File.stage_version`` commits an
            empty version, as versioned-hdf5 does.)
        allow_unsorted : bool
            With ``path=``: store a dimension coordinate that grows and is no
            longer sorted as in the parent version (default False:
            :class:`~xarray_vhdf5.errors.IncompatibleDataError`). A staged
            Dataset is checked by :meth:`append` instead.
        append_dim : str, optional
            With ``path=``: append this Dataset to the file's current version
            along ``append_dim`` (as ``to_zarr(append_dim=)`` appends), in one
            call, with :meth:`append`'s checks (other dimensions and variables
            must match, labels stay sorted unless ``allow_unsorted``), writing
            only the chunks the new labels touch. The file is opened once,
            under its write lock, and only the variables along ``append_dim``
            and the indexed coordinates are read
            (:func:`~xarray_vhdf5.xr._append.commit_appended`); where a
            variable cannot be stored so (strings, dask arrays, datasets
            without ``_ARRAY_DIMENSIONS``), the current version is opened,
            staged, grown by :meth:`append` and committed, with the same
            result. A file that does not exist yet (or has no version) gets
            this Dataset as its first version. Not with ``prev_version`` or
            ``force``; ``rebase=True`` merges onto a version another writer
            committed meanwhile (on the staged path; the one-open path reads
            the current version under the lock, so nothing can come between).
        region : dict or "auto", optional
            With ``path=``: write this Dataset into a slab of the file's current
            version, as ``to_zarr(region=)``: ``{dim: slice(start, stop)}``
            (step 1, ``stop - start`` the Dataset's size along ``dim``;
            ``"auto"`` for a dimension, or for all, finds the slice from the
            Dataset's labels, which must be contiguous in the stored order).
            Only the chunks the region touches are read (partly covered ones)
            and written. The variables with a region dimension must be stored
            already, with the same dimensions (any order); their values are cast
            as staged assignments are (no silent truncation or wrap-around);
            variables without any region dimension must equal the stored ones
            (or be dropped: they are not written); dimension coordinates must
            equal the stored labels within the region. Attributes and
            encodings are not written. Rules and messages in
            :mod:`~xarray_vhdf5.xr._region`. Not with ``prev_version``, ``force``
            or ``append_dim``; ``rebase=True`` merges as for ``append_dim``.
        mode : {"w-", "w", "a", "r+"}, optional
            As ``to_zarr(mode=)``; every mode commits a new version and keeps
            the history. ``"w-"``: create, refused if the file holds a version;
            ``"w"``: a version holding exactly this Dataset, on top of the
            current one (a Dataset opened from an older version of the file is
            not refused as stale); ``"a"``: the current version with this
            Dataset's variables overwritten (same sizes and dimension
            coordinates as stored) or added, its attributes updated, or, with
            ``append_dim``, grown; ``"r+"``: only existing variables overwritten,
            whole or in ``region``, attributes kept. Default: ``"a"`` with
            ``append_dim``, ``"r+"`` with ``region``, else this method's own
            behaviour (as ``"w"``, but a Dataset opened from a version of
            ``path`` commits on top of it, while it is current). ``"a"`` and
            ``"r+"`` stage the current version and write only the chunks the
            Dataset touches; ``"a"`` on a missing file (or one without version)
            commits this Dataset as the first version, ``"r+"`` and ``region``
            need a version.

        Returns
        -------
        str
            The new version's name.

        Raises
        ------
        TypeError
            No ``path`` given and the Dataset is not staged; a ``region`` that
            is not a dict or "auto", or whose values are not slices.
        ValueError
            A ``mode`` that is not one of the four, or that does not go with
            ``append_dim`` (only ``"a"``) or ``region`` (``"a"``, ``"r+"``);
            a region key that is not a dimension of the Dataset, or a step
            other than 1; ``append_dim``, ``mode="a"``/``"r+"`` or ``region``
            with ``prev_version`` or ``force``, or for a staged Dataset.
        HistoryExistsError
            ``mode="w-"`` and the file holds a version (a ``FileExistsError``).
        FileNotFoundError
            ``mode="r+"`` or ``region`` and ``path`` does not exist.
        LabelsNotFoundError
            ``region="auto"`` and labels of the Dataset are not stored (an
            :class:`~xarray_vhdf5.errors.IncompatibleDataError` and a ``KeyError``).
        ValueCastError
            ``mode="a"``/``"r+"``: a value the stored variable's dtype cannot
            hold (its children ``ValueOverflowError``, ``ValueTypeError``,
            ``StringTooLongError``); nothing is written.
        UnsupportedError
            ``append_dim`` and ``region`` together.
        StaleVersionError
            Staged Dataset whose file got another version since :meth:`stage`
            (without ``force`` or ``rebase``); a Dataset opened from version A of
            ``path`` committed without ``prev_version`` while A is no longer the
            current version (committing it would undo the versions since).
            Nothing is written.
        ConflictError
            ``rebase=True`` and both sides changed the same points or attributes
            to different values; ``points`` maps each variable's dataset path to
            an ``(n, ndim)`` int64 array of the conflicting points. Nothing is
            written.
        ValueError
            ``rebase=True`` for a Dataset that is not staged, or with ``force``.
        NothingToCommitError
            Nothing changed and ``allow_empty`` is False (a ``ValueError``);
            nothing is written.
        FileBusyError
            Another writer kept the file past the lock timeout; nothing is written.
        VersionExistsError, IncompatibleDataError, NotVersionedError
            See :func:`~xarray_vhdf5.xr._writer.commit_dataset` (``IncompatibleDataError``
            also for labels appended out of order without ``allow_unsorted``;
            with ``mode="a"``/``"r+"``/``region``, for the mismatches listed
            under ``region`` and ``mode``: a variable ``"r+"`` or a region
            write would add, other dimensions or sizes than stored, coordinates
            that differ; ``NotVersionedError`` also for ``"r+"`` into a file
            without version). Nothing is written.

        Examples
        --------
        A QC fix of two days, and a day rewritten where its labels are:

        >>> fix.vhdf5.commit("qc", path="sst.h5", region={"time": slice(3, 5)})  # doctest: +SKIP
        >>> day.vhdf5.commit("redo", path="sst.h5", region="auto")  # doctest: +SKIP
        """
        from ..errors import HistoryExistsError
        from ._region import choose_mode, has_a_version
        from ._stage import commit_staged, is_staged
        from ._staged_array import same_file

        mode = choose_mode(mode, append_dim, region)
        if mode in ("a", "r+"):
            return self._mode_commit(
                path,
                version,
                mode,
                append_dim,
                region,
                group=group,
                prev_version=prev_version,
                message=message,
                timestamp=timestamp,
                make_current=make_current,
                progress=progress,
                max_bytes=max_bytes,
                force=force,
                rebase=rebase,
                allow_empty=allow_empty,
                allow_unsorted=allow_unsorted,
            )
        if mode == "w-" and path is not None and has_a_version(path):
            raise HistoryExistsError(
                f"commit(mode='w-'): {os.fspath(path)!r} already holds versions (current: "
                f"{_current_version(path)!r}); mode='w' commits this Dataset as a new version on top of them, "
                "mode='a' writes into the current one"
            )

        options = self._commit_options(message, timestamp, make_current, progress, max_bytes)
        staged = is_staged(self._ds) and (path is None or same_file(path, self._ds.encoding.get("source")))
        if staged and group is None and prev_version is None:
            return commit_staged(self._ds, version, force=force, rebase=rebase, allow_empty=allow_empty, **options)
        if rebase:
            raise ValueError(
                "commit(rebase=True) merges a Dataset from ds.vhdf5.stage() onto the file's current version; "
                "this Dataset is not staged (stage it first), or group=/prev_version= were given"
            )
        if path is None:
            raise TypeError("commit() needs path=: the versioned HDF5 file to commit into")
        # A Dataset opened from a version of this very file commits on top of that version,
        # and only while it is still the current one (else it would undo the versions since);
        # mode="w" says "replace": on top of the current version, whatever it is.
        opened_from = self._ds.encoding.get("vhdf5_version")
        expected_current = None
        if opened_from is not None and mode is None and same_file(path, self._ds.encoding.get("source")):
            if prev_version is None:
                prev_version = opened_from
                expected_current = None if force else opened_from
        return commit_dataset(
            self._ds,
            path,
            version,
            group=group,
            prev_version=prev_version,
            expected_current=expected_current,
            allow_empty=allow_empty,
            allow_unsorted=allow_unsorted,
            **options,
        )


@xr.register_datatree_accessor("vhdf5")
class VHDF5DataTreeAccessor(AccessorBase[xr.DataTree]):
    """Versioning operations on a DataTree: ``dt.vhdf5.commit(...)``, ``dt.vhdf5.versions``, refs."""

    _words = DATATREE_WORDS

    def _datasets(self) -> list[xr.DataTree]:
        return list(self._obj.subtree)

    def _diff(self, source: str, other, **options: Any) -> xr.DataTree:
        from ._diff import diff_datatree

        return diff_datatree(source, other, self.version, **options)

    def _stage(self) -> xr.DataTree:
        from ._datatree import stage_datatree

        return stage_datatree(self._obj)

    def commit(
        self,
        version: str | None = None,
        path: str | os.PathLike | None = None,
        *,
        group: str | None = None,
        prev_version: str | None = None,
        message: str | None = None,
        timestamp=None,
        make_current: bool = True,
        progress: bool | None = None,
        max_bytes: int | None = None,
        force: bool = False,
        rebase: bool = False,
        allow_empty: bool = False,
    ) -> str:
        """Commit the whole tree as one new version of the file at ``path``.

        A tree from :meth:`stage` commits without ``path``, into the file it was
        staged from, writing only the changed chunks
        (:func:`~xarray_vhdf5.xr._datatree.commit_staged_tree`; ``force``,
        ``rebase`` and ``allow_empty`` apply to it only).

        Parameters
        ----------
        version, path, group, prev_version, message, timestamp, make_current, progress, max_bytes
            See :func:`~xarray_vhdf5.xr._writer.commit_datatree`.
        force, rebase, allow_empty
            For a staged tree, see :func:`~xarray_vhdf5.xr._datatree.commit_staged_tree`.

        Returns
        -------
        str
            The new version's name.

        Raises
        ------
        TypeError
            No ``path`` given and the tree is not staged.
        VersionExistsError, IncompatibleDataError, NotVersionedError
            See :func:`~xarray_vhdf5.xr._writer.commit_datatree`.
        StaleVersionError, ConflictError, NothingToCommitError
            A staged tree: see :func:`~xarray_vhdf5.xr._datatree.commit_staged_tree`.
        """
        from ._stage import is_staged

        options = self._commit_options(message, timestamp, make_current, progress, max_bytes)
        if path is None and any(is_staged(node.to_dataset(inherit=False)) for node in self._obj.subtree):
            from ._datatree import commit_staged_tree

            if group is not None or prev_version is not None:
                raise ValueError(
                    "a staged tree commits into the groups and on the version it was staged from: "
                    "group= and prev_version= do not apply"
                )
            return commit_staged_tree(
                self._obj, version, force=force, rebase=rebase, allow_empty=allow_empty, **options
            )
        if path is None:
            raise TypeError("commit() needs path=: the versioned HDF5 file to commit into")
        return commit_datatree(self._obj, path, version, group=group, prev_version=prev_version, **options)


def _current_version(path) -> str | None:
    """The current version of the versioned file at ``path``."""
    from .._versions.file import VersionedHDF5File

    with VersionedHDF5File.open(path) as vf:
        return vf.current_version
