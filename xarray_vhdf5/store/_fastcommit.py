"""A writable store's commit for the common case, straight into the staged HDF5 version.

zarr's daily ``to_zarr(store, mode="a", append_dim="time")`` (or a
``region=`` write) over a version changes nothing but chunks of arrays the
version already holds, and their shapes. :func:`plan_fast_commit` recognizes
that case from the overlay (:mod:`._overlay`) alone, without opening anything:

- the root group's ``zarr.json`` and attributes are unchanged, nothing is
  deleted as a directory, no array is added or removed, no key is written
  below the root's arrays but their ``zarr.json`` and chunk keys;
- each changed array is a chunk-mapped dataset of the base (numeric, not a
  scalar) and its new ``zarr.json`` equals the base's but for ``shape``
  (same ndim): same data type, chunk grid, fill value, codecs and
  ``dimension_names``; its attributes are unchanged, or changed only in
  names outside the CF attributes xarray encodes (:data:`CF_NAMES`), to
  strings, numbers or booleans;
- every codec after ``bytes`` is one numcodecs decodes (:data:`_NUMCODECS`).

:func:`fast_commit` then does in one ``stage_version`` what
:func:`~xarray_vhdf5.xr._stage.commit_staged` would do for such a write: the
stale-parent check, each changed dataset's staged array taken from the base
version's stored chunk map (:func:`~xarray_vhdf5._versions.chunkmaps.load`,
the virtual dataset not decoded), resized to zarr's shape, every chunk zarr
wrote decoded with the array's codecs and assigned (its part inside the
shape), chunks zarr deleted filled, changed attributes set, the message
written, dimension scales attached inside the commit
(:func:`~xarray_vhdf5.xr._dimscales.attach_dimension_scales`), the empty
commit refused. Everything else goes through the ``xr`` layer as before
(:mod:`._staged`). ``tests/test_store_fastcommit.py`` checks that both paths
store the same chunks and attributes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._backend.hashtable import hash_table_id, table_state
from .._backend.names import MESSAGE_ATTR
from .._staging import StagedChangesArray
from .._versions import chunkmaps
from .._versions.file import VersionedHDF5File
from .._versions.mutation import open_for_writing
from .._versions.states import same_attr_value
from .._versions.timestamps import to_utc_datetime
from ..errors import StaleVersionError
from ..xr import _reading
from ..xr._commit_checks import refuse_empty_commit
from ..xr._dimscales import attach_dimension_scales
from ..xr._writer import next_version_name
from ._metadata import ArrayNode

if TYPE_CHECKING:
    from ._store import VersionStore, _Version

__all__ = ["CF_NAMES", "FastPlan", "fast_commit", "plan_fast_commit"]

_CHUNK_KEY = re.compile(r"^([^/]+)/c((?:/\d+)*)$")

#: Attribute names whose change the fast path leaves to the ``xr`` layer (CF encoding, netCDF bookkeeping).
CF_NAMES = frozenset(
    {
        "_FillValue",
        "missing_value",
        "scale_factor",
        "add_offset",
        "units",
        "calendar",
        "dtype",
        "_Unsigned",
        "_Encoding",
        "coordinates",
        "grid_mapping",
        "bounds",
        "_ARRAY_DIMENSIONS",
        "DIMENSION_LIST",
        "REFERENCE_LIST",
        "CLASS",
        "NAME",
        "_Netcdf4Dimid",
        "_Netcdf4Coordinates",
        "_nc3_strict",
    }
)

#: Bytes-to-bytes codecs (Zarr v3 names) decoded here, with the numcodecs codec id that decodes them.
#: Those a store presents (:func:`~xarray_vhdf5.store._codecs.zarr_v3_codecs`); zarr-python's own
#: ``zstd`` and ``blosc`` codecs encode through these numcodecs classes.
_NUMCODECS = {
    "zstd": "zstd",
    "blosc": "blosc",
    "numcodecs.zlib": "zlib",
    "numcodecs.shuffle": "shuffle",
    "numcodecs.fletcher32": "fletcher32",
}


def _json_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=True)


@dataclass
class _ArrayChange:
    """What zarr changed in one array of the base: its shape, chunks and attributes."""

    node: ArrayNode
    shape: tuple[int, ...]
    written: list[tuple[tuple[int, ...], str]] = field(default_factory=list)  # (chunk index, key)
    deleted: list[tuple[int, ...]] = field(default_factory=list)
    attrs_set: dict[str, Any] = field(default_factory=dict)
    attrs_removed: list[str] = field(default_factory=list)
    endian: str = "little"
    codecs: list[dict] = field(default_factory=list)  # bytes-to-bytes, in encoding order
    decode: Any = None  # bytes -> the chunk (numpy, chunk shape), from :func:`_decoder`


@dataclass
class FastPlan:
    """A store commit :func:`fast_commit` can do: the changed arrays by key."""

    changes: dict[str, _ArrayChange]


def _load(raw) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def plan_fast_commit(state: _Version, overlay) -> FastPlan | str:
    """The fast commit's plan for ``overlay`` over base ``state``, or why it does not apply (a str).

    Reads the overlay's keys and ``zarr.json`` documents only (see the module
    docstring for the conditions). Never raises for a store the ``xr`` layer
    commits: any doubt is a reason to take that path.
    """
    if state.version is None or not state.nodes or "" not in state.nodes:
        return "no base version"
    if overlay.cleared:
        return "a directory was deleted"
    arrays = {k: n for k, n in state.nodes.items() if isinstance(n, ArrayNode)}
    changes: dict[str, _ArrayChange] = {}

    def change_of(key: str) -> _ArrayChange | str:
        got = changes.get(key)
        if got is not None:
            return got
        node = arrays.get(key)
        if node is None:
            return f"{key!r} is not an array of the base"
        if node.scalar or not node.shape or node.dtype.kind not in "biufc":
            return f"array {key!r} is not a numeric chunked array"
        if any(d is None for d in node.dimension_names) or len(node.dimension_names) != len(node.shape):
            return f"array {key!r} has no dimension names"
        base = _load(state.documents.get(f"{key}/zarr.json", b""))
        if not isinstance(base, dict):
            return f"array {key!r} has no base document"
        raw = overlay.value(f"{key}/zarr.json")
        doc = base if raw is None else _load(raw)
        if not isinstance(doc, dict) or doc.get("node_type") != "array" or doc.get("zarr_format") != 3:
            return f"{key}/zarr.json is not a Zarr v3 array document"
        same = {k: v for k, v in doc.items() if k not in ("shape", "attributes")}
        if _json_key(same) != _json_key({k: v for k, v in base.items() if k not in ("shape", "attributes")}):
            return f"array {key!r}: data type, chunks, fill value, codecs or dimension names changed"
        shape = doc.get("shape")
        if (
            not isinstance(shape, list)
            or len(shape) != len(node.shape)
            or not all(isinstance(n, int) and n >= 0 for n in shape)
        ):
            return f"array {key!r}: shape {shape!r}"
        codecs = doc.get("codecs") or []
        if not codecs or codecs[0].get("name") != "bytes":
            return f"array {key!r}: its codecs do not start with bytes"
        endian = (codecs[0].get("configuration") or {}).get("endian", "little")
        for codec in codecs[1:]:
            if codec.get("name") not in _NUMCODECS:
                return f"array {key!r}: codec {codec.get('name')!r}"
        change = _ArrayChange(node, tuple(shape), endian=endian, codecs=list(codecs[1:]))
        try:
            change.decode = _decoder(change)
        except Exception as error:  # noqa: BLE001 a codec numcodecs does not build here: the xr path decodes through zarr
            return f"array {key!r}: its codecs do not build in numcodecs ({error})"
        new_attrs, old_attrs = doc.get("attributes") or {}, base.get("attributes") or {}
        if _json_key(new_attrs) != _json_key(old_attrs):
            for name in old_attrs:
                if name not in new_attrs:
                    if name in CF_NAMES:
                        return f"array {key!r}: attribute {name!r} removed"
                    change.attrs_removed.append(name)
            for name, value in new_attrs.items():
                if name in old_attrs and _json_key(old_attrs[name]) == _json_key(value):
                    continue
                if name in CF_NAMES or name.startswith("_") or not isinstance(value, (str, int, float, bool)):
                    return f"array {key!r}: attribute {name!r} changed to {value!r}"
                change.attrs_set[name] = value
        changes[key] = change
        return change

    for key in overlay.written:
        if key == "zarr.json":
            root = _load(overlay.value(key))
            base_root = state.nodes[""]
            if (
                not isinstance(root, dict)
                or root.get("node_type") != "group"
                or root.get("zarr_format") != 3
                or _json_key(root.get("attributes") or {}) != _json_key(base_root.attributes)
            ):
                return "the root group's document or attributes changed"
            continue
        if key.endswith("/zarr.json") and "/" not in key[: -len("/zarr.json")]:
            got = change_of(key[: -len("/zarr.json")])
            if isinstance(got, str):
                return got
            continue
        got = _chunk_of(key, change_of, "written")
        if isinstance(got, str):
            return got
        got[0].written.append((got[1], key))
    for key in overlay.deleted:
        if key in overlay.written:
            continue
        got = _chunk_of(key, change_of, "deleted")
        if isinstance(got, str):
            return got
        got[0].deleted.append(got[1])
    return FastPlan(changes)


def _chunk_of(key: str, change_of, what: str):
    """``(the array's change, chunk index)`` a written or deleted chunk key names, or why the fast path cannot."""
    m = _CHUNK_KEY.match(key)
    if m is None:
        return f"key {key!r} ({what}) is not a root array's chunk" + ("" if what == "deleted" else " or document")
    got = change_of(m.group(1))
    if isinstance(got, str):
        return got
    index = tuple(int(p) for p in m.group(2).split("/")[1:])
    if len(index) != len(got.shape):
        return f"{what} chunk key {key!r} does not match its array's {len(got.shape)} axes"
    return got, index


def _decoder(change: _ArrayChange):
    """bytes -> the chunk as numpy (chunk shape, the array's dtype), through the array's codecs."""
    import numcodecs

    decoders = []
    for codec in reversed(change.codecs):
        config = dict(codec.get("configuration") or {})
        name = _NUMCODECS[codec["name"]]
        if name in ("zstd", "blosc"):
            config = {}  # decoding needs none of the encoder's settings
        decoders.append(numcodecs.get_codec({"id": name, **config}))
    node = change.node
    dtype = node.dtype.newbyteorder(">" if change.endian == "big" else "<")
    chunks = tuple(node.chunks)

    def decode(data: bytes) -> np.ndarray:
        for codec in decoders:
            data = codec.decode(data)
        return np.frombuffer(data, dtype).reshape(chunks)

    return decode


def _region(index: tuple[int, ...], chunks: tuple[int, ...], shape: tuple[int, ...]) -> tuple[slice, ...] | None:
    region = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, chunks, shape))
    return None if any(s.start >= s.stop for s in region) else region


def _stage_array(f, target, parent: str, path: str) -> None:
    """Give staged dataset ``target`` its array from the parent's stored chunk map, when there is one.

    Without one (fewer than :data:`~xarray_vhdf5._versions.chunkmaps.MIN_CHUNKS`
    chunks, or a map not to trust) the dataset builds it from its virtual
    dataset on first use, as any staged dataset does.
    """
    layout = chunkmaps.load(f, parent, path)
    if layout is None or tuple(layout.shape) != tuple(target.shape) or tuple(layout.chunks) != tuple(target.chunks):
        return
    raw = layout.raw_data
    if raw.dtype != target.dtype:
        return
    try:
        state = table_state(hash_table_id(raw))
    except KeyError:
        state = None
    mapped = layout.starts >= 0
    arr = StagedChangesArray(
        layout.shape,
        layout.chunks,
        [raw],
        mapped.astype(np.intp),
        np.where(mapped, layout.starts, 0).astype(np.uint64),
        fill_value=raw.fillvalue,
        dtype=raw.dtype,
    )
    target.replace_array(arr, state)


def fast_commit(
    store: VersionStore,
    state: _Version,
    plan: FastPlan,
    version: str | None,
    *,
    message: str | None,
    timestamp,
    make_current: bool,
    allow_empty: bool,
    force: bool,
) -> str:
    """Commit ``plan`` (from :func:`plan_fast_commit`) as one new version; returns its name.

    Raises
    ------
    StaleVersionError
        The file's current version is no longer the store's base and
        ``force`` is False; nothing is written.
    NothingToCommitError
        The new version equals its parent and ``allow_empty`` is False.
    VersionExistsError
        ``version`` exists.
    """
    overlay = store._writes.overlay
    parent = state.version
    assert parent is not None  # plan_fast_commit gives no plan without a base version
    source = store.path
    _drop_unchanged(store, state, plan, overlay)
    _reading.close_read_handles(source)
    with open_for_writing(source) as f:
        vf = VersionedHDF5File(f)
        current = vf.current_version
        if current != parent and not force:
            raise StaleVersionError(
                f"{source!r}: staged from version {parent!r}, but the current version is now {current!r}: "
                f"committing would undo the versions since. Stage again from {current!r}, "
                f"commit(rebase=True) to merge onto it, or commit(force=True) to commit on top of "
                f"{parent!r} anyway (a branch)"
            )
        name = version if version is not None else next_version_name(vf)
        when = None if timestamp is None else to_utc_datetime(timestamp)  # stage_version takes UTC only
        with vf.stage_version(
            name, prev_version=parent, make_current=make_current, timestamp=when, finish=attach_dimension_scales
        ) as root:
            for change in plan.changes.values():
                _apply(f, root, change, parent, overlay)
            if not allow_empty:
                refuse_empty_commit(root, f, parent, name)
            root.attrs.pop(MESSAGE_ATTR, None)
            if message is not None:
                root.attrs[MESSAGE_ATTR] = message
    _reading.close_read_handles(source)
    return name


def _drop_unchanged(store: VersionStore, state: _Version, plan: FastPlan, overlay) -> None:
    """Forget chunk writes whose bytes are the base's chunk (zarr's ``mode="a"`` rewrites every variable
    without the append dimension), and arrays left with no change at all.

    Only chunks whose part inside the new shape lies inside the base's: past
    the base's shape its stored padding is not what the new points read.
    """
    for key, change in list(plan.changes.items()):
        node = change.node
        kept = []
        for index, chunk_key in change.written:
            inside = all(min((i + 1) * c, m) <= n for i, c, m, n in zip(index, node.chunks, change.shape, node.shape))
            if inside and node.codecs is not None and not node.scalar:
                base = store._chunk(state, node, index)
                if base is not None and base == overlay.value(chunk_key):
                    continue
            kept.append((index, chunk_key))
        change.written = kept
        if (
            not kept
            and not change.deleted
            and change.shape == tuple(node.shape)
            and not change.attrs_set
            and not change.attrs_removed
        ):
            del plan.changes[key]


def _apply(f, root, change: _ArrayChange, parent: str, overlay) -> None:
    """Write ``change`` into its staged dataset (``root[node.source]``, ``root`` the new version's group)."""
    node = change.node
    path = node.source
    target = root[path]
    chunks, shape = tuple(node.chunks), change.shape
    if change.written or change.deleted or shape != tuple(target.shape):
        _stage_array(f, target, parent, path)
        if shape != tuple(target.shape):
            target.resize(shape)
        for index in change.deleted:
            region = _region(index, chunks, shape)
            if region is not None:
                target[region] = np.full(tuple(s.stop - s.start for s in region), node.fill_value, node.dtype)
        if change.written:
            decode = change.decode
            for index, key in change.written:
                region = _region(index, chunks, shape)
                if region is None:
                    continue
                values = decode(overlay.value(key))
                target[region] = values[tuple(slice(0, s.stop - s.start) for s in region)]
    for name in change.attrs_removed:
        if name in target.attrs:
            del target.attrs[name]
    for name, value in change.attrs_set.items():
        if name in target.attrs and same_attr_value(target.attrs[name], value):
            continue  # kept as stored, value and type (the xr path's kept_attrs)
        target.attrs[name] = value
