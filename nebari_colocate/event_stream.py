"""A pod's events in time order, whatever their API version: RFC 3339 times read, missing
fields tolerated, and the event reasons only a bound pod gets.  (pure)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from .objects import Obj

# Events only a bound pod gets (kubelet, attach/detach controller): they end a scheduling episode
# even when the reflector missed the ``Scheduled`` event itself.
BOUND_REASONS = frozenset(
    {
        "Scheduled",
        "SuccessfulAttachVolume",
        "FailedAttachVolume",
        "FailedMount",
        "Pulling",
        "Pulled",
        "Failed",
        "BackOff",
        "InspectFailed",
        "ErrImageNeverPull",
        "Created",
        "Started",
    }
)


# --- time ------------------------------------------------------------------------------------

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))?$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def aware(value: datetime) -> datetime:
    """``value`` with a time zone: a naive one means UTC."""
    # The API speaks UTC; a naive value from a caller means UTC too.
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp (``...Z``, fractional seconds, offsets) or datetime; else None.

    Python 3.10's ``fromisoformat`` rejects ``Z`` and MicroTime's variable fractions, hence this.
    """
    if isinstance(value, datetime):
        return aware(value)
    if not isinstance(value, str):
        return None
    m = _RFC3339.match(value.strip())
    if not m:
        return None
    year, month, day, hour, minute, second, frac, _z, sign, off_h, off_m = m.groups()
    tz = timezone.utc
    if sign:
        offset = timedelta(hours=int(off_h), minutes=int(off_m))
        tz = timezone(offset if sign == "+" else -offset)
    try:
        return datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((frac or "0")[:6].ljust(6, "0")),
            tzinfo=tz,
        )
    except ValueError:
        return None


@dataclass(frozen=True)
class TimedEvent:
    """One event as the rules read it: reason, message, occurrences and its place in time."""

    reason: str
    message: str
    first: datetime | None  # first occurrence
    last: datetime | None  # latest occurrence
    order: datetime  # sort key: ``last``, or the previous event's key when it has no time
    component: str = ""  # reportingComponent (events.k8s.io) or source.component (core/v1)


def normalise(events: Sequence[Obj]) -> list[TimedEvent]:
    """Events in time order, tolerating missing fields (see the comments inside)."""
    out: list[TimedEvent] = []
    carried = _EPOCH
    for ev in events:
        series = ev.get("series") or {}
        # Core/v1 events carry first/lastTimestamp; events.k8s.io/v1 ones (kube-scheduler,
        # Karpenter) carry eventTime (the first occurrence) and series.lastObservedTime.
        first_candidates = [parse_time(ev.get("firstTimestamp")), parse_time(ev.get("eventTime"))]
        last_candidates = [
            parse_time(ev.get("lastTimestamp")),
            parse_time(series.get("lastObservedTime")),
            *first_candidates,
        ]
        known_first = [t for t in first_candidates if t]
        known_last = [t for t in last_candidates if t]
        last = max(known_last) if known_last else None
        first = min(known_first) if known_first else last
        # An event without any time keeps its place after its predecessor in the input (the
        # reflector's order), instead of jumping to the start or the end.
        carried = last or carried
        out.append(
            TimedEvent(
                reason=str(ev.get("reason") or ""),
                message=str(ev.get("message") or ""),
                first=first,
                last=last,
                order=carried,
                component=str(
                    ev.get("reportingComponent") or (ev.get("source") or {}).get("component") or ""
                ),
            )
        )
    # sorted() is stable: equal times keep the input order.
    return sorted(out, key=lambda e: e.order)
