"""Version timestamps: UTC, stored as strings in versioned-hdf5's format."""

from __future__ import annotations

import datetime as _dt

import numpy as np

from .._backend.layout import TIMESTAMP_FORMAT

__all__ = ["commit_timestamp", "format_timestamp", "now_utc", "parse_timestamp", "to_utc_datetime"]


def now_utc() -> _dt.datetime:
    """The current time, timezone-aware in UTC."""
    return _dt.datetime.now(_dt.UTC)


def to_utc_datetime(value: _dt.datetime | np.datetime64 | str) -> _dt.datetime:
    """Convert a user's timestamp to an aware UTC ``datetime``.

    Parameters
    ----------
    value : datetime.datetime, numpy.datetime64 or str
        An aware datetime (any zone; converted to UTC), a naive datetime or a
        ``numpy.datetime64`` (taken as UTC, like numpy and pandas do), or an ISO
        8601 string.

    Raises
    ------
    TypeError
        ``value`` is none of these.
    """
    if isinstance(value, str):
        value = _dt.datetime.fromisoformat(value)
    if isinstance(value, np.datetime64):
        micro = value.astype("datetime64[us]").astype(np.int64)
        return _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(microseconds=int(micro))
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            return value.replace(tzinfo=_dt.UTC)
        return value.astimezone(_dt.UTC)
    if isinstance(value, _dt.date):
        return _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.UTC)
    raise TypeError(
        f"a timestamp must be a datetime.datetime, numpy.datetime64 or ISO string, got {type(value).__name__}"
    )


def commit_timestamp(value: _dt.datetime | np.datetime64) -> _dt.datetime:
    """A new version's timestamp, checked as versioned-hdf5 2.6 checks it.

    ``VersionedHDF5File.stage_version(timestamp=)`` takes what versioned-hdf5's
    ``commit_version`` takes: a ``datetime.datetime`` whose UTC offset is zero,
    or a ``numpy.datetime64`` (timezone-free, taken as UTC). This package's own
    layers (xarray, store) convert their users' timestamps with
    :func:`to_utc_datetime` first.

    Parameters
    ----------
    value : datetime.datetime or numpy.datetime64
        An aware datetime in UTC (offset zero), or a ``numpy.datetime64``.

    Returns
    -------
    datetime.datetime
        The same instant, timezone-aware in UTC.

    Raises
    ------
    ValueError
        ``value`` is a naive datetime, or an aware one whose UTC offset is not
        zero ("timestamp must be in UTC", versioned-hdf5's message).
    TypeError
        ``value`` is neither a ``datetime.datetime`` nor a ``numpy.datetime64``
        (a string, a ``datetime.date``...).
    """
    if isinstance(value, _dt.datetime):
        if value.utcoffset() != _dt.timedelta(0):
            raise ValueError(
                f"timestamp must be in UTC: got {value!r}; give an aware datetime, "
                "e.g. datetime.datetime(..., tzinfo=datetime.timezone.utc)"
            )
        return value.astimezone(_dt.UTC)
    if isinstance(value, np.datetime64):
        return to_utc_datetime(value)
    raise TypeError(
        f"timestamp must be either a datetime.datetime or numpy.datetime64 object, got {type(value).__name__}"
    )


def format_timestamp(value: _dt.datetime) -> str:
    """``2020-01-01 00:00:00.000000+0000`` (the string stored on a version group)."""
    return to_utc_datetime(value).strftime(TIMESTAMP_FORMAT)


def parse_timestamp(text: str | bytes) -> _dt.datetime:
    """Parse a stored version timestamp back into an aware UTC ``datetime``."""
    if isinstance(text, bytes):
        text = text.decode()
    return _dt.datetime.strptime(text, TIMESTAMP_FORMAT).astimezone(_dt.UTC)
