"""A committed version as a kerchunk reference set: Zarr v2 metadata and byte ranges of the file.

:func:`version_refs` writes what kerchunk's HDF5 translator writes for a plain
HDF5 file (fsspec's reference file system, format version 1)::

    {"version": 1, "refs": {
        ".zgroup": "{\\"zarr_format\\": 2}",
        ".zattrs": "{...group attributes...}",
        ".zmetadata": "{...every document above and below, consolidated...}",
        "sst/.zarray": "{\\"shape\\": [...], \\"chunks\\": [...], \\"compressor\\": {\\"id\\": \\"zlib\\"}, ...}",
        "sst/.zattrs": "{\\"_ARRAY_DIMENSIONS\\": [\\"TIME\\", \\"lat\\", \\"lon\\"], ...}",
        "sst/0.3.1": ["https://host/copy.h5", 40213, 1184],   # a byte range of the file
        "sst/1.0.0": "base64:eJzt...",                          # an inlined chunk
    }}

so that ``fsspec.filesystem("reference", fo=refs, remote_protocol=...)``,
and through it ``xr.open_dataset("reference://", engine="zarr", ...)``, read
the version from any copy of the file (local, HTTP, object storage) with no
libhdf5: a chunk is one ranged GET of the copy, decoded by numcodecs.

What each array's chunks become, by raw_data's HDF5 filters (:mod:`._codecs`):

==============================================  ==============================================
filters                                         reference set
==============================================  ==============================================
none, deflate, shuffle, fletcher32, zstd,       ``[url, offset, length]`` per mapped chunk;
blosc (any combination)                         ``.zarray`` names the numcodecs codecs
                                                (``filters`` in HDF5's encoding order, the last
                                                compressor as ``compressor``)
one chunk of such an array whose filter mask    that chunk inlined, encoded again with the
skipped a filter, or never allocated            array's codecs (``base64:``)
lzf, lz4, szip, nbit, scaleoffset, other        the whole array inlined, decoded and
plugins; variable-length strings; scalars       uncompressed (no codecs; strings as
                                                numcodecs' ``vlen-utf8``), when its decoded
                                                bytes fit ``max_inline_bytes``; else
                                                ``unreferenced="raise"`` (the default) raises
                                                :class:`~xarray_vhdf5.errors.UnsupportedError`
                                                and ``"skip"`` leaves the array out with an
                                                :class:`UnreferencedArrayWarning`
==============================================  ==============================================

Why lzf is inlined rather than referenced: numcodecs has no LZF codec, and
h5py's LZF filter stores raw LZF blocks without their decoded size, which
imagecodecs' ``Lzf(header=False)`` then has to guess (it fails on chunks that
compress well); a reader would also need imagecodecs' codecs registered.
Datasets meant to be referenced are best written with deflate or zstd.

Chunks the version does not map are omitted: they read as ``.zarray``'s
``fill_value``. That is the dataset's ``_FillValue`` attribute when it has
one (xarray's zarr backend reads a Zarr v2 ``fill_value`` as ``_FillValue``,
``xarray.backends.zarr.ZarrStore.open_store_variable``), else ``null`` (zeros);
when the HDF5 fill value of unmapped chunks differs from that, they are
inlined holding it. Arrays, dimension names (phony ones too), scalars (0-d)
and attributes are :func:`~xarray_vhdf5.store.version_nodes`'s, as
``engine="vhdf5"`` presents them.

A reference set names byte ranges of the file as it was when it was made:
deleting versions or ``modify_metadata`` rewrite raw_data and invalidate it
(make it again); commits only append and do not.
"""

from __future__ import annotations

import base64
import json
import math
import os
import warnings
from typing import Any, Literal

import numpy as np

from .._backend.names import DIMENSIONS_ATTR
from .._versions import VersionedHDF5File
from ..errors import UnsupportedError
from ._codecs import numcodecs_pipeline
from ._metadata import ArrayNode, GroupNode, version_nodes

__all__ = ["UnreferencedArrayWarning", "version_refs", "write_refs"]

#: numcodecs ids that compress (the last of them becomes ``.zarray``'s ``compressor``).
_COMPRESSORS = {"zlib", "zstd", "blosc"}


class UnreferencedArrayWarning(UserWarning):
    """An array left out of a reference set (``unreferenced="skip"``): it can be neither referenced nor inlined."""


def _json_number(value: float) -> float | str:
    """A float as Zarr v2 writes a ``fill_value``: ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` or the number."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _v2_fill(value: Any, dtype: np.dtype) -> Any:
    """``value`` (of ``dtype``) as Zarr v2's ``.zarray`` ``fill_value`` (JSON)."""
    if value is None:
        return None
    value = np.asarray(value).reshape(-1)[0] if np.ndim(value) else value
    if dtype.kind == "S":
        raw = bytes(value) if isinstance(value, (bytes, np.bytes_)) else str(value).encode()
        return base64.standard_b64encode(raw.ljust(dtype.itemsize, b"\0")[: dtype.itemsize]).decode()
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    if dtype.kind == "f":
        return _json_number(float(np.asarray(value, dtype)))
    if dtype.kind == "c":
        value = complex(np.asarray(value, dtype))
        return [_json_number(value.real), _json_number(value.imag)]
    raise UnsupportedError(f"a fill value of dtype {dtype} has no Zarr v2 form")


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """The two 0-d values read alike (NaN equals NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(a == b)


def _inline(data: bytes) -> str:
    return "base64:" + base64.standard_b64encode(data).decode()


def _dumps(document: dict) -> str:
    return json.dumps(document, separators=(",", ":"), allow_nan=True)


class _Array:
    """One array's documents and chunk references (made by :func:`_array_refs`)."""

    def __init__(self, zarray: dict, zattrs: dict, chunks: dict[str, Any]):
        self.zarray, self.zattrs, self.chunks = zarray, zattrs, chunks


def _array_refs(node: ArrayNode, ds, url: str, inline_threshold: int, max_inline_bytes: int | None) -> _Array:
    """The Zarr v2 documents and chunk references of one array, or raise why it cannot have them."""
    dtype = node.dtype
    if dtype.names is not None or dtype.kind in "VU" or dtype.subdtype is not None:
        raise UnsupportedError(f"{node.key}: dtype {dtype} has no Zarr v2 form in a reference set")
    attrs = dict(node.attributes)
    attrs.pop("_FillValue", None)
    attrs[DIMENSIONS_ATTR] = list(node.dimension_names)
    raw_fill = ds.attrs.get("_FillValue")
    manifest = ds.manifest
    if dtype.kind == "O":
        fill, zarr_fill = None, None
    else:
        # xarray reads a Zarr v2 fill_value as _FillValue; zarr reads null as zeros
        fill = np.asarray(raw_fill, dtype).reshape(-1)[0] if raw_fill is not None else None
        zarr_fill = np.asarray(fill if fill is not None else np.zeros((), dtype), dtype)
    configs, why = (
        (None, "a scalar: its one point is inlined")
        if node.scalar
        else (
            (None, "variable-length strings" if dtype.kind == "O" else "a filter without a decoder here")
            if manifest is None
            else numcodecs_pipeline(manifest.filters, ds.dtype)
        )
    )
    zarray: dict[str, Any] = {
        "zarr_format": 2,
        "shape": list(node.shape),
        "chunks": list(node.chunks),
        "dtype": "|O" if dtype.kind == "O" else dtype.str,
        "compressor": None,
        "filters": None,
        "fill_value": _v2_fill(fill, dtype) if dtype.kind != "O" else None,
        "order": "C",
        "dimension_separator": ".",
    }
    if dtype.kind == "O":
        zarray["filters"] = [{"id": "vlen-utf8"}]
    codecs: list = []
    if configs is not None:
        import numcodecs

        codecs = [numcodecs.get_codec(c) for c in configs]
        if configs and configs[-1]["id"] in _COMPRESSORS:
            zarray["compressor"], configs = configs[-1], configs[:-1]
        zarray["filters"] = configs or None

    def encode(arr: np.ndarray) -> bytes:
        if dtype.kind == "O":
            import numcodecs

            values = np.array(
                [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v) for v in arr.reshape(-1)],
                dtype=object,
            )
            return bytes(numcodecs.VLenUTF8().encode(values))
        out: Any = np.ascontiguousarray(arr, dtype).tobytes()
        for codec in codecs:
            out = codec.encode(out)
        return bytes(out)

    refs: dict[str, Any] = {}
    prefix = f"{node.key}/"
    if node.scalar:
        refs[prefix + "0"] = _inline(encode(ds.decoded_chunk((0,)).reshape(-1)[:1]))
        return _Array(zarray, attrs, refs)
    grid = node.grid
    slots = manifest.slots if manifest is not None else np.zeros(grid, np.int32)
    unmapped_differs = manifest is not None and zarr_fill is not None and not _same(manifest.fillvalue, zarr_fill)
    fill_chunk: str | None = None
    inlined = 0
    for index in np.ndindex(*grid):
        key = prefix + ".".join(map(str, index))
        slot = int(slots[index])
        if slot < 0:
            if not unmapped_differs:
                continue  # reads as fill_value
            if fill_chunk is None:
                fill_chunk = _inline(encode(np.full(node.chunks, manifest.fillvalue, dtype)))
            refs[key] = fill_chunk
            continue
        if configs is not None:
            offset, nbytes = int(manifest.offsets[slot]), int(manifest.nbytes[slot])
            if nbytes and not manifest.filter_masks[slot] and nbytes >= inline_threshold:
                refs[key] = [url, offset, nbytes]
                continue
            if nbytes and not manifest.filter_masks[slot]:
                data = ds.stored_chunk(index)[0]  # small: inlined as stored
            else:  # never allocated, or a filter skipped: encoded again as the array's codecs say
                data = encode(ds.decoded_chunk(index))
        else:
            data = encode(ds.decoded_chunk(index))
            inlined += len(data)
            if max_inline_bytes is not None and inlined > max_inline_bytes:
                raise UnsupportedError(
                    f"{node.key}: its chunks cannot be referenced ({why}), and inlined decoded they exceed "
                    f"max_inline_bytes={max_inline_bytes} bytes; raise the limit, or pass "
                    "unreferenced='skip' to leave the array out"
                )
        refs[key] = _inline(data)
    return _Array(zarray, attrs, refs)


def version_refs(
    path: str | os.PathLike,
    version=None,
    group: str | None = None,
    *,
    url: str | None = None,
    inline_threshold: int = 100,
    max_inline_bytes: int | None = 16 * 2**20,
    unreferenced: Literal["raise", "skip"] = "raise",
) -> dict[str, Any]:
    """A kerchunk reference set (format version 1, Zarr v2) of one version of a versioned HDF5 file.

    Parameters
    ----------
    path : str or os.PathLike
        The versioned HDF5 file, read here through libhdf5 once; the
        reference set's readers need only its bytes.
    version : str, int, datetime, numpy.datetime64 or None
        Which version, as ``xr.open_dataset(path, engine="vhdf5", version=...)``
        takes it; None: the current one.
    group : str, optional
        A group inside the version: the reference set's root (default the
        version's group). Subgroups are below it (``xr.open_dataset(...,
        group="sub")``).
    url : str, optional
        Where readers find a byte-for-byte copy of the file
        (``"s3://bucket/data.h5"``, ``"https://host/data.h5"``); default the
        file's absolute path (read with ``remote_protocol="file"``).
    inline_threshold : int
        Stored chunks smaller than this many bytes are inlined as the file
        holds them (kerchunk's default, 100 bytes): fewer requests.
    max_inline_bytes : int or None
        The most bytes one array whose chunks cannot be referenced (lzf,
        variable-length strings, see the module docstring) may inline
        decoded; None: no limit.
    unreferenced : {"raise", "skip"}
        An array that cannot be referenced or inlined (over
        ``max_inline_bytes``, or a dtype Zarr v2 cannot describe: compound,
        array or ``U`` dtypes): raise (default), or leave it out with an
        :class:`UnreferencedArrayWarning`.

    Returns
    -------
    dict
        ``{"version": 1, "refs": {key: value}}``: ``value`` a JSON document
        (str), ``"base64:..."`` (an inlined chunk) or ``[url, offset, length]``
        (offset and length in bytes of the file). Keys: ``.zgroup``,
        ``.zattrs``, ``.zmetadata`` (consolidated), ``<array>/.zarray``,
        ``<array>/.zattrs`` (with ``_ARRAY_DIMENSIONS``), ``<array>/<i>.<j>``.
        ``json.dump`` writes it (:func:`write_refs`).

    Raises
    ------
    FileNotFoundError, NotHDF5Error, NotVersionedError
        No such file, not HDF5, no version history.
    VersionNotFoundError
        No such version.
    KeyError
        No such group in the version, or ``group`` names a dataset.
    UnsupportedError
        (``unreferenced="raise"``) An array that can be neither referenced
        nor inlined; the message says which and why.
    ValueError
        ``unreferenced`` is not ``"raise"`` or ``"skip"``, or ``inline_threshold`` is negative.
    """
    if unreferenced not in ("raise", "skip"):
        raise ValueError(f"unreferenced must be 'raise' or 'skip', got {unreferenced!r}")
    if inline_threshold < 0:
        raise ValueError(f"inline_threshold must be >= 0 bytes, got {inline_threshold}")
    path = os.path.abspath(os.fspath(path))
    url = path if url is None else str(url)
    reader = VersionedHDF5File.open(path)
    try:
        root = reader[reader.lookup(version)]
        grp = root if group in (None, "", "/") else root[str(group).strip("/")]
        if hasattr(grp, "shape"):
            raise KeyError(f"{group!r} in version {version!r} is a dataset, not a group")
        nodes = version_nodes(grp)
        docs: dict[str, dict] = {}
        chunks: dict[str, Any] = {}
        for key, node in nodes.items():
            prefix = f"{key}/" if key else ""
            if isinstance(node, GroupNode):
                docs[prefix + ".zgroup"] = {"zarr_format": 2}
                docs[prefix + ".zattrs"] = node.attributes
                continue
            try:
                array = _array_refs(node, grp[node.key], url, inline_threshold, max_inline_bytes)
            except UnsupportedError as err:
                if unreferenced == "raise":
                    raise
                warnings.warn(f"left out of the reference set: {err}", UnreferencedArrayWarning, stacklevel=2)
                continue
            docs[prefix + ".zarray"] = array.zarray
            docs[prefix + ".zattrs"] = array.zattrs
            chunks.update(array.chunks)
    finally:
        reader.close()
    refs: dict[str, Any] = {key: _dumps(doc) for key, doc in docs.items()}
    refs[".zmetadata"] = _dumps({"zarr_consolidated_format": 1, "metadata": docs})
    refs.update(chunks)
    return {"version": 1, "refs": refs}


def write_refs(refs: dict[str, Any], out: str | os.PathLike) -> None:
    """Write a reference set (:func:`version_refs`) as JSON to the file ``out``."""
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(refs, fh, separators=(",", ":"))
