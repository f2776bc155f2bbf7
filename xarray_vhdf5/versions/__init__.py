"""Versions: the history of a file, lookups, staging and commits."""

from .commit import CommitReport, commit_version
from .file import VersionedHDF5File
from .registry import VersionInfo, VersionRegistry, initialize, is_versioned
from .timestamps import format_timestamp, parse_timestamp, to_utc_datetime

__all__ = [
    "CommitReport",
    "VersionInfo",
    "VersionRegistry",
    "VersionedHDF5File",
    "commit_version",
    "format_timestamp",
    "initialize",
    "is_versioned",
    "parse_timestamp",
    "to_utc_datetime",
]
