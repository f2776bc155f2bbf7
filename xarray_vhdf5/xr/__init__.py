"""xarray integration: the ``vhdf5`` read engine, the writer and the ``.vhdf5`` accessor.

The names below are imported from their modules on first use (PEP 562), so that
the entry point xarray loads whenever it lists its engines
(``xarray_vhdf5.xr:VHDF5BackendEntrypoint``) imports only its own module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_module

if TYPE_CHECKING:
    from ._accessor import VHDF5DatasetAccessor, VHDF5DataTreeAccessor, version_log_frame
    from ._array import VersionedBackendArray
    from ._datatree import commit_staged_tree, open_datatree, open_groups_as_dict, stage_datatree
    from ._diff import diff_datatree, diff_versions
    from ._dimscales import attach_dimension_scales
    from ._engine import VHDF5BackendEntrypoint
    from ._reading import open_version_group
    from ._stacked import open_versions
    from ._stage import append_staged, commit_staged, stage_dataset
    from ._staged_array import StagedVariableArray
    from ._writer import commit_dataset, commit_datatree, next_version_name

#: Each public name and the module it is defined in.
_HOMES = {
    "StagedVariableArray": "_staged_array",
    "VHDF5BackendEntrypoint": "_engine",
    "VHDF5DataTreeAccessor": "_accessor",
    "VHDF5DatasetAccessor": "_accessor",
    "VersionedBackendArray": "_array",
    "append_staged": "_stage",
    "attach_dimension_scales": "_dimscales",
    "commit_dataset": "_writer",
    "commit_datatree": "_writer",
    "commit_staged": "_stage",
    "commit_staged_tree": "_datatree",
    "diff_datatree": "_diff",
    "diff_versions": "_diff",
    "next_version_name": "_writer",
    "open_datatree": "_datatree",
    "open_groups_as_dict": "_datatree",
    "open_version_group": "_reading",
    "open_versions": "_stacked",
    "stage_dataset": "_stage",
    "stage_datatree": "_datatree",
    "version_log_frame": "_accessor",
}

__all__ = [
    "StagedVariableArray",
    "VHDF5BackendEntrypoint",
    "VHDF5DataTreeAccessor",
    "VHDF5DatasetAccessor",
    "VersionedBackendArray",
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


__getattr__, __dir__ = lazy_module(__name__, _HOMES, __all__)
