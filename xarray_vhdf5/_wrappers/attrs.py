"""Attribute mappings of staged (editable) and committed (read-only) objects."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import h5py
import numpy as np
from h5py import h5a

from .._backend.h5attrs import UNREAD, attrs_by_index, read_attr_of
from .._backend.h5objects import object_info_by_name
from .._backend.names import NETCDF_REFERENCE_ATTRS
from ..errors import ReadOnlyError
from .closed import RESTAGE, closed_file_error, reads_file

__all__ = ["RESERVED_ATTRS", "ReadOnlyAttrs", "StagedAttrs"]

#: Attributes the format writes itself; users cannot set them on staged objects.
RESERVED_ATTRS = frozenset({"raw_data", "chunks", "committed", "prev_version", "timestamp"})


#: Attributes read only when asked for: netCDF-4's object references, which a commit drops unread
#: (``versions.commit``) and the xarray layer writes again (``xr._dimscales``).
_DEFERRED = NETCDF_REFERENCE_ATTRS


class StagedAttrs(MutableMapping):
    """Attributes of a staged group or dataset, held in memory until commit.

    Attributes inherited from the previous version are read on first use
    (nothing is read for an object whose attributes are never looked at) and
    keep their HDF5 dtype (e.g. fixed-length vs variable-length strings) when
    written back unchanged. :attr:`changed` tells whether any was set or
    deleted since.

    Parameters
    ----------
    source : h5py.AttributeManager or callable, optional
        The previous version's attributes, or a function returning them,
        called on first read (making the h5py object behind them costs a copy
        of a dataset's creation property list). None: a new object.
    skip : frozenset of str
        Names never shown (the format's own attributes).
    obj_id : h5py ObjectID, optional
        The source object's id: its attributes are counted before anything is
        read, so an object holding only skipped ones reads nothing.
    obj_name : bytes
        ``b"."``: ``obj_id`` is the source object; else the source is
        ``obj_id``'s member of that name, its attributes read by name and
        the object itself never opened (opening a virtual dataset makes
        libhdf5 decode every mapping).
    """

    def __init__(
        self,
        source: h5py.AttributeManager | None = None,
        skip: frozenset = frozenset(),
        obj_id=None,
        obj_name: bytes = b".",
    ):
        self._source: Any = source  # an AttributeManager, or a callable making one
        self._skip = skip
        self._obj_id = obj_id  # the source object's id (``h5py`` ObjectID): count before iterating
        self._obj_name = obj_name
        self._values: dict[str, Any] | None = None if source is not None else {}
        self._dtypes: dict[str, np.dtype] = {}
        #: True once an attribute was set, created or deleted on this staged object.
        self.changed = False

    def _raise_if_closed(self) -> None:
        oid = self._obj_id
        if oid is not None and not oid.valid:
            raise closed_file_error("the attributes of a staged object", RESTAGE) from None

    @reads_file
    def _load(self) -> dict[str, Any]:
        if self._values is None:
            values: dict[str, Any] = {}
            if self._only_skipped():
                self._values = values
                return values
            if self._obj_id is not None:  # by index on the open object: no copy of its mappings
                count = self._count()
                for key, value, dtype in attrs_by_index(self._obj_id, count, self._obj_name, defer=_DEFERRED):
                    if key not in self._skip:
                        values[key], self._dtypes[key] = value, dtype
                self._values = values
                return values
            if callable(self._source):
                self._source = self._source()
            for key in self._source:
                if key in self._skip:
                    continue
                values[key] = self._source[key]
                self._dtypes[key] = self._source.get_id(key).dtype
            self._values = values
        return self._values

    def _only_skipped(self) -> bool:
        """True when the source holds no attribute but skipped ones (counted, not iterated).

        Iterating the attributes of a virtual dataset makes libhdf5 read its whole
        object header, mappings included; counting them and testing the skipped
        names reads none of it.
        """
        oid = self._obj_id
        if oid is None:
            return False
        n = self._count()
        if n == 0:
            return True
        if n > len(self._skip):
            return False
        return sum(h5a.exists(oid, name.encode(), obj_name=self._obj_name) for name in self._skip) == n

    def _count(self) -> int:
        """The number of the source's attributes (skipped ones included)."""
        if self._obj_name == b".":
            return h5a.get_num_attrs(self._obj_id)
        return object_info_by_name(self._obj_id, self._obj_name)[2]

    @reads_file
    def _unloaded_lookup(self, key: object) -> bool | None:
        """Before anything is loaded: whether the source has ``key`` (None: load to tell).

        One ``H5Aexists`` instead of reading every attribute (a netCDF-4
        dataset's ``DIMENSION_LIST`` of object references among them), for
        code that asks for one name, such as ``attrs.get("CLASS")``.
        """
        if self._values is not None or self._obj_id is None or not isinstance(key, str) or not key:
            return None  # loaded, or a key only the loaded names can answer (h5py lists bytes names)
        if key in self._skip:
            return False
        try:
            name = key.encode("utf-8")
        except UnicodeEncodeError:  # e.g. a lone surrogate: no stored name decodes to it
            return None
        return bool(h5a.exists(self._obj_id, name, obj_name=self._obj_name))

    def __getitem__(self, key: str) -> Any:
        found = self._unloaded_lookup(key)
        if found is False:
            raise KeyError(key)
        if found:  # unchanged since staging: the source's value, the others left unread
            return self._read_one(key)
        return self._value(key)

    def _value(self, key: str) -> Any:
        """A loaded attribute's value; one left unread on load (:data:`_DEFERRED`) is read now."""
        values = self._load()
        value = values[key]
        if value is UNREAD:
            value = values[key] = self._read_deferred(key)
        return value

    @reads_file
    def _read_deferred(self, key: str) -> Any:
        return read_attr_of(self._obj_id, self._obj_name, key)

    @reads_file
    def _read_one(self, key: str) -> Any:
        if callable(self._source):
            self._source = self._source()
        return self._source[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key in RESERVED_ATTRS:
            raise ValueError(f"attribute name {key!r} is reserved by the versioned format")
        self._load()[key] = value
        self._dtypes.pop(key, None)
        self.changed = True

    def __delitem__(self, key: str) -> None:
        del self._load()[key]
        self._dtypes.pop(key, None)
        self.changed = True

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __contains__(self, key: object) -> bool:
        found = self._unloaded_lookup(key)
        return found if found is not None else key in self._load()

    def __repr__(self) -> str:
        return f"<StagedAttrs { ({key: self._value(key) for key in self._load()})!r}>"

    def create(self, name: str, data: Any, shape=None, dtype=None) -> None:
        """h5py's ``attrs.create``: store ``data`` with an explicit dtype."""
        arr = np.asarray(data, dtype=dtype)
        if shape is not None:
            arr = arr.reshape(shape)
        self[name] = arr
        if dtype is not None:
            self._dtypes[name] = np.dtype(dtype)

    def modify(self, name: str, value: Any) -> None:
        """h5py's ``attrs.modify``: change an attribute's value keeping its dtype and shape.

        A new name is created as ``attrs[name] = value`` would create it.

        Raises
        ------
        TypeError
            ``value`` has another shape than the attribute (a single point may
            replace a single point of any shape), as h5py raises.
        ValueError
            ``value`` cannot be cast to the attribute's dtype, or ``name`` is
            reserved by the format.
        """
        if name not in self:
            self[name] = value
            return
        old = np.asarray(self._value(name))
        dtype = self._dtypes.get(name, old.dtype)
        new = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=dtype)
        if new.shape != old.shape and not (new.size == 1 and old.size == 1):
            raise TypeError("Shape of data is incompatible with existing attribute")
        self[name] = np.asarray(new, dtype=dtype).reshape(old.shape)
        self._dtypes[name] = np.dtype(dtype)

    def write_to(self, obj) -> None:
        """Write every attribute on ``obj`` (a freshly created HDF5 object, or its dataset id)."""
        items = {key: self._value(key) for key in self._load()}
        if items and isinstance(obj, h5py.h5d.DatasetID):
            obj = h5py.Dataset(obj)
        for key, value in items.items():
            dtype = self._dtypes.get(key)
            if dtype is not None:
                obj.attrs.create(key, value, dtype=dtype)
            else:
                obj.attrs[key] = value


class ReadOnlyAttrs(Mapping):
    """Attributes of a committed version's object: readable, never writable.

    Raises
    ------
    ClosedFileError
        From every read once the h5py file was closed.
    ReadOnlyError
        From every write.
    """

    def __init__(self, source: h5py.AttributeManager, skip: frozenset = frozenset()):
        self._source = source
        self._skip = skip

    def _raise_if_closed(self) -> None:
        if not self._source._id.valid:
            raise closed_file_error("the attributes of a committed version") from None

    @reads_file
    def __getitem__(self, key: str) -> Any:
        if key in self._skip:
            raise KeyError(key)
        return self._source[key]

    @reads_file
    def __contains__(self, key: object) -> bool:
        if key in self._skip:
            return False
        found = key in self._source
        if not found:
            self._raise_if_closed()  # h5py answers False for a closed object
        return found

    @reads_file
    def _names(self) -> list[str]:
        return [k for k in self._source if k not in self._skip]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __setitem__(self, key, value):
        raise ReadOnlyError(
            f"cannot set attribute {key!r}: committed versions are read-only; "
            "stage a new version with VersionedHDF5File.stage_version()"
        )

    def __delitem__(self, key):
        raise ReadOnlyError(f"cannot delete attribute {key!r}: committed versions are read-only")

    def modify(self, key, value):
        """Refused as ``attrs[key] = value`` is: committed versions are read-only."""
        self[key] = value

    def create(self, key, data, shape=None, dtype=None):
        """Refused as ``attrs[key] = value`` is: committed versions are read-only."""
        self[key] = data

    def __repr__(self) -> str:
        if not self._source._id.valid:
            return "<ReadOnlyAttrs of a closed HDF5 object>"
        return f"<ReadOnlyAttrs {dict(self)!r}>"
