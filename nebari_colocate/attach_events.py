"""The attach/detach controller's word on a pending pod's volume: ``FailedAttachVolume`` because
another pod uses it on another node (Multi-Attach), or because a detach is still under way, and
the pods it names.  (pure)
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import datetime

from .config import DEFAULT_DETACH_GRACE_SECONDS
from .event_stream import TimedEvent
from .event_verdict import FAIL, MULTI_ATTACH, PROGRESS, WAIT, EventVerdict

# kube-controller-manager's attach/detach controller, FailedAttachVolume: "Waiting for detach"
# since kubernetes PR #138837 (v1.37, backported to earlier lines), "Multi-Attach error" before.
MULTI_ATTACH_PREFIXES = ("Waiting for detach", "Multi-Attach error")
_USED_BY = re.compile(
    r"Volume is already used by pod\(s\) (?P<names>.*?)"
    r"(?: and (?P<others>\d+) pod\(s\) in different namespaces)?\s*$",
    re.DOTALL,
)
_USED_ELSEWHERE = re.compile(r"Volume is already used by (?P<others>\d+) pod\(s\) in different")
_VOLUME = re.compile(r'for volume "([^"]+)"')


def attach_verdict(
    events: list[TimedEvent],
    own_servers: Mapping[str, str] | None,
    servers: Collection[str] | None = None,
    now: datetime | None = None,
    detach_grace: float = DEFAULT_DETACH_GRACE_SECONDS,
) -> EventVerdict | None:
    """Fail on a Multi-Attach error unless the same volume attached after it.

    A volume that no pod uses any more but that is still attached to another node (the
    controller's "exclusively attached" wording) is being detached: that usually ends in
    seconds (the old node's kubelet unmounts, the controller detaches), so the spawn waits,
    and fails only when it has lasted ``detach_grace`` seconds (an unmount that hangs)."""
    active: dict[str | None, TimedEvent] = {}
    since: dict[str | None, datetime | None] = {}
    for ev in events:
        m = _VOLUME.search(ev.message)
        volume = m.group(1) if m else None
        if ev.reason == "FailedAttachVolume" and ev.message.startswith(MULTI_ATTACH_PREFIXES):
            if volume not in active:
                since[volume] = ev.first or ev.last
            active[volume] = ev
        elif ev.reason == "SuccessfulAttachVolume":
            active.pop(volume, None)
            since.pop(volume, None)
    if not active:
        return None
    volume, ev = list(active.items())[-1]
    names: tuple[str, ...] = ()
    elsewhere = 0
    used_by = _USED_BY.search(ev.message)
    if used_by:
        names = used_by_names(ev.message)
        elsewhere = int(used_by.group("others") or 0)
    else:
        found = _USED_ELSEWHERE.search(ev.message)
        elsewhere = int(found.group("others")) if found else 0
        if not found:
            # no pod holds it: a detach under way
            start = since.get(volume)
            lasted = (now - start).total_seconds() if now is not None and start else 0.0
            if detach_grace <= 0 or lasted < detach_grace:
                return EventVerdict(WAIT, PROGRESS, ev.message, event=ev.reason)
    own = own_servers or {}
    # Only the user's own servers are named; any other pod is only counted.
    mine = sorted({own[n] for n in names if n in own}, key=lambda s: (s != "", s))
    strangers = [n for n in names if n not in own]
    other_servers = sum(1 for n in strangers if servers is not None and n in servers)
    not_servers = len(strangers) - other_servers if servers is not None else 0
    return EventVerdict(
        FAIL,
        MULTI_ATTACH,
        ev.message,
        holders=names,
        servers=tuple(mine),
        others=elsewhere + len(strangers),
        other_servers=other_servers,
        not_servers=not_servers,
        grace=0.0 if names or elsewhere else detach_grace,
        elsewhere=elsewhere,
    )


def used_by_names(message: str) -> tuple[str, ...]:
    """The pod names an attach/detach controller message lists ("Volume is already used by
    pod(s) a, b"), in its order; () for other messages."""
    used_by = _USED_BY.search(message)
    if not used_by:
        return ()
    return tuple(n.strip() for n in used_by.group("names").split(",") if n.strip())
