"""Version timestamps: UTC, stored as strings in versioned-hdf5's format."""

from __future__ import annotations

import datetime as _dt

import numpy as np

from .._backend.layout import TIMESTAMP_FORMAT

__all__ = ["format_timestamp", "now_utc", "parse_timestamp", "to_utc_datetime"]


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


def format_timestamp(value: _dt.datetime) -> str:
    """``2020-01-01 00:00:00.000000+0000`` (the string stored on a version group)."""
    return to_utc_datetime(value).strftime(TIMESTAMP_FORMAT)


def parse_timestamp(text: str | bytes) -> _dt.datetime:
    """Parse a stored version timestamp back into an aware UTC ``datetime``."""
    if isinstance(text, bytes):
        text = text.decode()
    return _dt.datetime.strptime(text, TIMESTAMP_FORMAT).astimezone(_dt.UTC)
