"""HDF5 filter pipelines as zarr codecs: which chunks a store serves as the file holds them.

A version's chunk is stored in raw_data encoded by raw_data's filter pipeline
(``H5Pget_filter2``, in the order the filters ran at write time). A zarr store
can hand those bytes out unchanged when every filter has a zarr codec that
decodes the same bytes; otherwise it decodes the chunk itself and presents it
uncompressed (the ``bytes`` codec only). The table, HDF5 filter id to codec:

========================  =====================================  ===================================
HDF5 filter               Zarr v3 (:class:`~xarray_vhdf5.store.VersionStore`)   Zarr v2 (reference sets)
========================  =====================================  ===================================
deflate (1)               ``numcodecs.zlib`` (with ``numcodecs=True``)          ``zlib``
shuffle (2)               ``numcodecs.shuffle`` (with ``numcodecs=True``)       ``shuffle``
fletcher32 (3)            ``numcodecs.fletcher32`` (with ``numcodecs=True``)    ``fletcher32``
zstd (hdf5plugin, 32015)  ``zstd``                                              ``zstd``
blosc (hdf5plugin, 32001) ``blosc``                                             ``blosc``
lzf, lz4, szip, nbit,     decoded by the store                                  decoded: not referenced
scaleoffset, others
========================  =====================================  ===================================

HDF5's deflate is a zlib stream (RFC 1950), not the gzip member (RFC 1952) of
Zarr v3's ``gzip`` codec, and the Zarr v3 specification has no zlib, shuffle
or Fletcher-32 codec: zarr-python reads them as numcodecs' extension codecs
and warns that other implementations may not. A :class:`VersionStore` therefore
decodes such chunks itself unless asked (``numcodecs=True``). A chunk whose
filter mask skipped a filter (HDF5 skips an optional filter that cannot
shrink it) is re-encoded by the store so every chunk matches the one codec
list of its array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["FILTER_NAMES", "numcodecs_pipeline", "zarr_v3_codecs"]

DEFLATE, SHUFFLE, FLETCHER32, SZIP, NBIT, SCALEOFFSET = 1, 2, 3, 4, 5, 6
LZF, BLOSC, LZ4, BITSHUFFLE, ZSTD = 32000, 32001, 32004, 32008, 32015

#: Names of HDF5 filters, for messages.
FILTER_NAMES = {
    DEFLATE: "deflate",
    SHUFFLE: "shuffle",
    FLETCHER32: "fletcher32",
    SZIP: "szip",
    NBIT: "nbit",
    SCALEOFFSET: "scaleoffset",
    LZF: "lzf",
    BLOSC: "blosc",
    LZ4: "lz4",
    BITSHUFFLE: "bitshuffle",
    ZSTD: "zstd",
}

# Blosc's compressor codes in hdf5plugin's cd_values[6] (hdf5-blosc's blosc_filter.h).
_BLOSC_CNAMES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}
_BLOSC_SHUFFLES = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


def _name(fid: int) -> str:
    return FILTER_NAMES.get(fid, f"filter {fid}")


def numcodecs_pipeline(filters, dtype: np.dtype) -> tuple[list[dict[str, Any]] | None, str | None]:
    """raw_data's filter pipeline as numcodecs codec configurations, in encoding order.

    Parameters
    ----------
    filters : sequence of (int, int, tuple)
        ``(filter id, flags, cd_values)`` per filter, in HDF5's (encoding) order.
    dtype : numpy.dtype
        The dataset's dtype (the shuffle's element size is its item size).

    Returns
    -------
    (list of dict or None, str or None)
        The ``numcodecs.get_codec`` configurations (``{"id": ..., ...}``), or
        None and the reason when a filter has no numcodecs codec that decodes
        HDF5's bytes.
    """
    out: list[dict[str, Any]] = []
    for fid, _flags, cd in filters:
        cd = tuple(int(c) for c in cd)
        if fid == DEFLATE:
            out.append({"id": "zlib", "level": cd[0] if cd else 4})
        elif fid == SHUFFLE:
            out.append({"id": "shuffle", "elementsize": cd[0] if cd else dtype.itemsize})
        elif fid == FLETCHER32:
            out.append({"id": "fletcher32"})
        elif fid == ZSTD:
            out.append({"id": "zstd", "level": cd[0] if cd else 0})
        elif fid == BLOSC and len(cd) >= 7:
            out.append(
                {
                    "id": "blosc",
                    "cname": _BLOSC_CNAMES.get(cd[6], "blosclz"),
                    "clevel": cd[4],
                    "shuffle": cd[5],
                    "blocksize": 0,
                }
            )
        else:
            return None, f"HDF5 filter {_name(fid)} has no numcodecs codec that decodes its bytes"
    return out, None


def zarr_v3_codecs(filters, dtype: np.dtype, *, numcodecs: bool = False) -> tuple[list[dict] | None, str | None]:
    """raw_data's filter pipeline as a Zarr v3 ``codecs`` list after the ``bytes`` codec.

    Parameters
    ----------
    filters : sequence of (int, int, tuple)
        ``(filter id, flags, cd_values)`` per filter, in HDF5's (encoding) order.
    dtype : numpy.dtype
        The dataset's dtype.
    numcodecs : bool
        Also pass deflate, shuffle and Fletcher-32 through as zarr-python's
        ``numcodecs.*`` extension codecs (which warn that other Zarr
        implementations may not read them). Default False: decoded by the store.

    Returns
    -------
    (list of dict or None, str or None)
        The bytes-to-bytes codecs (``{"name": ..., "configuration": ...}``)
        serving the stored bytes unchanged, or None and the reason the store
        decodes the chunks instead.
    """
    configs, reason = numcodecs_pipeline(filters, dtype)
    if configs is None:
        return None, reason
    out: list[dict] = []
    for config in configs:
        config = dict(config)
        name = config.pop("id")
        if name == "zstd":
            out.append({"name": "zstd", "configuration": {"level": config["level"], "checksum": False}})
        elif name == "blosc":
            out.append(
                {
                    "name": "blosc",
                    "configuration": {
                        "cname": config["cname"],
                        "clevel": config["clevel"],
                        "shuffle": _BLOSC_SHUFFLES.get(config["shuffle"], "noshuffle"),
                        "typesize": dtype.itemsize,
                        "blocksize": 0,
                    },
                }
            )
        elif numcodecs:
            out.append({"name": f"numcodecs.{name}", "configuration": config})
        else:
            return None, (
                f"HDF5's {name} has no Zarr v3 codec (zarr-python's numcodecs.{name} extension with numcodecs=True)"
            )
    return out, None
