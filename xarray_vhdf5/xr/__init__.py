"""xarray integration: the ``vhdf5`` read engine, the writer and the ``.vhdf5`` accessor."""

from . import accessor  # registers the .vhdf5 accessor (xarray's extension API)
from .accessor import VHDF5DatasetAccessor, VHDF5DataTreeAccessor, version_log_frame
from .array import VersionedBackendArray
from .datatree import commit_staged_tree, open_datatree, open_groups_as_dict, stage_datatree
from .diff import diff_datatree, diff_versions
from .dimscales import attach_dimension_scales
from .engine import VHDF5BackendEntrypoint, open_version_group
from .stacked import open_versions
from .stage import append_staged, commit_staged, stage_dataset
from .staged_array import StagedVariableArray
from .writer import commit_dataset, commit_datatree, next_version_name

__all__ = [
    "StagedVariableArray",
    "VHDF5BackendEntrypoint",
    "VHDF5DataTreeAccessor",
    "VHDF5DatasetAccessor",
    "VersionedBackendArray",
    "accessor",
    "append_staged",
    "attach_dimension_scales",
    "commit_dataset",
    "commit_datatree",
    "commit_staged",
    "commit_staged_tree",
    "diff_datatree",
    "diff_versions",
    "next_version_name",
    "open_datatree",
    "open_groups_as_dict",
    "open_version_group",
    "open_versions",
    "stage_dataset",
    "stage_datatree",
    "version_log_frame",
]
