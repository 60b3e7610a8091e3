"""A fault-injecting HTTP proxy between the spawner and the kube-apiserver, on 127.0.0.1 only.

The spawner talks plain HTTP to the proxy (its kubeconfig says ``http://127.0.0.1:<port>``); the
proxy forwards every request over HTTPS to the apiserver with the admin client certificate, and
streams watch responses back chunk by chunk.  It runs its own event loop in a thread, so the
spawner's loop (the hub's) carries nothing of it.  Faults, settable while it runs:

- ``latency``: seconds added before each request is forwarded (watches included);
- ``fail_status`` with ``fail_probability`` (seeded) or ``fail_next``: answer that HTTP status
  with a Kubernetes ``Status`` body (429 carries ``Retry-After: 1``, as API Priority and Fairness
  does) instead of forwarding; ``fail_watches`` says whether watch requests fail too;
- ``reset_watches()``: cut every open watch stream (the reflectors must notice and re-list);
- ``hold``: a predicate on (method, path); matching requests wait until ``release()`` (all, or
  those creating the objects named) and are then forwarded even if their client gave up (or
  died) meanwhile: a request that reached a stalled apiserver and is carried out when it
  resumes. ``held()`` names the objects the held requests create;
- ``blackhole``: a predicate on the path; matching watch streams stay open but carry nothing
  from then on (a dropped NAT or load-balancer flow: no error, no byte);
- ``refuse_on(predicate, seconds)``: the first request matching (method, path, query) starts
  ``seconds`` of an API server restart as a client sees it: every open connection is cut and
  new ones are refused (the listening socket is closed, then opened again on the same port).

Test scaffolding, not part of the library.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import ssl
import threading
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


@dataclass
class Counts:
    requests: int = 0
    forwarded: int = 0
    failed: int = 0
    watches_cut: int = 0
    by_status: dict = field(default_factory=dict)


class FaultProxy:
    def __init__(self, upstream: str, ca_file: str, cert_file: str, key_file: str, seed: int = 1):
        if not upstream.startswith("https://127.") and not upstream.startswith("https://localhost"):
            raise ValueError(f"upstream {upstream} is not on loopback")
        self.upstream = upstream.rstrip("/")
        self._ssl = ssl.create_default_context(cafile=ca_file)
        self._ssl.load_cert_chain(cert_file, key_file)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.latency = 0.0
        self.fail_status: int | None = None
        self.fail_probability = 1.0
        self.fail_next: int | None = None  # fail this many requests, then forward again
        self.fail_watches = False
        self.hold = None  # callable(method, path) -> bool
        self.blackhole = None  # callable(path) -> bool, for watch streams
        self._refuse_trigger = None  # (callable(method, path, query) -> bool, seconds)
        self.refusals = 0  # refusal windows started
        self.counts = Counts()
        self._held: list[tuple[str, asyncio.Event]] = []  # (object name, its gate)
        self.url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._watches: set[asyncio.Task] = set()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    # -- control (any thread) --------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def clear(self) -> None:
        """No faults from now on."""
        with self._lock:
            self.latency = 0.0
            self.fail_status = None
            self.fail_probability = 1.0
            self.fail_next = None
            self.fail_watches = False
        self.blackhole = None
        self._refuse_trigger = None
        self.release()

    def refuse_on(self, predicate, seconds: float) -> None:
        """Once a request matches ``predicate(method, path, query)``: ``seconds`` of refused
        connections (every open one cut, the port closed), then serve again."""
        self._refuse_trigger = (predicate, seconds)

    def release(self, names: set[str] | None = None) -> None:
        """Forward every held request, and hold no more; or, given ``names``, forward only the
        held requests that create objects of those names, and keep holding."""
        if names is None:
            self.hold = None

        def wake():
            with self._lock:
                chosen = [h for h in self._held if names is None or h[0] in names]
                self._held = [h for h in self._held if h not in chosen]
            for _, gate in chosen:
                gate.set()

        assert self._loop is not None
        self._loop.call_soon_threadsafe(wake)

    def held(self) -> list[str]:
        """The names of the objects the requests held now would create."""
        with self._lock:
            return [name for name, _ in self._held]

    def reset_watches(self) -> int:
        """Cut every open watch stream; returns how many were cut."""
        done = threading.Event()
        cut = [0]

        def cancel():
            for task in list(self._watches):
                task.cancel()
                cut[0] += 1
            done.set()

        assert self._loop is not None
        self._loop.call_soon_threadsafe(cancel)
        done.wait(5)
        with self._lock:
            self.counts.watches_cut += cut[0]
        return cut[0]

    def kubeconfig(self) -> dict:
        assert self.url is not None
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "hub", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "hub"}}],
            "current-context": "proxy",
        }

    # -- the proxy (its own loop) ----------------------------------------------------------------

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=0),
            # No timeouts of its own: a frozen apiserver holds the request as long as the client
            # waits (and carries it out when it resumes, whether or not the client gave up).
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{path:.*}", self._handle)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self._runner, self._site, self._port = runner, site, port
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            for task in list(self._watches):
                task.cancel()
            await runner.cleanup()
            await self._session.close()

    def _fault_for(self, watch: bool) -> tuple[float, int | None]:
        with self._lock:
            self.counts.requests += 1
            status = None
            if self.fail_status is not None and (self.fail_watches or not watch):
                if self.fail_next is not None:
                    if self.fail_next > 0:
                        self.fail_next -= 1
                        status = self.fail_status
                elif self._random.random() < self.fail_probability:
                    status = self.fail_status
            if status is not None:
                self.counts.failed += 1
                self.counts.by_status[status] = self.counts.by_status.get(status, 0) + 1
            return self.latency, status

    async def _refuse(self, seconds: float) -> None:
        """Close the port and cut every connection (this request's too); open it again later."""
        self.refusals += 1
        await self._site.stop()
        for handler in list(self._runner.server.connections):
            if handler.transport is not None:
                handler.transport.abort()

        async def reopen() -> None:
            await asyncio.sleep(seconds)
            self._site = web.TCPSite(self._runner, "127.0.0.1", self._port)
            await self._site.start()

        self._reopening = asyncio.ensure_future(reopen())

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch") in ("1", "true", "True")
        trigger = self._refuse_trigger
        if trigger is not None and trigger[0](request.method, request.path, request.query):
            self._refuse_trigger = None
            await self._refuse(trigger[1])
            return web.Response(status=502)  # never sent: the connection is cut
        latency, status = self._fault_for(watch)
        if latency:
            await asyncio.sleep(latency)
        if status is not None:
            return self._status(status)
        body = await request.read()
        hold = self.hold
        if hold is not None and hold(request.method, request.path):
            gate = asyncio.Event()
            with self._lock:
                self._held.append((_object_name(body), gate))
            await gate.wait()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        url = f"{self.upstream}{request.rel_url}"
        try:
            upstream = await self._session.request(
                request.method, url, data=body or None, headers=headers, allow_redirects=False
            )
        except (aiohttp.ClientError, OSError):
            # The apiserver is down: the client sees the connection dropped, as it would.
            if request.transport is not None:
                request.transport.close()
            raise web.HTTPBadGateway() from None
        with self._lock:
            self.counts.forwarded += 1
        try:
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
            if not watch:
                payload = await upstream.read()
                return web.Response(status=upstream.status, body=payload, headers=out_headers)
            task = asyncio.current_task()
            assert task is not None
            self._watches.add(task)
            try:
                response = web.StreamResponse(status=upstream.status, headers=out_headers)
                await response.prepare(request)
                # A client that went away (a hub killed with its watches open) ends the stream.
                with contextlib.suppress(ConnectionError):
                    async for chunk in upstream.content.iter_any():
                        blackhole = self.blackhole
                        if blackhole is not None and blackhole(request.path):
                            continue  # the stream stays open and silent
                        await response.write(chunk)
                    await response.write_eof()
                return response
            finally:
                self._watches.discard(task)
        finally:
            upstream.release()

    @staticmethod
    def _status(code: int) -> web.Response:
        reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}.get(
            code, "InternalError"
        )
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"injected by the fault proxy ({code})",
            "reason": reason,
            "code": code,
        }
        headers = {"Retry-After": "1"} if code == 429 else {}
        return web.Response(
            status=code, text=json.dumps(body), content_type="application/json", headers=headers
        )


def _object_name(body: bytes) -> str:
    """The ``metadata.name`` of the object a create request's body carries ("" if none)."""
    try:
        return str(json.loads(body)["metadata"]["name"])
    except (ValueError, KeyError, TypeError):
        return ""
