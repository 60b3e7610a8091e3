"""Whether another run's lease on a home may be taken over.  (pure)

``nebari-colocate migrate`` takes a ``coordination.k8s.io`` Lease per home before its first write
(``docs/migrate.md``, "Two runs at once").  A run that finds the lease held by another run judges
it as client-go's leader election (``k8s.io/client-go/tools/leaderelection``) judges a leader's
record: it keeps the record it last saw and when it saw it, by its own monotonic clock, and takes
the lease over only once that record has stayed the same for the lease's whole
``leaseDurationSeconds``.  The record (its ``resourceVersion``, holder and times) is an opaque
value, compared for equality only: ``renewTime`` was written by the holder's clock, which may be
minutes behind or ahead of this host's, so it is never compared with this host's time.  Nor is a
host name an identity (a container may carry its host's name): a holder that names this host and
a process that does not run here is judged like any other.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from .objects import Obj, meta, spec

#: what a lease found held by another run is, to the run that watches it
HELD, STALE = "held", "stale"

#: the duration of a lease that does not say (the mover's own default)
DEFAULT_SECONDS = 60


def record_of(lease: Obj) -> str:
    """The lease's record as one opaque value: any write to the lease changes it."""
    return json.dumps(
        {"resourceVersion": meta(lease).get("resourceVersion"), "spec": spec(lease)},
        sort_keys=True,
        default=str,
    )


def duration_of(lease: Obj) -> float:
    """The lease's ``leaseDurationSeconds`` (its holder's promise to renew within it)."""
    seconds = spec(lease).get("leaseDurationSeconds")
    return float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else DEFAULT_SECONDS


class LeaseObserver:
    """One run's watch of another run's lease: :meth:`judge` each read of it, in order.

    ``clock`` is this run's monotonic clock (``time.monotonic``; tests inject theirs)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._record: str | None = None
        self._since = 0.0
        #: the record changed while this run watched it: its holder renews it, it lives
        self.renewed = False

    def judge(self, lease: Obj) -> str:
        """HELD, or STALE when the lease has no holder (released) or its record has not
        changed for its whole duration since this run first saw it so."""
        if not spec(lease).get("holderIdentity"):
            return STALE
        now = self._clock()
        record = record_of(lease)
        if record != self._record:
            self.renewed = self._record is not None
            self._record, self._since = record, now
            return HELD
        return STALE if now - self._since >= duration_of(lease) else HELD

    def unchanged_for(self) -> float:
        """Seconds, by this run's clock, since the record last changed (or was first seen)."""
        return self._clock() - self._since if self._record is not None else 0.0
