"""KubeSpawner's own formatting of a pod event for the progress stream, for the events the library
does not tell in its words (docs/surfaces.md, "KubeSpawner's own message formatting").

KubeSpawner after 7.1 (jupyterhub/kubespawner#910) formats each event of its progress stream
with ``event_formatter`` (an instance of ``event_formatter_class``) and then
``decorate_progress_message(spawner, event, message)``, which returns the progress message's
``message`` and, optionally, ``html_message``.  ColocatingKubeSpawner replaces KubeSpawner's
``progress()``: the events it tells in words (scheduling, autoscaler, attach and image events,
``events.PLAIN_LANGUAGE_EVENTS``) keep the library's words, and every other event goes through the
operator's formatter and decorator here, as KubeSpawner's own stream would.  KubeSpawner 7.0 and
7.1 have neither: :func:`formatted` then answers None and the library's line stays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jupyterhub.utils import maybe_future

__all__ = ["formatted", "has_formatter"]


def has_formatter(spawner: Any) -> bool:
    """Whether the installed KubeSpawner formats progress events itself (``event_formatter``)."""
    return getattr(spawner, "event_formatter", None) is not None


async def formatted(spawner: Any, event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The progress message KubeSpawner's formatter and ``decorate_progress_message`` make of
    ``event`` (``message``, and ``html_message`` when the decorator gives one); None where the
    installed KubeSpawner has no formatter, or the operator's formatter fails (logged: the
    library's line is shown instead, the stream goes on)."""
    if not has_formatter(spawner):
        return None
    try:
        message = spawner.event_formatter.format_event(dict(event))
        decorate = getattr(spawner, "decorate_progress_message", None)
        if decorate is None:
            return {"message": str(message)}
        bundle = await maybe_future(decorate(spawner, dict(event), message))
    except Exception:
        spawner.log.exception("colocate: the progress event formatter failed; the raw event shown")
        return None
    if not isinstance(bundle, Mapping) or not isinstance(bundle.get("message"), str):
        spawner.log.warning(
            "colocate: decorate_progress_message returned %r, not a mapping with a 'message'",
            bundle,
        )
        return None
    return {k: v for k, v in bundle.items() if k in ("message", "html_message")}
