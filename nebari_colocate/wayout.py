"""The way out of a refusal: the smallest set of the user's own servers to stop.  (pure)

A refusal caused by the user's own JupyterHub servers holding an exclusive home has a way out the
user can take alone: stop some of those servers, wait until the volume is released, start again
(``docs/failure-modes.md``, "The way out").  This module finds that set:

- the new server cannot run on the pinned node at all (a node selector, a taint, a cordon, the
  premium guard, a ReadWriteOncePod claim in use): every holder, so that the volume is released
  and the new server may go to any node;
- the pinned node lacks room only (``insufficient:<resource>``, ``too-many-pods``): the fewest
  holders on that node whose stop frees enough room, or all holders, whichever is fewer servers
  (with all of them stopped the volume is released and the new server may go to another node).

Which of the two a refusal is, or whether stopping servers cannot help at all, is declared beside
each reason code (``placement.STOPPING_HELPS``: :data:`RELEASE`, :data:`ROOM` or
:data:`UNRESOLVABLE`), as kube-scheduler's filters return ``Unschedulable`` or
``UnschedulableAndUnresolvable`` beside their reason.

Ties: fewest servers, then the least requested resources (cpu, memory, then the others by name),
then the server names, so the answer is stable.  There is no way out (None) when a holder is not
one of the user's own servers (a Job's pod, another user's or another namespace's pod), when the
volume is pinned by an attachment only (a detach in progress: waiting is the way), or when a
reason is :data:`UNRESOLVABLE` (a split attachment, a volume bound to the node, a node that is
gone, a home being moved).

The move off a premium node (:func:`premium_rides`): once the user's GPU lab has stopped, the
servers of the user that rode along on its node keep that node running; they are listed so that
one click restarts them elsewhere.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from . import fit
from .objects import (
    HOSTNAME,
    JsonDict,
    Obj,
    holders,
    is_server,
    is_terminal,
    meta,
    owned_by,
    pod_claims,
    pod_server,
    pod_user,
    spec,
)
from .setmove import Move
from .state import ClusterState

# Whether stopping the user's own servers that hold the volume can let a refused server start:
# one of these beside every reason code (placement.STOPPING_HELPS).
#: the pinned node cannot take the server at all: stopping every holder releases the volume, and
#: the server may then start on any node
RELEASE = "release"
#: the pinned node lacks room only: stopping some of the holders there may be enough (all of
#: them release the volume)
ROOM = "room"
#: nothing the user stops changes it: waiting, or an administrator
UNRESOLVABLE = "unresolvable"
#: every answer to "can stopping servers help?"
REMEDIES = (RELEASE, ROOM, UNRESOLVABLE)

#: past this many holders, subsets are not enumerated (2**12 fit checks at most): all holders
MAX_ENUMERATED_HOLDERS = 12


@dataclass(frozen=True)
class WayOut:
    """Stop these servers (``""`` is the default server), then start ``start``; or, where
    ``move`` is not None, move the whole set to a node that holds it (:mod:`.setmove`)."""

    stop: tuple[str, ...]
    start: str
    move: Move | None = None

    def as_json(self) -> JsonDict:
        """The ``way_out`` field of ``simulate --json`` (``docs/cli.md``); ``move`` only when
        there is one."""
        found: JsonDict = {"stop": list(self.stop), "start": self.start}
        if self.move is not None:
            found["move"] = self.move.as_json()
        return found


#: why a server the way out or the move stopped did not stop (:attr:`StepFacts.why`): JupyterHub's
#: stop ended and the server is still running; the stop took longer than the wait allows; the
#: stop raised an error (the hub log has it); JupyterHub's stop gave up and forgot the server
#: while its pod still holds the home (JupyterHub's ``User.stop`` clears a server whose stop
#: failed)
STILL_RUNNING, TOO_SLOW, STOP_ERROR = "still-running", "too-slow", "error"
LEFT_BEHIND = "left-behind"


@dataclass(frozen=True)
class StepFacts:
    """What a way out or a move that ended part-way did, server by server (``""`` is the
    default server); ``messages`` puts them in words."""

    #: stopped by it
    stopped: tuple[str, ...] = ()
    #: still running: the server whose stop failed first, then those it did not try to stop
    not_stopped: tuple[str, ...] = ()
    #: why the first of ``not_stopped`` did not stop (STILL_RUNNING, TOO_SLOW, STOP_ERROR,
    #: LEFT_BEHIND)
    why: str = ""
    #: started again by it (a move), running now
    running: tuple[str, ...] = ()
    #: stopped by it and not started again (a move)
    not_started: tuple[str, ...] = ()


def _resource_key(requests: Mapping[str, int]) -> tuple[int, ...]:
    """Requests as a tuple ordered cpu, memory, then the other resources by name."""
    others = sorted(r for r in requests if r not in ("cpu", "memory"))
    return (
        requests.get("cpu", 0),
        requests.get("memory", 0),
        *(requests[r] for r in others),
    )


def _order_key(
    servers: Sequence[Obj], requests_of: Callable[[Obj], Mapping[str, int]]
) -> tuple[int, tuple[int, ...], tuple[str, ...]]:
    total: dict[str, int] = {}
    for pod in servers:
        for resource, value in requests_of(pod).items():
            total[resource] = total.get(resource, 0) + value
    return len(servers), _resource_key(total), tuple(sorted(pod_server(p) for p in servers))


def own_servers_only(holders: Iterable[Obj], username: str, label_value: str | None) -> bool:
    """Every holder is one of ``username``'s JupyterHub servers."""
    return all(is_server(p) and owned_by(p, username, label_value) for p in holders)


def way_out(
    pod: Obj,
    *,
    remedies: Collection[str | None],
    holder_pods: Sequence[Obj],
    node_name: str | None,
    pinned_by_holders: bool,
    state: ClusterState,
    namespace: str,
    username: str | None = None,
    label_value: str | None = None,
) -> WayOut | None:
    """The smallest set of the user's own servers whose stop lets ``pod`` start, or None.

    ``remedies`` say, for each of the refusal's reason codes, whether stopping servers can help
    (:data:`REMEDIES`; None for a code without a declaration, which counts as :data:`RELEASE`);
    ``holder_pods`` the pods holding its exclusive claims
    (all on ``node_name`` unless the claim is split); ``username`` defaults to the pod's own
    (KubeSpawner's annotation).
    """
    helps = set(remedies)
    if not helps or UNRESOLVABLE in helps or not holder_pods or not pinned_by_holders:
        return None
    username = username if username is not None else pod_user(pod)
    if not username or not own_servers_only(holder_pods, username, label_value):
        return None
    start = pod_server(pod)
    everyone = sorted(holder_pods, key=lambda p: _order_key([p], state.requests_of))
    all_of_them = WayOut(tuple(sorted(pod_server(p) for p in everyone)), start)
    node = state.nodes.get(node_name) if state.nodes is not None and node_name else None
    if helps != {ROOM} or node is None:
        return all_of_them
    if len(everyone) > MAX_ENUMERATED_HOLDERS:
        return all_of_them
    own_key = f"{meta(pod).get('namespace') or namespace}/{meta(pod).get('name')}"
    used, count = state.node_usage(str(node_name), exclude=own_key)
    bound_pvs = [
        pv for pv in (state.bound_pv(namespace, c) for c in pod_claims(pod)) if pv is not None
    ]
    on_node = [p for p in everyone if spec(p).get("nodeName") == node_name]
    best: tuple[tuple[int, tuple[int, ...], tuple[str, ...]], WayOut] | None = None
    for size in range(1, len(on_node)):
        for subset in itertools.combinations(on_node, size):
            freed = dict(used)
            for holder in subset:
                for resource, value in state.requests_of(holder).items():
                    freed[resource] = freed.get(resource, 0) - value
            result = fit.check_fit(pod, node, (), bound_pvs, usage=(freed, count - size))
            if result.fits:
                key = _order_key(subset, state.requests_of)
                if best is None or key < best[0]:
                    best = (key, WayOut(key[2], start))
        if best is not None:
            return best[1]
    return all_of_them


def home_holders(
    pods: Iterable[Obj], claims: Iterable[str], username: str, label_value: str | None
) -> tuple[tuple[str, ...], int]:
    """(the user's own servers holding one of ``claims``, sorted; how many other pods hold
    them): what the way out's re-check compares with the blockers at the refusal."""
    held = holders(pods, claims)
    own = sorted(pod_server(p) for p in held if is_server(p) and owned_by(p, username, label_value))
    return tuple(own), len(held) - len(own)


def left_behind(
    pods: Iterable[Obj], claims: Iterable[str], stopped: Iterable[str]
) -> tuple[str, ...]:
    """The servers of ``stopped`` whose pods still hold ``claims``, sorted."""
    gone = set(stopped)
    return tuple(
        sorted(
            {pod_server(p) for p in holders(pods, claims) if is_server(p) and pod_server(p) in gone}
        )
    )


def home_released(
    pods: Iterable[Obj],
    attached: set[str] | None,
    *,
    claims: Iterable[str],
    stopped: Iterable[str],
    all_holders: bool,
    node: str | None,
) -> bool:
    """Whether the stop of ``stopped`` (server names) has done its work: none of their pods
    holds ``claims`` any more; and, when every holder was stopped, no pod holds them and no
    VolumeAttachment is attached on ``node`` (``attached``: the attached nodes of the claims'
    volumes, None when unreadable)."""
    held = holders(pods, claims)
    gone = set(stopped)
    if any(is_server(p) and pod_server(p) in gone for p in held):
        return False
    if not all_holders:
        return True
    if held:
        return False
    return attached is None or node is None or node not in attached


# --------------------------------------------------------------------------------------------------
# the move off a premium node (the GPU node kept alive, resolved)


@dataclass(frozen=True)
class PremiumRide:
    """The user's servers that keep premium node ``node`` running although none of the user's
    servers there asks for a premium resource (the GPU lab stopped, its apps ride on): stop them
    and start them again off it (``docs/decisions.md``, "The move off a premium node")."""

    node: str
    #: the node's ``kubernetes.io/hostname`` label, if it has one
    hostname: str | None
    #: the servers to move, sorted (``""`` is the default server)
    servers: tuple[str, ...]

    def as_json(self) -> JsonDict:
        return {"node": self.node, "hostname": self.hostname, "servers": list(self.servers)}


def premium_rides(
    pods: Iterable[Obj],
    nodes: Mapping[str, Obj] | None,
    *,
    username: str,
    label_value: str | None,
    premium_resources: Iterable[str],
) -> tuple[PremiumRide, ...]:
    """The premium nodes that run some of ``username``'s servers and none that needs them.

    A node is premium when it offers one of ``premium_resources`` (allocatable above 0); without
    the Nodes (``nodes`` None: no read access) nothing can be told and nothing is returned.  A
    ride is listed only when none of the user's servers asks for a premium resource, on that node
    or still unbound (a GPU lab being started again would want the node): the moved servers are
    the user's running (bound, unfinished, not terminating) servers there.  Sorted by node.
    """
    if nodes is None:
        return ()
    resources = tuple(premium_resources)
    own = [p for p in pods if is_server(p) and owned_by(p, username, label_value)]
    own = [p for p in own if not is_terminal(p)]
    wanting = [p for p in own if fit.requests_any(p, resources)]
    if any(not spec(p).get("nodeName") for p in wanting):
        return ()
    busy = {spec(p).get("nodeName") for p in wanting}
    by_node: dict[str, list[str]] = {}
    for p in own:
        node_name = spec(p).get("nodeName")
        if not node_name or node_name in busy or meta(p).get("deletionTimestamp"):
            continue
        by_node.setdefault(str(node_name), []).append(pod_server(p))
    rides = []
    for node_name, servers in sorted(by_node.items()):
        node = nodes.get(node_name)
        if node is None or not fit.offered(node, resources):
            continue
        hostname = (meta(node).get("labels") or {}).get(HOSTNAME)
        rides.append(PremiumRide(node_name, hostname, tuple(sorted(set(servers)))))
    return tuple(rides)


def stop_every_holder(
    holder_pods: Sequence[str],
    own_servers: Mapping[str, str],
    *,
    start: str,
    others: int = 0,
) -> WayOut | None:
    """The way out of a spawn ended by its pod's events (the volume attached to another node,
    the pinned node unable to take the pod): stop every pod that holds the home.

    ``holder_pods`` are the pod names holding it (as an attach/detach controller message lists
    them, or the placement's holders); ``own_servers`` maps the user's own server pods to their
    server names (``""`` the default server); ``others`` counts the holders not listed by name
    (pods in other namespaces).  None when there is no holder, when one is not a server of the
    user's own or is the server to start, or when ``others`` is not 0."""
    if not holder_pods or others:
        return None
    if any(pod not in own_servers for pod in holder_pods):
        return None
    stop = tuple(sorted({own_servers[pod] for pod in holder_pods}))
    if start in stop:
        return None
    return WayOut(stop, start)
