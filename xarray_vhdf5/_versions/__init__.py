"""Versions: the history of a file, lookups, staging and commits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_module

if TYPE_CHECKING:
    from .branchmerge import MergeReport, cherry_pick
    from .caches import CommitCaches, forget_shared_caches
    from .commit import CommitReport, commit_version
    from .delete import delete_version, delete_versions
    from .file import VersionedHDF5File
    from .metadata import modify_metadata
    from .rechunk import RechunkReport
    from .refs import create_branch, create_tag, delete_branch, delete_tag, list_branches, list_tags, reset_branch
    from .registry import VersionInfo, VersionRegistry, initialize, is_versioned
    from .repack import RepackReport
    from .retention import expire
    from .timestamps import format_timestamp, parse_timestamp, to_utc_datetime

__all__ = [
    "CommitCaches",
    "CommitReport",
    "MergeReport",
    "RechunkReport",
    "RepackReport",
    "VersionInfo",
    "VersionRegistry",
    "VersionedHDF5File",
    "cherry_pick",
    "commit_version",
    "create_branch",
    "create_tag",
    "delete_branch",
    "delete_tag",
    "delete_version",
    "delete_versions",
    "expire",
    "forget_shared_caches",
    "format_timestamp",
    "initialize",
    "is_versioned",
    "list_branches",
    "list_tags",
    "modify_metadata",
    "parse_timestamp",
    "reset_branch",
    "to_utc_datetime",
]

#: The module each name comes from, imported on first use (PEP 562): a command
#: such as ``vhdf5 log`` then loads only the modules it needs. The functions
#: ``merge`` (:mod:`.branchmerge`), ``rechunk`` and ``repack`` are taken from their
#: modules: the last two share their module's name, which is what
#: ``from xarray_vhdf5._versions import rechunk`` gives once that module is imported.
_HOMES = {
    "CommitCaches": "caches",
    "CommitReport": "commit",
    "MergeReport": "branchmerge",
    "RechunkReport": "rechunk",
    "RepackReport": "repack",
    "VersionInfo": "registry",
    "VersionRegistry": "registry",
    "VersionedHDF5File": "file",
    "cherry_pick": "branchmerge",
    "commit_version": "commit",
    "create_branch": "refs",
    "create_tag": "refs",
    "delete_branch": "refs",
    "delete_tag": "refs",
    "delete_version": "delete",
    "delete_versions": "delete",
    "expire": "retention",
    "forget_shared_caches": "caches",
    "format_timestamp": "timestamps",
    "initialize": "registry",
    "is_versioned": "registry",
    "list_branches": "refs",
    "list_tags": "refs",
    "modify_metadata": "metadata",
    "parse_timestamp": "timestamps",
    "reset_branch": "refs",
    "to_utc_datetime": "timestamps",
}


__getattr__, __dir__ = lazy_module(__name__, _HOMES, __all__)
