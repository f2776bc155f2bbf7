"""Versions: the history of a file, lookups, staging and commits."""

from .branchmerge import MergeReport, cherry_pick, merge
from .caches import CommitCaches, forget_shared_caches
from .commit import CommitReport, commit_version
from .delete import delete_version, delete_versions
from .file import VersionedHDF5File
from .metadata import modify_metadata
from .rechunk import RechunkReport, rechunk
from .refs import (
    create_branch,
    create_tag,
    delete_branch,
    delete_tag,
    list_branches,
    list_tags,
    reset_branch,
)
from .registry import VersionInfo, VersionRegistry, initialize, is_versioned
from .repack import RepackReport, repack
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
    "merge",
    "modify_metadata",
    "parse_timestamp",
    "rechunk",
    "repack",
    "reset_branch",
    "to_utc_datetime",
]
