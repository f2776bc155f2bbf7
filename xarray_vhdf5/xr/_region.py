"""``ds.vhdf5.commit(path, mode=..., region=...)``: ``to_zarr``'s write modes on a versioned file.

The rules are those of :meth:`xarray.Dataset.to_zarr` (xarray 2026.9), and so
are the messages where xarray has one; every write is a new version on top of
the file's current one (history is kept):

========  ==================================================================
mode      what the new version holds
========  ==================================================================
``"w-"``  this Dataset; refused (:class:`~xarray_vhdf5.errors.HistoryExistsError`)
          if the file already holds a version
``"w"``   exactly this Dataset (variables of the current version it lacks
          are not carried over)
``"a"``   the current version, its variables overwritten by this Dataset's
          and this Dataset's new variables added (``append_dim=``: grown
          along it, :func:`~xarray_vhdf5.xr._stage.append_staged`)
``"r+"``  the current version, existing variables overwritten (the sizes must
          match, no variable may be added); with ``region=``, only the region
========  ==================================================================

With ``mode=None`` the mode is ``"a"`` given ``append_dim``, ``"r+"`` given
``region``; with neither, ``commit(path=)`` keeps its own behaviour (as
``"w"``, but a Dataset opened from the file must still be its current version).

``"a"`` and ``"r+"`` work through staging (:mod:`~xarray_vhdf5.xr._stage`): the
current version is opened and staged, the Dataset's values are assigned into
the staged variables (:func:`apply_write`) and the staged Dataset committed, so
only the chunks the written points touch are hashed and written (a partly
covered chunk is read first), and the values go through the staged arrays'
casting checks (:meth:`~xarray_vhdf5.xr._cfcodec.CFCodec.encode`:
:class:`~xarray_vhdf5.errors.ValueCastError` and its children, nothing is
truncated or wrapped).

Region writes (``region={"time": slice(10, 20)}``, or ``"auto"``: the region
found from the Dataset's coordinate labels, as ``to_zarr(region="auto")``):

- the region's keys are dimensions of the Dataset, its values slices of step
  1 whose length is the Dataset's size along that dimension;
- every variable of the Dataset with a region dimension must be stored
  already (a region write adds nothing), with the same dimensions (any order)
  and the stored sizes along the other dimensions;
- a variable with none of the region dimensions (``lat`` and ``lon`` beside
  ``sst(time, lat, lon)``) is not written: it must equal the stored one, or be
  dropped (xarray requires it dropped; here an equal one is accepted, since
  a slice of an opened Dataset carries them);
- dimension coordinates (indexes) are never written: they must equal the
  stored labels within the region (xarray drops them unchecked; here points
  stored under other labels than the Dataset's are refused). ``"a"`` without a
  region checks them the same way over their whole length (xarray overwrites
  them; here ``mode="w"`` replaces a Dataset whose labels change).

Dataset attributes: ``"a"`` updates the stored ones with the Dataset's, ``"r+"``
leaves them; variable attributes and encodings of stored variables are kept
(``to_zarr`` does not rewrite them either). xarray's ``"a-"`` is not supported.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .._staging import cast_for_storage
from ..errors import IncompatibleDataError, LabelsNotFoundError, NotVersionedError, VersionNotFoundError
from ._staged_array import CharArrayValues, StagedVariableArray

__all__ = ["MODES", "apply_write", "choose_mode", "has_a_version", "open_current", "resolve_region"]

#: The write modes of ``commit(path=..., mode=...)``, as ``to_zarr``'s.
MODES = ("w", "w-", "a", "r+")

Region = Mapping[Hashable, slice | str] | str


def choose_mode(mode: str | None, append_dim: Hashable | None, region: Region | None) -> str | None:
    """The write mode, as ``to_zarr`` chooses it (None: ``commit(path=)``'s own default).

    Parameters
    ----------
    mode : {"w", "w-", "a", "r+"} or None
    append_dim : hashable or None
    region : dict or "auto" or None

    Returns
    -------
    str or None
        ``mode``; given None, ``"a"`` with ``append_dim``, ``"r+"`` with ``region``,
        else None.

    Raises
    ------
    ValueError
        ``mode`` is not one of :data:`MODES`; ``append_dim`` with a mode other
        than ``"a"``; ``region`` with a mode other than ``"a"`` or ``"r+"``.
    """
    if mode is None:
        if append_dim is not None:
            mode = "a"
        elif region is not None:
            mode = "r+"
        else:
            return None
    if mode not in MODES:
        raise ValueError(f"The only supported options for mode are 'w', 'w-', 'a' and 'r+', but mode={mode!r}")
    if append_dim is not None and mode != "a":
        raise ValueError(f"cannot set append_dim unless mode='a' or mode=None; got mode={mode!r}")
    if region is not None and mode not in ("a", "r+"):
        raise ValueError(f"cannot set region unless mode='a', mode='r+' or mode=None; got mode={mode!r}")
    return mode


def open_current(path: str | os.PathLike, group: str | None, *, create: bool) -> xr.Dataset | None:
    """The file's current version of ``group``, opened lazily; None if the file holds no version yet.

    Parameters
    ----------
    path : str or os.PathLike
    group : str or None
    create : bool
        Whether a missing file, or one without versions, is accepted (None
        returned: the caller commits a first version). False for ``"r+"`` and
        region writes, which write into an existing version.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist and ``create`` is False.
    NotVersionedError
        The file holds no version and ``create`` is False; ``path`` is an HDF5
        file holding other data.
    VersionNotFoundError
        ``group`` is not in the current version of a file that has one.
    """
    if not os.path.exists(path):
        if not create:
            raise FileNotFoundError(
                f"{os.fspath(path)!r} does not exist; mode='r+' and region= write into the variables of an "
                "existing version (mode='a' or 'w' creates the file)"
            )
        return None
    try:
        return xr.open_dataset(path, engine="vhdf5", group=group)
    except (NotVersionedError, VersionNotFoundError):
        if not create or (group is not None and has_a_version(path)):
            raise
        return None


def has_a_version(path: str | os.PathLike) -> bool:
    """Whether the versioned file at ``path`` has a committed version (through this package's reader)."""
    from .._versions.file import VersionedHDF5File

    try:
        with VersionedHDF5File.open(path) as vf:
            return len(vf) > 0
    except (OSError, ValueError, KeyError):
        return False


def resolve_region(stored: xr.Dataset, ds: xr.Dataset, region: Region | None) -> dict[Hashable, slice]:
    """``region`` as ``{dim: slice(start, stop)}`` of non-negative ints within the stored sizes.

    Parameters
    ----------
    stored : xarray.Dataset
        The current version (staged or opened): its sizes and indexes.
    ds : xarray.Dataset
        The Dataset to write.
    region : dict or "auto" or None
        ``{dim: slice or "auto"}``, ``"auto"`` (every dimension of ``ds``
        "auto") or None (no region: ``{}``). An "auto" dimension without a
        coordinate in ``ds`` spans ``slice(0, ds.sizes[dim])`` (xarray's rule);
        one with a coordinate spans the stored positions of its labels.

    Returns
    -------
    dict
        One ``slice(start, stop)`` (step None, ``stop - start == ds.sizes[dim]``)
        per region dimension.

    Raises
    ------
    TypeError
        ``region`` is not a dict or "auto"; a value is neither a slice nor "auto".
    ValueError
        A key is not a dimension of ``ds``; a slice's step is not 1.
    LabelsNotFoundError
        "auto": labels of ``ds`` the stored coordinate lacks (a ``KeyError``).
    IncompatibleDataError
        "auto": the labels' stored positions are not contiguous and increasing,
        or the dimension has no stored coordinate; a region dimension the
        stored version lacks; a slice whose length within the stored size is
        not ``ds.sizes[dim]``.
    """
    if region is None:
        return {}
    if isinstance(region, str):
        if region != "auto":
            raise TypeError(f"``region`` must be a dict or 'auto', got {region!r}")
        region = dict.fromkeys(ds.dims, "auto")
    if not isinstance(region, Mapping):
        raise TypeError(f"``region`` must be a dict, got {type(region)}")
    slices: dict[Hashable, slice] = {}
    for dim, value in region.items():
        if dim not in ds.dims:
            raise ValueError(
                f"all keys in ``region`` are not in Dataset dimensions, got {list(region)} and {list(ds.dims)}"
            )
        if isinstance(value, str) and value == "auto":
            slices[dim] = _auto_slice(stored, ds, dim)
        elif not isinstance(value, slice):
            raise TypeError(f"all values in ``region`` must be slice objects or 'auto', got region={region}")
        elif value.step not in (1, None):
            raise ValueError(f"step on all slices in ``region`` must be 1 or None, got region={region}")
        else:
            slices[dim] = value
    out = {}
    for dim, value in slices.items():
        if dim not in stored.dims:
            raise IncompatibleDataError(
                f"region dimension {dim!r} is not a dimension of the stored version (its dimensions: "
                f"{dict(stored.sizes)}); a region write only writes into stored variables"
            )
        start, stop, _ = value.indices(stored.sizes[dim])
        n = max(0, stop - start)
        if n != ds.sizes[dim]:
            raise IncompatibleDataError(
                f"region {dim}={value} selects {n} of the {stored.sizes[dim]} stored points along {dim!r} "
                f"(positions {start} to {start + n}), but the Dataset has {ds.sizes[dim]} along {dim!r}; "
                "a region write cannot change a dimension's size (append_dim= grows one)"
            )
        out[dim] = slice(start, start + n)
    return out


def _auto_slice(stored: xr.Dataset, ds: xr.Dataset, dim: Hashable) -> slice:
    """``to_zarr``'s region="auto" for one dimension: the stored positions of ``ds``'s labels."""
    if dim not in ds.variables:
        return slice(0, ds.sizes[dim])  # unindexed dimension
    if dim not in stored.indexes:
        raise IncompatibleDataError(
            f"region='auto': the stored version has no coordinate {dim!r} to find the Dataset's labels in; "
            f"give the region of {dim!r} as a slice"
        )
    labels = pd.Index(ds[dim].values)
    have = stored.indexes[dim]
    if not have.is_unique:
        raise IncompatibleDataError(
            f"region='auto': the stored coordinate {dim!r} has repeated labels, so its positions are ambiguous; "
            f"give the region of {dim!r} as a slice"
        )
    idxs = have.get_indexer(labels)
    missing = idxs == -1
    if missing.any():
        raise LabelsNotFoundError(
            f"Not all values of coordinate {dim!r} in the new array were found in the original store "
            f"({int(missing.sum())} of {len(labels)} missing, first {labels[np.argmax(missing)]!r}). Writing to "
            "a region slice requires that no dimensions or metadata are changed by the write."
        )
    if len(idxs) == 0:
        return slice(0, 0)
    if (np.diff(idxs) != 1).any():
        raise IncompatibleDataError(
            f"The auto-detected region of coordinate {dim!r} for writing new data to the original store had "
            "non-contiguous indices. Writing to a region slice requires that the new data constitute a "
            "contiguous subset of the original store (in the stored order)."
        )
    return slice(int(idxs[0]), int(idxs[-1]) + 1)


def apply_write(staged: xr.Dataset, ds: xr.Dataset, *, mode: str, region: Region | None = None) -> xr.Dataset:
    """``staged`` with ``ds`` written into it by ``mode`` ("a" or "r+") and ``region`` (module docstring).

    Parameters
    ----------
    staged : xarray.Dataset
        From ``ds.vhdf5.stage()`` of the file's current version. Its staged
        variables that ``ds`` writes are changed in place (only the chunks of
        the written points); in-memory ones are copied.
    ds : xarray.Dataset
        numpy- or dask-backed (dask variables are computed, one at a time).
    mode : {"a", "r+"}
    region : dict or "auto" or None
        See :func:`resolve_region`.

    Returns
    -------
    xarray.Dataset
        The staged Dataset to commit (``staged``'s encoding).

    Raises
    ------
    IncompatibleDataError
        ``ds`` has a variable the stored version lacks (any region write, and
        ``"r+"``); a stored variable with other dimension names, or other sizes
        than the stored ones (the region's along its dimensions); a new
        variable whose sizes conflict with the stored dimensions; a dimension
        coordinate that differs from the stored labels (within the region);
        with a region, a variable without any region dimension that differs
        from the stored one. Nothing is changed then.
    ValueCastError, ValueOverflowError, ValueTypeError, StringTooLongError
        A value the stored variable's dtype cannot hold (a child of
        ``IncompatibleDataError``); ``staged`` may then be partly written:
        discard it.
    TypeError, ValueError, LabelsNotFoundError
        A malformed or unfindable region (:func:`resolve_region`).
    """
    where = f"commit(mode={mode!r}{', region=...' if region is not None else ''})"
    slab = resolve_region(staged, ds, region)
    writes: list[tuple[Hashable, xr.Variable, xr.Variable | None]] = []  # (name, new, stored or None)
    unchanged_required = []
    for name, new in ds.variables.items():
        old = staged.variables.get(name)
        if name in ds.indexes and new.dims == (name,):
            if old is not None:
                _check_labels(where, name, new, old, slab)
                continue
        elif slab and not set(slab) & set(new.dims):
            unchanged_required.append(name)
            continue
        if old is None:
            if mode == "r+" or slab:
                raise IncompatibleDataError(
                    f"dataset contains non-pre-existing variables {[name]!r}, which is not allowed in "
                    f"{where}"
                    + (
                        ": a region write only writes into stored variables"
                        if slab
                        else ". To allow writing new variables, set mode='a'"
                    )
                )
            _check_new_sizes(where, name, new, staged)
            writes.append((name, new, None))
            continue
        writes.append((name, _check_dims(name, new, old, slab), old))
    differ = [n for n in unchanged_required if not _equals_stored(ds.variables[n], staged.variables.get(n))]
    if differ:
        raise IncompatibleDataError(
            f"when setting `region` in {where}, the variables of the Dataset without any of the region's "
            f"dimensions {list(slab)} are not written, so they must equal the stored ones; {differ!r} differ "
            "or are not stored. To drop these variables from this dataset before committing, write: "
            f".drop_vars({differ!r})"
        )
    variables = dict(staged.variables)
    coords = set(staged.coords)
    for name, new, old in writes:
        if old is None:
            variables[name] = new.to_base_variable()
            if name in ds.coords:
                coords.add(name)
        else:
            key = tuple(slab.get(d, slice(None)) for d in old.dims)
            variables[name] = _assign(str(name), old, key, new)
    attrs = dict(staged.attrs)
    if mode == "a":
        attrs.update(ds.attrs)
    out = xr.Dataset(variables, attrs=attrs).set_coords([n for n in coords if n in variables])
    out.encoding = dict(staged.encoding)
    return out


def _check_labels(where: str, name: Hashable, new: xr.Variable, old: xr.Variable, slab: dict) -> None:
    """A dimension coordinate of the Dataset equals the stored labels (within the region)."""
    have = pd.Index(np.asarray(old.values)[slab.get(name, slice(None))])
    got = pd.Index(np.asarray(new.values))
    if have.equals(got):
        return
    pos = next((i for i, (a, b) in enumerate(zip(got, have)) if a != b), min(len(have), len(got)))
    inside = f" at {name}={slab[name]}" if name in slab else ""
    hint = (
        "region='auto' finds the region from the labels"
        if name in slab
        else "mode='w' commits a version that holds exactly this Dataset, labels included"
    )
    raise IncompatibleDataError(
        f"{where}: coordinate {name!r} differs from the stored one{inside}: {len(got)} labels against "
        f"{len(have)} stored, first difference at position {pos} ({_label(got, pos)} against "
        f"{_label(have, pos)}); the values would be stored under the stored labels. {hint}"
    )


def _label(index: pd.Index, i: int) -> str:
    return repr(index[i]) if i < len(index) else "nothing"


def _check_dims(name: Hashable, new: xr.Variable, old: xr.Variable, slab: dict) -> xr.Variable:
    """``new`` transposed to ``old``'s dimensions, which it must have, with the sizes it writes."""
    if new.dims != old.dims:
        if set(new.dims) != set(old.dims):
            raise IncompatibleDataError(
                f"variable {name!r} already exists with different dimension names {old.dims} != {new.dims}, "
                "but changing variable dimensions is not supported by commit()."
            )
        new = new.transpose(*old.dims)
    expected = {d: (slab[d].stop - slab[d].start) if d in slab else n for d, n in old.sizes.items()}
    if dict(new.sizes) != expected:
        raise IncompatibleDataError(
            f"variable {name!r} already exists with different dimension sizes: {expected} != {dict(new.sizes)}. "
            "commit() only supports changing dimension sizes when explicitly appending (append_dim=). If you "
            "are attempting to write to a subset of the existing variable without changing dimension sizes, "
            "consider using the region argument."
        )
    return new


def _check_new_sizes(where: str, name: Hashable, new: xr.Variable, staged: xr.Dataset) -> None:
    conflicts = {d: (n, staged.sizes[d]) for d, n in new.sizes.items() if d in staged.sizes and staged.sizes[d] != n}
    if conflicts:
        raise IncompatibleDataError(
            f"{where}: new variable {name!r} has sizes {dict(new.sizes)}, which conflict with the stored "
            f"dimensions: " + ", ".join(f"{d!r} {n} against {m} stored" for d, (n, m) in conflicts.items())
        )


def _equals_stored(new: xr.Variable, old: xr.Variable | None) -> bool:
    if old is None or set(new.dims) != set(old.dims):
        return False
    return old.to_base_variable().equals(new.to_base_variable().transpose(*old.dims))


def _assign(name: str, old: xr.Variable, key: tuple, new: xr.Variable) -> xr.Variable:
    """``old`` with ``new``'s values at ``key``: staged arrays in place, in-memory values copied."""
    values = np.asarray(new.values)
    data: Any = old.data
    if isinstance(data, (StagedVariableArray, CharArrayValues)):
        data[key] = values  # the staged arrays' casting checks; only the touched chunks change
        return old
    out = np.array(old.values)  # small in-memory variables (strings, scalars, CF-reshaped)
    out[key] = cast_for_storage(values, out.dtype, name)
    return xr.Variable(old.dims, out, old.attrs, old.encoding)
