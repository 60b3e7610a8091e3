"""The Kubernetes API client: the one way the library reaches kube-apiserver.

Every caller goes through it: the readers (:mod:`nebari_colocate.view`), the watches
(:mod:`nebari_colocate.informer`), the mover (:mod:`nebari_colocate.migrate`), the command
(:mod:`nebari_colocate.cli`) and the spawner.

- **Connecting** (:func:`connect`): an ``ApiClient`` from the kubeconfig, or inside a pod from its
  service account; :class:`Apis` names the API groups called on one client.
- **Requests** (:func:`read_json`, :func:`list_all`, :func:`watch`): a kubernetes_asyncio method
  called for the raw camelCase JSON (no model objects), page by page for a collection, event by
  event for a WATCH; :class:`SharedRequest`: one request for the callers that ask at once.
- **Errors**: a non-2xx answer is :class:`ApiError` (``status``, ``reason``); :func:`status_of`,
  :func:`forbidden`, and :func:`read_json_or_none` for a 404 (or another status the caller names)
  that means "not there".
- **The dry run** (:func:`admitted_pod`): the pod as kube-apiserver would admit it.
- **The late-pod sweep** (:func:`sweep_late_pod`): a pod the API created after a spawn it failed
  had given up, deleted (docs/failure-modes.md).

The words for what fails here are the callers' (:mod:`nebari_colocate.messages`, the command):
this module raises facts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .objects import JsonDict, Obj, meta

#: a kubernetes_asyncio API method (untyped): called with ``_preload_content=False``, it answers
#: the raw HTTP response
ApiCall = Callable[..., Awaitable[Any]]

NOT_FOUND = 404
CONFLICT = 409
#: statuses of a request the credentials may not make (401 rejected, 403 forbidden)
DENIED = (401, 403)


# --------------------------------------------------------------------------------------------------
# connecting


class Apis:
    """The API groups the library calls, on one kubernetes_asyncio ``ApiClient`` (untyped)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes_asyncio import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.storage = client.StorageV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.scheduling = client.SchedulingV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)


#: where Kubernetes mounts a pod's service account (used when no kubeconfig exists)
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: why :func:`connect` found no client, as :class:`ConnectError` gives it
NO_KUBECONFIG = "no-kubeconfig"  # no kubeconfig file, and not inside a pod
BAD_KUBECONFIG = "bad-kubeconfig"  # a kubeconfig that cannot be used (``cause`` says why)
BAD_SERVICE_ACCOUNT = "bad-service-account"  # inside a pod whose service account cannot be used


class ConnectError(Exception):
    """No API client: ``problem`` (:data:`NO_KUBECONFIG`, :data:`BAD_KUBECONFIG`,
    :data:`BAD_SERVICE_ACCOUNT`), the kubeconfig ``paths`` looked at, and the exception that
    stopped it (``cause``, None for :data:`NO_KUBECONFIG`)."""

    def __init__(self, problem: str, paths: str, cause: BaseException | None = None) -> None:
        super().__init__(f"{problem}: {paths}" + (f": {cause}" if cause else ""))
        self.problem = problem
        self.paths = paths
        self.cause = cause


class Connection:
    """An ApiClient, the namespace the credentials default to, and the server's address."""

    def __init__(self, api_client: Any, namespace: str | None, server: str, source: str) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.server = server
        self.source = source


def kubeconfig_paths(option: str | None, environ: Mapping[str, str]) -> str:
    """``--kubeconfig``, else ``$KUBECONFIG`` (a list, as kubectl reads it), else the default.

    Read from the environment at call time: kubernetes_asyncio reads ``$KUBECONFIG`` once, at
    import.
    """
    return option or environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")


async def connect(
    kubeconfig: str | None, context: str | None, environ: Mapping[str, str] | None = None
) -> Connection:
    """An API client from the kubeconfig; inside a pod without one, from its service account.
    :class:`ConnectError` when neither can be used."""
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

    environ = os.environ if environ is None else environ
    paths = kubeconfig_paths(kubeconfig, environ)
    existing = [p for p in paths.split(os.pathsep) if p and Path(p).expanduser().exists()]
    configuration = type.__call__(client.Configuration)  # a fresh one, not the global default
    if existing:
        try:
            loader = await config.load_kube_config(
                config_file=os.pathsep.join(existing),
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except Exception as exc:
            raise ConnectError(BAD_KUBECONFIG, paths, exc) from None
        current = loader.current_context or {}
        namespace = (current.get("context") or {}).get("namespace")
        source = f"kubeconfig {paths}"
    elif kubeconfig is None and environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            InClusterConfigLoader(
                token_filename=str(SERVICE_ACCOUNT_DIR / "token"),
                cert_filename=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
                environ=dict(environ),
            ).load_and_set(configuration)
        except Exception as exc:
            raise ConnectError(BAD_SERVICE_ACCOUNT, paths, exc) from None
        try:
            namespace = (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or None
        except OSError:
            namespace = None
        source = "the pod's service account"
    else:
        raise ConnectError(NO_KUBECONFIG, paths)
    return Connection(client.ApiClient(configuration), namespace, configuration.host, source)


# --------------------------------------------------------------------------------------------------
# requests and errors


class ApiError(Exception):
    """An API answer that is not 2xx (``status`` and ``reason`` as kube-apiserver gave them)."""

    def __init__(self, status: int, reason: str = "", what: str = "") -> None:
        super().__init__(f"{status} {reason}".strip() + (f" ({what})" if what else ""))
        self.status = status
        self.reason = reason


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (:class:`ApiError`, the client's ``ApiException``),
    None for any other (no answer at all: a connection error, a timeout)."""
    return getattr(exc, "status", None)


def forbidden(exc: BaseException) -> bool:
    """The credentials may not make this request (401, 403)."""
    return status_of(exc) in DENIED


async def read_json(call: ApiCall, *args: Any, **kwargs: Any) -> JsonDict:
    """Call a kubernetes_asyncio method and return the raw camelCase JSON.

    With ``_preload_content=False`` kubernetes_asyncio returns error responses instead of raising
    (its status check runs only when it preloads), so check the status here: a non-2xx answer is
    :class:`ApiError`, never the client's ``ApiException``.
    """
    response = await call(*args, _preload_content=False, **kwargs)
    try:
        body = await response.read()
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, response.reason or "")
        answer: JsonDict = json.loads(body)  # every answer read here is one object
        return answer
    finally:
        response.release()


async def read_json_or_none(
    call: ApiCall, *args: Any, none_for: Collection[int] = (NOT_FOUND,), **kwargs: Any
) -> JsonDict | None:
    """:func:`read_json`, or None when the API answers one of ``none_for`` (by default 404: the
    object is not there; a delete adds 409 for "a newer object under the name")."""
    try:
        return await read_json(call, *args, **kwargs)
    except Exception as exc:
        if status_of(exc) in none_for:
            return None
        raise


#: objects handled between two turns of the event loop while a large collection is listed or
#: applied to the caches (a few milliseconds of work)
YIELD_EVERY = 100


async def list_all(
    method: ApiCall,
    *args: Any,
    transform: Callable[[JsonDict], JsonDict] | None = None,
    page_size: int = 500,
) -> tuple[list[JsonDict], str | None]:
    """Every object of a collection, page by page (the parsed JSON of one page at a time, each
    object passed through ``transform`` as it arrives); returns (objects, resourceVersion).

    The event loop runs other tasks between pages and every ``YIELD_EVERY`` objects of a page,
    so listing a large collection never blocks it for long."""
    items: list[JsonDict] = []
    token = None
    while True:
        kwargs: JsonDict = {"limit": page_size}
        if token:
            kwargs["_continue"] = token
        listing = await read_json(method, *args, **kwargs)
        for n, obj in enumerate(listing.get("items") or [], 1):
            items.append(transform(obj) if transform else dict(obj))
            if n % YIELD_EVERY == 0:
                await asyncio.sleep(0)
        meta = listing.get("metadata") or {}
        token = meta.get("continue")
        if not token:
            return items, meta.get("resourceVersion")


@contextlib.asynccontextmanager
async def watch(
    method: ApiCall,
    *args: Any,
    resource_version: str | None,
    timeout_seconds: int,
    sock_read: float,
    what: str,
) -> AsyncIterator[AsyncIterator[JsonDict]]:
    """One WATCH of a collection from ``resource_version``, with bookmarks: inside the context,
    its events as they arrive (parsed JSON), until the server ends it after ``timeout_seconds``
    (normal) or it fails (raises; :class:`ApiError` when the answer is not 200).  A connection
    that carries nothing for ``sock_read`` seconds fails."""
    import aiohttp

    response = await method(
        *args,
        watch=True,
        resource_version=resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=timeout_seconds,
        _request_timeout=aiohttp.ClientTimeout(total=timeout_seconds + 30, sock_read=sock_read),
        _preload_content=False,
    )
    try:
        if response.status != 200:
            raise ApiError(response.status, response.reason or "", f"watch {what}")
        yield _events(response.content)
    finally:
        response.release()


async def _events(content: Any) -> AsyncIterator[JsonDict]:
    """The events of a WATCH's body: one JSON object a line, a line split across chunks."""
    buffer = b""
    async for chunk in content.iter_any():
        lines = (buffer + chunk).split(b"\n")
        buffer = lines.pop()  # the start of the next event, or b""
        for line in lines:
            if line.strip():
                event: JsonDict = json.loads(line)
                yield event


class SharedRequest:
    """One request for every caller that asks before it is sent.

    In a burst of spawns many checks ask the API the same question at once (the namespace's
    pods, the VolumeAttachments) and would each queue their own request behind the spawns' own.
    :meth:`get` joins the request not sent yet, or makes a new one: it is sent at the event
    loop's next turn, so every caller that joined asked before it was sent, and its answer is
    as fresh for each of them as a request of their own.  Every caller gets the same answer
    (read it, never change it) or the same error; a caller that gives up (a timeout) leaves the
    request to the others.
    """

    def __init__(self, request: Callable[[], Awaitable[Any]]) -> None:
        self._request = request
        self._next: asyncio.Future[Any] | None = None  # joined, not sent yet
        #: requests sent (tests and benchmarks count them)
        self.sent = 0

    async def get(self) -> Any:
        """The answer of the next request, shared with every caller that joins it."""
        if self._next is None:
            self._next = asyncio.ensure_future(self._send())
            # the error reaches the callers; with all of them gone, nobody is left to tell
            self._next.add_done_callback(lambda done: done.cancelled() or done.exception())
        return await asyncio.shield(self._next)

    async def _send(self) -> Any:
        self._next = None  # callers from now on asked after this request: the next one
        self.sent += 1
        return await self._request()


# --------------------------------------------------------------------------------------------------
# the dry run


async def admitted_pod(api_client: Any, namespace: str, pod: Obj) -> JsonDict:
    """The pod as kube-apiserver would admit it: a server-side dry-run create (``dryRun=All``,
    which ``create`` on pods allows) runs the admission chain (RuntimeClass overhead and
    scheduling, LimitRange defaults, default tolerations, mutating webhooks) and stores nothing.

    Sent under ``generateName`` so a pod of the same name that still exists (a restart replaces
    it) does not make it fail; the name is put back on the answer.  Errors propagate.
    """
    meta = dict(pod.get("metadata") or {})
    name = meta.pop("name", None)
    if name:
        meta["generateName"] = f"{name[:52]}-"
    body = {**pod, "apiVersion": "v1", "kind": "Pod", "metadata": meta}
    core = Apis(api_client).core
    answer = await read_json(core.create_namespaced_pod, namespace, body, dry_run="All")
    answer_meta = answer.setdefault("metadata", {})
    answer_meta.pop("generateName", None)
    if name:
        answer_meta["name"] = name
    return answer


async def hold_room(
    core: Any,
    namespace: str,
    manifest: JsonDict,
    *,
    timeout: float,
    poll: float = 0.5,
    keep: bool = False,
) -> str | None:
    """Create ``manifest`` (a pod that holds a whole set's room, ``setmove.room_holder``), wait
    at most ``timeout`` seconds until a scheduler binds it, then delete it and wait until it is
    gone (so that its room is free again; ``keep``: only when it was not bound); the node it
    was bound to, or None.  Errors of the create propagate; the delete is always tried."""
    name = manifest["metadata"]["name"]
    await core.create_namespaced_pod(namespace, manifest)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    node: str | None = None
    try:
        while node is None and loop.time() < deadline:
            pod = await read_json(core.read_namespaced_pod, name, namespace)
            node = (pod.get("spec") or {}).get("nodeName") or None
            if node is None:
                await asyncio.sleep(poll)
    finally:
        if node is None or not keep:
            await release_room(core, namespace, name, poll=poll)
    return node


async def hold_rooms(
    core: Any,
    namespace: str,
    manifests: Sequence[JsonDict],
    *,
    timeout: float,
    poll: float = 0.5,
    replacing: str | None = None,
) -> bool:
    """Create every pod of ``manifests`` (``setmove.pinned_holder``), then delete pod
    ``replacing`` (the holder of the whole room they split) if given, and wait at most
    ``timeout`` seconds until a scheduler has bound each; True if so; else (or on any error)
    delete them all, wait until they are gone and return False."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    names = [m["metadata"]["name"] for m in manifests]
    bound = False
    try:
        for manifest in manifests:
            await core.create_namespaced_pod(namespace, manifest)
        if replacing is not None:
            await release_room(core, namespace, replacing, poll=poll)
        waiting = set(names)
        while waiting and loop.time() < deadline:
            for name in sorted(waiting):
                pod = await read_json(core.read_namespaced_pod, name, namespace)
                if (pod.get("spec") or {}).get("nodeName"):
                    waiting.discard(name)
                elif replacing is None and _unschedulable(pod):
                    return False  # (the finally deletes them): the node has no room
            if waiting:
                await asyncio.sleep(poll)
        bound = not waiting
    except Exception:  # (the API's trouble: nothing is held, nothing is stopped)
        bound = False
    finally:
        if replacing is not None and not bound:
            await release_room(core, namespace, replacing, poll=poll)
        if not bound:
            await asyncio.gather(*(release_room(core, namespace, n, poll=poll) for n in names))
    return bound


def _unschedulable(pod: JsonDict) -> bool:
    """The scheduler tried ``pod`` and found no node for it."""
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


async def release_room(core: Any, namespace: str, name: str, *, poll: float = 0.5) -> None:
    """Delete room-holding pod ``name`` and wait (at most 30 s) until it is gone."""
    loop = asyncio.get_running_loop()
    await _delete_and_wait(core, namespace, name, deadline=loop.time() + 30, poll=poll)


async def _delete_and_wait(
    core: Any, namespace: str, name: str, *, deadline: float, poll: float
) -> None:
    loop = asyncio.get_running_loop()
    with contextlib.suppress(Exception):
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    while loop.time() < deadline:
        try:
            if await read_json_or_none(core.read_namespaced_pod, name, namespace) is None:
                return
        except Exception:  # (the API's trouble: the start after it is checked as every start)
            return
        await asyncio.sleep(poll)


# --------------------------------------------------------------------------------------------------
# the late-pod sweep


async def sweep_late_pod(
    core: Any,
    namespace: str,
    pod_name: str,
    *,
    started: float,
    seconds: float,
    request_timeout: float,
    grace_period: int | None,
    deleting: Callable[[Any], None],
    delete_failed: Callable[[BaseException], None],
) -> None:
    """Delete the pod of a spawn the API failed, if it appears: requests sent to a stalled API
    server are carried out when it resumes, after the spawn (and JupyterHub's cleanup) gave up
    (docs/failure-modes.md).  Only a pod created before the spawn ended is deleted; the caller
    cancels the sweep when this server starts again.  Ends once the API answered "not found"
    twice, 5 s apart, or after ``seconds``.  ``core`` is KubeSpawner's CoreV1Api client (model
    objects, so its errors are the client's ``ApiException``); ``deleting(created)`` is called
    before a delete, ``delete_failed(exc)`` when one fails."""
    from kubernetes_asyncio.client import V1DeleteOptions, V1Preconditions
    from kubernetes_asyncio.client.exceptions import ApiException

    ended = time.time()
    deadline = time.monotonic() + seconds
    delay, absent_since = 1.0, None
    while time.monotonic() < deadline:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 10.0)
        try:
            pod = await asyncio.wait_for(
                core.read_namespaced_pod(pod_name, namespace), request_timeout
            )
        except ApiException as exc:
            if exc.status != NOT_FOUND:
                continue
            now = time.monotonic()
            absent_since = absent_since or now
            if now - absent_since >= 5:
                return
            delay = 2.5
            continue
        except Exception:  # the API is still down: keep trying until the deadline
            continue
        absent_since = None
        created = pod.metadata.creation_timestamp
        if created is not None and created.timestamp() > ended + 1:
            return  # a pod of a later spawn: not ours to delete
        deleting(created)
        try:
            await asyncio.wait_for(
                core.delete_namespaced_pod(
                    pod_name,
                    namespace,
                    body=V1DeleteOptions(
                        grace_period_seconds=grace_period,
                        preconditions=V1Preconditions(uid=pod.metadata.uid),
                    ),
                ),
                request_timeout,
            )
        except Exception as exc:
            delete_failed(exc)


def with_placement(api_client: Any, written: Any, manifest: JsonDict) -> Any:
    """KubeSpawner's V1Pod ``written`` given the labels and the affinity of ``manifest``
    (what ``apply_decision`` and ``avoid_nodes`` change of it; the rest is ``written``'s
    own, serialised into ``manifest`` unchanged), in place: no JSON round trip of the whole
    pod per spawn."""
    written.metadata.labels = dict(meta(manifest).get("labels") or {})
    affinity = (manifest.get("spec") or {}).get("affinity")
    written.spec.affinity = (
        api_client.deserialize(SimpleNamespace(data=json.dumps(affinity)), "V1Affinity")
        if affinity
        else None
    )
    return written
