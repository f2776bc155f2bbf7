"""A writable store's commit: zarr's writes over a version become one new version, chunk by chunk.

:func:`commit_store` reads what zarr left in the overlay (:mod:`._overlay`)
and hands it to the ``xr`` layer, so a store commit does what
``ds.vhdf5.commit`` does (dimension scales, netCDF bookkeeping, the
stale-parent check, dedupe by chunk hash):

1. The final ``zarr.json`` documents (the overlay's over the base's) say which
   arrays the version will hold, their shape, dtype, chunk grid, attributes
   and ``dimension_names``.
2. The base version is opened raw (``engine="vhdf5", decode_cf=False``: the
   values zarr holds are the stored, CF-encoded ones) and staged
   (:func:`~xarray_vhdf5.xr._stage.stage_dataset`): each chunk-mapped variable
   is a :class:`~xarray_vhdf5.xr._staged_array.StagedVariableArray` over its
   :class:`~xarray_vhdf5._staging.StagedChangesArray`.
3. An array the base holds with the same dtype and chunk shape (zarr's
   ``mode="a"``, ``append_dim=``, ``region=``) keeps its staged array: it is
   resized to the new shape, every chunk zarr wrote is decoded (zarr's own
   codec pipeline: the array opened with zarr over a read-only view of the
   store) and assigned into it, and a chunk zarr deleted (an all-fill chunk,
   ``write_empty_chunks=False``) is filled. Unwritten chunks are neither
   read nor rewritten. Attributes whose JSON did not change keep their stored
   value and type; changed ones take the JSON value (``_FillValue`` decoded as
   xarray writes it for Zarr v3, cast to the array's dtype).
4. Other arrays (new, replaced after ``mode="w"`` or a delete, scalars,
   strings, in-memory index coordinates that changed) are read whole through
   zarr and written as new variables with zarr's chunk shape, deduplicated by
   chunk hash against every earlier version.
5. :func:`~xarray_vhdf5.xr._stage.commit_staged` writes the version; with no
   base (a new file, a new group), :func:`~xarray_vhdf5.xr._writer.commit_dataset`.

The common case, chunk writes and growth of arrays the base holds with their
dtype, chunks and codecs (the daily ``append_dim=``), skips steps 2-5: the
chunks are decoded and written into the staged HDF5 version directly
(:mod:`._fastcommit`, the same chunks and attributes stored, about 5x faster).

Only arrays at the store's root are committed: a store is one group
(``VersionStore(path, group="sub")`` writes a subgroup). Keys that are not
Zarr v3 documents or chunk keys of an array (what zarr's conformance tests
set) are not committed.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from ..errors import NothingToCommitError, StaleVersionError, UnsupportedError
from ..xr._stage import commit_staged, stage_dataset
from ..xr._staged_array import StagedVariableArray
from ..xr._writer import commit_dataset
from ._metadata import ArrayNode

if TYPE_CHECKING:
    from ._store import VersionStore, _Version

__all__ = ["commit_store"]

_CHUNK_KEY = re.compile(r"^([^/]+)/c((?:/\d+)*)$")

#: Commit chunk writes to arrays the base holds (zarr's ``append_dim=``, ``region=``) straight into
#: the staged version (:mod:`._fastcommit`); False: always through the ``xr`` layer (for comparisons).
FAST_COMMIT = True


def _json_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=True)


def _documents(state: _Version, overlay) -> dict[str, dict]:
    """The store's visible ``zarr.json`` documents, parsed, by node key (``""`` the root)."""
    keys = set()
    for key in overlay.written:
        if key == "zarr.json" or key.endswith("/zarr.json"):
            keys.add(key)
    for key in state.documents:
        if key not in overlay.written and not overlay.hides(key):
            keys.add(key)
    out = {}
    for key in keys:
        raw = overlay.value(key)
        if raw is None:
            raw = state.documents[key]
        try:
            doc = json.loads(raw)
        except ValueError as error:
            raise UnsupportedError(f"{key!r} is not a Zarr v3 document (JSON: {error}); nothing committed") from None
        if not isinstance(doc, dict) or doc.get("zarr_format") != 3:
            raise UnsupportedError(
                f"{key!r}: only Zarr v3 documents are committed (zarr_format=3), got "
                f"zarr_format={doc.get('zarr_format') if isinstance(doc, dict) else None!r}"
            )
        out[key[: -len("zarr.json")].rstrip("/")] = doc
    return out


def _written_chunks(overlay, key: str, ndim: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Chunk indices of array ``key`` zarr wrote, and those it deleted (not written again)."""
    written: list[tuple[int, ...]] = []
    deleted: list[tuple[int, ...]] = []
    for keys, out in ((overlay.written, written), (overlay.deleted, deleted)):
        for k in keys:
            m = _CHUNK_KEY.match(k)
            if m is None or m.group(1) != key:
                continue
            index = tuple(int(p) for p in m.group(2).split("/")[1:])
            if len(index) == ndim and (out is written or k not in overlay.written):
                out.append(index)
    return written, deleted


def _attrs(new: dict, base_json: dict | None, base_values, dtype: np.dtype | None) -> dict:
    """Attributes from a document's JSON; over a base, only those whose JSON changed are taken from it.

    With a base (``base_json``: the JSON the store presented, ``base_values``:
    the stored attributes), the stored attributes are kept, values and types,
    except those the document changed, added (from the JSON) or removed.
    ``_FillValue`` is decoded as xarray writes it for Zarr v3 and cast to ``dtype``.
    """
    from xarray.backends.zarr import FillValueCoder  # xarray's Zarr v3 rule for _FillValue

    def decoded(name, value):
        if name == "_FillValue" and dtype is not None and dtype.kind in "biufcS" and value is not None:
            return np.asarray(FillValueCoder.decode(value, dtype), dtype)[()]
        return value

    if base_json is None:
        return {name: decoded(name, value) for name, value in new.items()}
    out = dict(base_values)
    for name in base_json:
        if name not in new:
            out.pop(name, None)
    for name, value in new.items():
        if name in base_json and name in out and _json_key(base_json[name]) == _json_key(value):
            continue
        out[name] = decoded(name, value)
    return out


def _region(index: tuple[int, ...], chunks: tuple[int, ...], shape: tuple[int, ...]) -> tuple[slice, ...] | None:
    region = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, chunks, shape))
    return None if any(s.start >= s.stop for s in region) else region


#: A new array larger than this (bytes) is committed as a dask array over zarr's chunks: streamed
#: in batches of ``max_bytes`` (the writer's :mod:`~xarray_vhdf5.xr._streaming`), not read whole.
STREAM_BYTES = 16 * 2**20


def _values(array):
    """The points of zarr ``array``: numpy, or a dask array of its chunks when large (streamed)."""
    dtype = array.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "biufc" and array.ndim and array.nbytes > STREAM_BYTES:
        import uuid

        import dask.array as da

        return da.from_array(
            array, chunks=array.chunks, lock=False, asarray=True, name=f"vhdf5-store-{uuid.uuid4().hex}"
        )  # named: zarr's array is not tokenized
    values = np.asarray(array[...])
    if values.dtype.kind == "T":  # numpy's StringDType: the writer stores object strings
        values = values.astype(object)
    return values


def _in_this_process():
    """dask computes in threads here: the arrays read through this process's store (it does not pickle)."""
    try:
        import dask
    except ImportError:  # pragma: no cover - dask is a dependency of the streaming writer
        import contextlib

        return contextlib.nullcontext()
    return dask.config.set(scheduler="threads")


class _Plan:
    """What the final documents say about the store's root group."""

    def __init__(self, store: VersionStore, state: _Version, overlay) -> None:
        docs = _documents(state, overlay)
        root = docs.get("")
        if root is None or root.get("node_type") != "group":
            raise NothingToCommitError(
                f"{store.path!r}: the store holds no Zarr v3 group at its root (zarr.json); write one "
                "(ds.to_zarr(store)) before commit(); nothing committed"
            )
        self.attributes = root.get("attributes") or {}
        self.arrays: dict[str, dict] = {}
        for key, doc in docs.items():
            if not key:
                continue
            changed = _changed_under(overlay, key) or key not in state.nodes
            if "/" in key or doc.get("node_type") != "array":
                if changed:
                    raise UnsupportedError(
                        f"{store.path!r}: zarr wrote {key!r}, below the store's root group; a commit holds "
                        f"the root group's arrays only: write subgroups through "
                        f"VersionStore(path, group=...) each; nothing committed"
                    )
                continue
            self.arrays[key] = doc


def _changed_under(overlay, key: str) -> bool:
    prefix = key + "/"
    return (
        any(k.startswith(prefix) for k in overlay.written)
        or any(k.startswith(prefix) for k in overlay.deleted)
        or any(p.startswith(prefix) or prefix.startswith(p) for p in overlay.cleared)
    )


def commit_store(
    store: VersionStore,
    version: str | None = None,
    *,
    message: str | None = None,
    timestamp=None,
    make_current: bool = True,
    allow_empty: bool = False,
    force: bool = False,
) -> str:
    """Commit the writes of writable ``store`` as one new version (see the module docstring).

    Returns the new version's name; raises as :meth:`VersionStore.commit`.
    """
    import zarr

    state = store._ensure_state()
    session = store._writes
    overlay = session.overlay
    plan = _Plan(store, state, overlay)
    if FAST_COMMIT:
        from ._fastcommit import fast_commit, plan_fast_commit

        fast = plan_fast_commit(state, overlay)
        if not isinstance(fast, str):
            return fast_commit(
                store,
                state,
                fast,
                version,
                message=message,
                timestamp=timestamp,
                make_current=make_current,
                allow_empty=allow_empty,
                force=force,
            )
    view = store.with_read_only(True)  # zarr reads decoded chunks through it: overlay over base

    def open_array(key: str):
        return zarr.open_array(view, path=key, mode="r", zarr_format=3)

    with _in_this_process():
        return _commit(
            store,
            state,
            plan,
            open_array,
            version,
            message=message,
            timestamp=timestamp,
            make_current=make_current,
            allow_empty=allow_empty,
            force=force,
        )


def _commit(store, state, plan, open_array, version, *, message, timestamp, make_current, allow_empty, force):
    overlay = store._writes.overlay
    if state.version is None or not state.nodes:
        return _commit_new(
            store,
            state,
            plan,
            open_array,
            version,
            message=message,
            timestamp=timestamp,
            make_current=make_current,
            allow_empty=allow_empty,
            force=force,
        )

    group = store.group
    opened = xr.open_dataset(store.path, engine="vhdf5", version=state.version, group=group, decode_cf=False)
    try:
        staged = stage_dataset(opened)
        try:
            variables = {}
            for key, doc in plan.arrays.items():
                variables[key] = _variable(key, doc, state, overlay, staged, open_array)
            root = state.nodes[""]
            attrs = _attrs(plan.attributes, root.attributes, staged.attrs, None)
            new = xr.Dataset(variables, attrs=attrs)
            new.encoding = dict(staged.encoding)
            return commit_staged(
                new,
                version,
                message=message,
                timestamp=timestamp,
                make_current=make_current,
                force=force,
                allow_empty=allow_empty,
            )
        finally:
            staged.close()
    finally:
        opened.close()


def _variable(key: str, doc: dict, state: _Version, overlay, staged: xr.Dataset, open_array) -> xr.Variable:
    """The variable ``key`` of the new version, its staged array changed only where zarr wrote."""
    array = open_array(key)
    shape, chunks = tuple(array.shape), tuple(array.chunks)
    dtype = array.dtype if isinstance(array.dtype, np.dtype) else np.dtype(object)
    dims = tuple(doc.get("dimension_names") or ())
    if len(dims) != len(shape) or any(d is None for d in dims):
        raise UnsupportedError(
            f"array {key!r} has no dimension_names for each of its {len(shape)} axes "
            f"(got {doc.get('dimension_names')!r}); xarray writes them; nothing committed"
        )
    node = state.nodes.get(key)
    base = staged.variables.get(key)
    doc_key = f"{key}/zarr.json"
    if not (
        isinstance(node, ArrayNode)
        and base is not None
        and not overlay.hides(doc_key)
        and not any(p.startswith(key + "/") or (key + "/").startswith(p) for p in overlay.cleared)
        and node.dtype == dtype
        and tuple(node.chunks) == chunks
        and base.ndim == len(shape)
    ):
        attrs = _attrs(doc.get("attributes") or {}, None, {}, dtype)
        # zarr's chunk grid, unless the base holds the name: its raw_data fixed the chunk shape
        # (the commit inherits it; zarr's grid then differs from the stored one)
        encoding = {"chunks": chunks} if shape and node is None else {}
        return xr.Variable(dims, _values(array), attrs, encoding)
    attrs = _attrs(doc.get("attributes") or {}, node.attributes, base.attrs, dtype)
    written, deleted = _written_chunks(overlay, key, len(shape))
    data = base.data
    if not isinstance(data, StagedVariableArray):  # in memory (an index, a scalar, strings)
        if not written and not deleted and tuple(base.shape) == shape:
            return xr.Variable(dims, base.data, attrs, base.encoding)
        return xr.Variable(dims, _values(array), attrs, base.encoding)
    if tuple(data.shape) != shape:
        data.resize(shape)
    fill = array.fill_value
    for index in deleted:
        region = _region(index, chunks, shape)
        if region is not None:
            data[region] = np.full(tuple(s.stop - s.start for s in region), fill, dtype)
    for index in written:
        region = _region(index, chunks, shape)
        if region is not None:
            data[region] = np.asarray(array[region])
    return xr.Variable(dims, data, attrs, base.encoding)


def _commit_new(
    store: VersionStore,
    state: _Version,
    plan: _Plan,
    open_array,
    version,
    *,
    message,
    timestamp,
    make_current,
    allow_empty,
    force,
) -> str:
    """No base version (a new file, or a group the version lacks): commit the arrays as a Dataset."""
    from ._store import _has_history

    if state.version is None and not force and _has_history(store.path):
        from .._versions import VersionedHDF5File

        with VersionedHDF5File.open(store.path) as reader:
            current = reader.current_version
        if current is not None:
            raise StaleVersionError(
                f"{store.path!r}: the store opened a file without versions, but version {current!r} was "
                "committed since: committing would write over it. Open a new store over the current version "
                "and write again; nothing was written"
            )
    variables = {}
    for key, doc in plan.arrays.items():
        array = open_array(key)
        dims = tuple(doc.get("dimension_names") or ())
        if len(dims) != array.ndim or any(d is None for d in dims):
            raise UnsupportedError(
                f"array {key!r} has no dimension_names for each of its {array.ndim} axes "
                f"(got {doc.get('dimension_names')!r}); nothing committed"
            )
        dtype = array.dtype if isinstance(array.dtype, np.dtype) else np.dtype(object)
        attrs = _attrs(doc.get("attributes") or {}, None, {}, dtype)
        encoding = {"chunks": tuple(array.chunks)} if array.ndim else {}
        variables[key] = xr.Variable(dims, _values(array), attrs, encoding)
    ds = xr.Dataset(variables, attrs=_attrs(plan.attributes, None, {}, None))
    return commit_dataset(
        ds,
        store.path,
        version,
        group=store.group,
        message=message,
        timestamp=timestamp,
        make_current=make_current,
        expected_current=None if force else state.version,
        allow_empty=allow_empty,
    )
