"""A real JupyterHub process for end-to-end tests, against the test control plane.

    hub = Hub(workdir, kubeconfig=..., namespace=..., profile_list=[...])
    await hub.start()        # jupyterhub + configurable-http-proxy + the single-user stub
    await hub.create_user("alice")
    await hub.start_server("alice", "app", {"profile": "cpu"})   # waits until ready
    ...
    await hub.stop()         # SIGTERM, then SIGKILL to the process groups; nothing is left running

Everything listens on 127.0.0.1 (the hub, the proxy, the proxy's API) or on the 127.x pod IPs
kwok hands out (the single-user stub, see singleuser_stub.py). The hub runs
``python -m jupyterhub -f tests/e2e/jupyterhub_config.py`` with the Python of this test run, so it
uses the JupyterHub installed there (5.x or 6.x), ``spawner_class = "colocate"`` through the
package's entry point, and KubeSpawner reads the control plane's kubeconfig from $KUBECONFIG.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import aiohttp

from tests.support.controlplane import free_ports, tail
from tests.support.waiting import wait_until

HERE = Path(__file__).resolve().parent
CONFIG_FILE = HERE / "jupyterhub_config.py"
STUB = HERE / "singleuser_stub.py"
PASSWORD = "e2e-password"


def venv_bin() -> Path:
    return Path(sys.prefix) / "bin"


def proxy_command() -> str | None:
    """configurable-http-proxy: in this environment's bin (scripts/test-e2e links it there),
    or on PATH."""
    return shutil.which(
        "configurable-http-proxy", path=f"{venv_bin()}{os.pathsep}{os.environ.get('PATH', '')}"
    )


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGKILL the child if the test process dies (pytest killed hard)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Process:
    """A child in its own process group, with its output in a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict, cwd: Path):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_set_pdeathsig if sys.platform.startswith("linux") else None,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    async def wait(self, timeout: float) -> int | None:
        """The exit status, or None if still running after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return self.returncode

    async def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process (it cleans up), then SIGKILL its whole process group."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            await self.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # children it left behind, if any
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        proc.wait()

    def tail(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)


class Hub:
    """One JupyterHub (with its proxy) and one single-user stub for one namespace.

    Settings (keyword arguments) end up in the JSON file jupyterhub_config.py reads:
    ``profile_list``, ``spawner`` (extra ColocatingKubeSpawner traits),
    ``consecutive_failure_limit`` (default 0), ``pre_spawn_delay`` (seconds, default 0),
    ``start_timeout``, ``http_timeout``, ``way_out_handler`` (install the way out's handler and
    the templates of JupyterHub's pages, as ``configure(c)`` does), ``z2jh_pod_priority`` (the
    user pods' priority class, as zero-to-jupyterhub sets it with ``scheduling.podPriority``),
    ``admin_users`` (JupyterHub admins), ``roles`` (more ``load_roles``, e.g. a role granting
    ``custom:colocate:read``).
    """

    def __init__(self, workdir: Path, *, kubeconfig: str, namespace: str, **settings):
        self.workdir = Path(workdir)
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.api_token = secrets.token_hex(16)
        # chosen together, so that no two of a hub's ports are the same
        self.proxy_port, self.hub_port, self.proxy_api_port, server_port, japps_port = free_ports(5)
        self.url = f"http://127.0.0.1:{self.proxy_port}"
        self.settings = {
            "workdir": str(self.workdir),
            "namespace": namespace,
            "proxy_port": self.proxy_port,
            "hub_port": self.hub_port,
            "proxy_api_port": self.proxy_api_port,
            "proxy_token": secrets.token_hex(16),
            "api_token": self.api_token,
            "password": PASSWORD,
            "consecutive_failure_limit": 0,
            # The pods' server port: one per hub, so a single-user stub of another test run on
            # this machine (pod IPs 127.0.0.X repeat across control planes) never answers.
            "server_port": server_port,
            **settings,
        }
        if self.settings.get("jhub_apps"):
            self.settings.setdefault("japps_port", japps_port)
        if self.settings.get("jhub_apps") == "data-science-pack":
            # The replica's 02-jhub-apps.py binds this (data-science-pack: 0.0.0.0:8000).
            values = self.settings.setdefault("helm_values", {})
            values.setdefault("custom", {})["e2e-bind-url"] = self.url
        self.hub: Process | None = None
        self.stub: Process | None = None
        self._session: aiohttp.ClientSession | None = None

    # -- processes -------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.workdir / "hub.log"

    @property
    def stub_log_path(self) -> Path:
        return self.workdir / "singleuser-stub.log"

    def _env(self) -> dict:
        env = dict(os.environ)
        env["KUBECONFIG"] = self.kubeconfig
        env["PATH"] = f"{venv_bin()}{os.pathsep}{env.get('PATH', '')}"
        env["NEBARI_COLOCATE_E2E_SETTINGS"] = str(self.workdir / "settings.json")
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("JUPYTERHUB_API_TOKEN", None)
        return env

    #: JupyterHub's words when a managed service did not answer within its fixed ~10 s
    SERVICE_TIMEOUT = "Cannot connect to japps service"

    async def start(self, timeout: float = 60.0, attempts: int = 5) -> Hub:
        """Start; with jhub-apps, again (up to `attempts` times) when the hub stopped because
        jhub-apps' service was not up in JupyterHub's fixed ~10 s: importing it costs ~5 s of CPU
        (jsonschema's rfc3987-syntax grammar), more than 10 s on a machine this busy."""
        for attempt in range(1, attempts + 1):
            try:
                return await self._start(timeout)
            except RuntimeError:
                if attempt == attempts or self.SERVICE_TIMEOUT not in self.log():
                    raise
                print(f"harness: {self.SERVICE_TIMEOUT} (attempt {attempt}); starting again")
                await self.stop()
        raise AssertionError("unreachable")

    async def _start(self, timeout: float) -> Hub:
        if proxy_command() is None:
            raise RuntimeError(
                "configurable-http-proxy not found in "
                f"{venv_bin()} or on PATH: run scripts/test-e2e, which installs it"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "settings.json").write_text(json.dumps(self.settings, indent=2))
        env = self._env()
        self.stub = Process(
            "singleuser-stub",
            [
                sys.executable,
                "-u",
                str(STUB),
                "--kubeconfig",
                self.kubeconfig,
                "--namespace",
                self.namespace,
            ],
            self.stub_log_path,
            env,
            self.workdir,
        )
        self.stub.start()
        self.hub = Process(
            "jupyterhub",
            [sys.executable, "-m", "jupyterhub", "-f", str(CONFIG_FILE)],
            self.log_path,
            env,
            self.workdir,
        )
        self.hub.start()
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"token {self.api_token}"},
            timeout=aiohttp.ClientTimeout(total=30),
        )
        deadline = time.monotonic() + timeout
        while True:
            if not self.hub.alive():
                raise RuntimeError(
                    f"jupyterhub exited with {self.hub.returncode} before it answered; "
                    f"log {self.log_path}:\n{self.hub.tail()}"
                )
            if "singleuser-stub: ready" in self.stub_log_path.read_text(errors="replace") and (
                await self.responds(direct=True) and await self.responds()
            ):
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"jupyterhub did not answer within {timeout:.0f} s; log {self.log_path}:\n"
                    f"{self.hub.tail()}\nsingle-user stub:\n{self.stub.tail(10)}"
                )
            await asyncio.sleep(0.2)

    async def responds(self, direct: bool = False) -> bool:
        """GET /hub/api answers 200 through the proxy (or, `direct`, on the hub's own port)."""
        base = f"http://127.0.0.1:{self.hub_port}" if direct else self.url
        try:
            async with self._session.get(
                f"{base}/hub/api", timeout=aiohttp.ClientTimeout(total=3)
            ) as r:
                return r.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    def proxy_pid(self) -> int | None:
        try:
            return int((self.workdir / "proxy.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    async def stop(self) -> None:
        """Stop the hub (it stops its servers and its proxy), the stub, and anything left."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        # jhub-apps' service (uvicorn) waits out JupyterHub's 10 s SIGINT on open connections
        # at every hub stop: a test's hub has nothing of it to keep, so it goes first, at once
        for pid in self.service_pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self.hub is not None:
            await self.hub.stop()
        pid = self.proxy_pid()
        if pid is not None and is_proxy(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.stub is not None:
            await self.stub.stop(timeout=5)
        for pid in self.service_pids():  # a hub that aborted leaves its managed services
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def service_pids(self) -> list[int]:
        """Processes started for this hub (its managed services: jhub-apps' japps and
        japps-initialize-startup-apps), found by this hub's settings file in their environment."""
        marker = f"NEBARI_COLOCATE_E2E_SETTINGS={self.workdir / 'settings.json'}".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if marker in environ.split(b"\0"):
                pids.append(int(entry.name))
        return pids

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- REST API --------------------------------------------------------------------------------

    async def api(self, method: str, path: str, body=None) -> tuple[int, object]:
        """Call /hub/api<path> with the admin service token; (status, JSON or text body)."""
        async with self._session.request(
            method, f"{self.url}/hub/api{path}", json=body if body is not None else None
        ) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text) if text else None
            except ValueError:
                return r.status, text

    async def metrics(self) -> dict[tuple[str, frozenset], float]:
        """The hub's ``/hub/metrics`` (JupyterHub's series and the library's, one registry):
        (sample name, its labels) -> value."""
        from prometheus_client.parser import text_string_to_metric_families

        async with self._session.get(f"{self.url}/hub/metrics") as r:
            text = await r.text()
            if r.status != 200:
                raise AssertionError(f"/hub/metrics: {r.status} {text[:300]}")
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    async def create_user(self, name: str) -> None:
        status, body = await self.api("POST", f"/users/{quote(name, safe='')}")
        if status not in (201, 409):
            raise AssertionError(f"creating user {name}: {status} {body}")

    def server_path(self, user: str, server: str = "") -> str:
        return f"/users/{quote(user, safe='')}/servers/{quote(server, safe='')}"

    async def request_server(self, user: str, server: str = "", body=None) -> tuple[int, object]:
        """POST a start request; (status, body) as the hub answered (201, 202 or an error)."""
        return await self.api("POST", self.server_path(user, server), body or {})

    async def server_model(self, user: str, server: str = "") -> dict | None:
        status, body = await self.api("GET", f"/users/{quote(user, safe='')}")
        if status != 200:
            raise AssertionError(f"reading user {user}: {status} {body}")
        return (body.get("servers") or {}).get(server)

    async def start_server(
        self, user: str, server: str = "", body=None, timeout: float = 60
    ) -> dict:
        """Start a server through the REST API and wait until the hub reports it ready."""
        status, answer = await self.request_server(user, server, body)
        if status not in (201, 202):
            raise AssertionError(
                f"starting {user}/{server!r}: {status} {answer}\nhub log:\n{tail(self.log_path)}"
            )
        deadline = time.monotonic() + timeout
        while True:
            model = await self.server_model(user, server)
            if model and model.get("ready"):
                return model
            if model is None or not model.get("pending"):
                raise AssertionError(
                    f"{user}/{server!r} stopped while starting: {model}\n"
                    f"hub log:\n{tail(self.log_path)}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{user}/{server!r} not ready in {timeout} s: {model}")
            await asyncio.sleep(0.2)

    async def wait_until_ended(
        self, user: str, server: str = "", timeout: float = 60
    ) -> dict | None:
        """Wait until the hub no longer reports the server pending; its model (None if gone or
        if the hub went away)."""
        deadline = time.monotonic() + timeout
        while self.hub is not None and self.hub.alive() and time.monotonic() < deadline:
            try:
                model = await self.server_model(user, server)
            except Exception:  # the hub went away in the middle of a request
                return None
            if not model or not model.get("pending"):
                return model
            await asyncio.sleep(0.2)
        return None

    async def stop_server(self, user: str, server: str = "", timeout: float = 30) -> None:
        status, body = await self.api("DELETE", self.server_path(user, server))
        if status not in (202, 204):
            raise AssertionError(f"stopping {user}/{server!r}: {status} {body}")
        await wait_until(
            lambda: self.server_model(user, server),
            until=lambda model: not (model and (model.get("ready") or model.get("pending"))),
            timeout=timeout,
            what=f"{user}/{server!r} stopped",
        )

    async def proxied(self, path: str) -> tuple[int, object]:
        """GET a path through the public proxy without credentials (the stub needs none)."""
        async with aiohttp.ClientSession() as session, session.get(f"{self.url}{path}") as r:
            text = await r.text()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text


def is_proxy(pid: int) -> bool:
    """Is `pid` a running configurable-http-proxy (and not a recycled pid)?"""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"configurable-http-proxy" in cmdline
