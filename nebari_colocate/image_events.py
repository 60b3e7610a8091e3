"""The kubelet's word on a pending pod's image: an image that can never be used (a name that
does not parse, absent with pull policy ``Never``), and a pull that keeps failing, with the
registry's cause when it says one.  (pure)
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from .event_stream import TimedEvent
from .event_verdict import (
    FAIL,
    IMAGE_BAD_NAME,
    IMAGE_INVALID,
    IMAGE_NEVER_PULL,
    IMAGE_PULL,
    PULL_DENIED,
    PULL_NOT_FOUND,
    RETRYING_PULL,
    WAIT,
    EventVerdict,
)

PULL_FAILED_PREFIX = "Failed to pull image"
PULL_BACKOFF_PREFIX = "Back-off pulling image"
DEFAULT_TAG_FAILED_PREFIX = "Failed to apply default image tag"
_IMAGE = re.compile(r'image(?: tag)? "([^"]+)"')


def _image_name(message: str) -> str | None:
    m = _IMAGE.search(message)
    return m.group(1) if m else None


def _is_invalid_image(ev: TimedEvent) -> bool:
    if ev.reason == "ErrImageNeverPull":
        return True
    if ev.reason == "InspectFailed" and ev.message.startswith(DEFAULT_TAG_FAILED_PREFIX):
        return True
    return ev.reason in ("Failed", "InspectFailed") and (
        "InvalidImageName" in ev.message or "ErrImageNeverPull" in ev.message
    )


def _is_pull_failure(ev: TimedEvent) -> bool:
    if ev.reason == "BackOff":
        # BackOff also means CrashLoopBackOff ("Back-off restarting failed container").
        return ev.message.startswith(PULL_BACKOFF_PREFIX)
    return ev.reason == "Failed" and (
        ev.message.startswith(PULL_FAILED_PREFIX)
        or "ErrImagePull" in ev.message
        or "ImagePullBackOff" in ev.message
    )


def _pull_causes(raw: str) -> tuple[str, ...]:
    """Why the registry would not give the image, when its error says so."""
    lowered = raw.lower()
    if "not found" in lowered or "manifest unknown" in lowered:
        return (PULL_NOT_FOUND,)
    if any(w in lowered for w in ("unauthorized", "denied", "forbidden", "401", "403")):
        return (PULL_DENIED,)
    return ()


def image_verdict(events: list[TimedEvent], now: datetime, grace: float) -> EventVerdict | None:
    """FAIL on an image that can never be used, or a pull failing for ``grace`` seconds;
    WAIT while a pull is retried within it; None when no image is in trouble."""
    # Per image: when it started failing (since it last pulled), and the message that best says
    # why: the latest "Failed to pull image" (it carries the registry's error), else the latest.
    # Image-less messages ("Error: ErrImagePull") go under None, which any later pull clears.
    troubles: dict[str | None, tuple[datetime | None, TimedEvent]] = {}
    for ev in events:
        image = _image_name(ev.message)
        if _is_invalid_image(ev):
            never = ev.reason == "ErrImageNeverPull" or "ErrImageNeverPull" in ev.message
            cause = IMAGE_NEVER_PULL if never else IMAGE_BAD_NAME
            return EventVerdict(FAIL, IMAGE_INVALID, ev.message, causes=(cause,), image=image)
        if _is_pull_failure(ev):
            previous = troubles.get(image)
            starts = [t for t in (previous[0] if previous else None, ev.first) if t]
            telling = ev
            if (
                previous
                and previous[1].message.startswith(PULL_FAILED_PREFIX)
                and not ev.message.startswith(PULL_FAILED_PREFIX)
            ):
                telling = previous[1]
            troubles[image] = (min(starts) if starts else None, telling)
        elif ev.reason == "Pulled":
            troubles.pop(image, None)
            troubles.pop(None, None)
    if not troubles:
        return None
    # Prefer the image that has been failing longest; named images over image-less messages.
    image, (start, ev) = min(
        troubles.items(),
        key=lambda kv: (kv[0] is None, kv[1][0] or datetime.max.replace(tzinfo=timezone.utc)),
    )
    if grace > 0 and start and (now - start).total_seconds() >= grace:
        causes = _pull_causes(ev.message)
        return EventVerdict(FAIL, IMAGE_PULL, ev.message, grace=grace, causes=causes, image=image)
    return EventVerdict(WAIT, RETRYING_PULL, ev.message, image=image)
