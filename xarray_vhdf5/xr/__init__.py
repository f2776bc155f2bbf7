"""xarray integration: the ``vhdf5`` read engine, the writer and the ``.vhdf5`` accessor.

The names below are imported from their modules on first use (PEP 562), so that
importing :mod:`xarray_vhdf5.xr.engine`, which xarray does whenever it lists
its engines, loads only the entry point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_attribute

if TYPE_CHECKING:
    from . import accessor
    from ._reading import open_version_group
    from .accessor import VHDF5DatasetAccessor, VHDF5DataTreeAccessor, version_log_frame
    from .array import VersionedBackendArray
    from .datatree import commit_staged_tree, open_datatree, open_groups_as_dict, stage_datatree
    from .diff import diff_datatree, diff_versions
    from .dimscales import attach_dimension_scales
    from .engine import VHDF5BackendEntrypoint
    from .stacked import open_versions
    from .stage import append_staged, commit_staged, stage_dataset
    from .staged_array import StagedVariableArray
    from .writer import commit_dataset, commit_datatree, next_version_name

#: Each public name and the module it is defined in.
_HOMES = {
    "StagedVariableArray": "staged_array",
    "VHDF5BackendEntrypoint": "engine",
    "VHDF5DataTreeAccessor": "accessor",
    "VHDF5DatasetAccessor": "accessor",
    "VersionedBackendArray": "array",
    "append_staged": "stage",
    "attach_dimension_scales": "dimscales",
    "commit_dataset": "writer",
    "commit_datatree": "writer",
    "commit_staged": "stage",
    "commit_staged_tree": "datatree",
    "diff_datatree": "diff",
    "diff_versions": "diff",
    "next_version_name": "writer",
    "open_datatree": "datatree",
    "open_groups_as_dict": "datatree",
    "open_version_group": "_reading",
    "open_versions": "stacked",
    "stage_dataset": "stage",
    "stage_datatree": "datatree",
    "version_log_frame": "accessor",
}

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


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
