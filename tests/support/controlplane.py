"""A throwaway Kubernetes cluster for cluster tests, every part a real component but the kubelet's
volume wait: etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok.

Plain Python, no pytest: the fixtures in ``tests/conftest.py`` and the benchmarks both use it.

    cp = ControlPlane(bin_dir)      # bin_dir holds `etcd`, `kube` and `kwok` (tests/kube/build.sh)
    cp.start()                      # blocks until every component is ready, or raises RuntimeError
    ... cp.kubeconfig ...           # admin kubeconfig (client cert in group system:masters)
    cp.stop()                       # kills every process it started, removes its temp dir

Everything listens on 127.0.0.1 only, on free ports picked at start. Nodes are API objects
(``helpers.create_node``) that kwok keeps Ready with Leases; kwok moves bound pods to Running
with pod IPs from a 127.x range, finishes graceful deletes and acknowledges VolumeAttachments (the
Stages in ``kwok-stages.yaml``). kube-controller-manager runs the attach/detach controller, the PV
binder, the PVC/PV protection, namespace and garbage-collector controllers. ``volume_gate.py`` keeps
a pod from starting before its volumes are attached, which no kwok Stage can express.

``kwok=False`` leaves kwok and the volume gate out (pods stay Pending once bound, as in a cluster
state frozen for a benchmark); ``controllers`` picks kube-controller-manager's controllers (an
empty tuple: no kube-controller-manager). ``start_scheduler`` and ``start_controllers`` add a
further kube-scheduler or kube-controller-manager process to a started control plane, for the one
test that needs it, and ``stop_component`` ends it.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HOST = "127.0.0.1"
# Nothing ever connects to a service IP here; the apiserver only needs a range to allocate from
# (the `kubernetes` Service takes its first address). A loopback range keeps every address the
# control plane ever hands out on 127.0.0.0/8.
SERVICE_CLUSTER_IP_RANGE = "127.96.0.0/16"
# TaintNodesByCondition would taint every new Node not-ready, and only kube-controller-manager's
# node-lifecycle controller (not run: it would also evict pods of nodes it judges unhealthy) clears
# that taint; ServiceAccount would reject pods whose `default` ServiceAccount does not exist (the
# serviceaccount controller is not run either) and inject token volumes.
DISABLED_ADMISSION_PLUGINS = ("TaintNodesByCondition", "ServiceAccount")

# kube-controller-manager's controllers: claims bound, volumes attached and detached (with the
# real Multi-Attach event), finalizers of claims and volumes, namespaces and owned objects removed.
CONTROLLERS = (
    "attachdetach",
    "persistentvolume-binder",
    "pvc-protection",
    "pv-protection",
    "namespace",
    "garbagecollector",
)
PV_RESYNC = "1s"
#: tests/kube: the Go modules of the control plane, its build script, bin/ and kwok's stages
KUBE_DIR = Path(__file__).resolve().parent.parent / "kube"
KWOK_STAGES = KUBE_DIR / "kwok-stages.yaml"
VOLUME_GATE = Path(__file__).with_name("volume_gate.py")
# The hostIP of every pod (kwok's --node-ip, and the InternalIP of helpers.create_node's Nodes).
NODE_IP = HOST
NODE_LEASE_SECONDS = 40  # a kubelet's default
# The line kwok v0.8.0 logs once its node and pod controllers run and it watches the resources of
# its other Stages (VolumeAttachments).
KWOK_READY = "watching stages"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports on 127.0.0.1 that were free a moment ago: every socket is
    held until all are chosen (ports chosen one after another can repeat: a hub's proxy and
    hub were once given the same port, and the hub could not bind)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            s = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind((HOST, 0))
            ports.append(s.getsockname()[1])
        return ports


def tail(path: str | os.PathLike[str] | None, lines: int = 40, width: int = 400) -> str:
    """The last `lines` lines of a log file (each cut to `width` characters), or a note why not."""
    if path is None:
        return "(no log)"
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(cannot read {path}: {e})"
    out = [line if len(line) <= width else line[:width] + " …" for line in text.splitlines()]
    return "\n".join(out[-lines:]) or "(empty log)"


# ---------------------------------------------------------------------------------------------
# Certificates
# ---------------------------------------------------------------------------------------------


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class _CA:
    """A one-day certificate authority that signs serving and client certificates."""

    def __init__(self, common_name: str = "nebari-colocate-test-ca") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )

    def issue(
        self,
        common_name: str,
        *,
        organizations: tuple[str, ...] | list[str] = (),
        server: bool = False,
    ) -> tuple[bytes, bytes]:
        """(cert PEM, key PEM). A serving cert is for 127.0.0.1 and localhost only."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            ).add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.IPAddress(ipaddress.ip_address(HOST)),
                        x509.DNSName("localhost"),
                    ]
                ),
                critical=False,
            )
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        cert = builder.sign(self.key, hashes.SHA256())
        return _pem_cert(cert), _pem_key(key)

    @property
    def pem(self) -> bytes:
        return _pem_cert(self.cert)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(cert_pem),
                    "client-key-data": _b64(key_pem),
                },
            }
        ],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        "current-context": "test",
        "preferences": {},
    }


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: have the child SIGKILLed if the thread that started it dies (pytest killed hard)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except Exception:
        pass


class _Component:
    """One child process with its log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it; closed below
        try:
            use_pdeathsig = sys.platform.startswith("linux") and (
                threading.current_thread() is threading.main_thread()
            )
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_set_pdeathsig if use_pdeathsig else None,
            )
        finally:
            log.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        else:
            proc.wait()

    def failure(self, what: str) -> RuntimeError:
        status = "running" if self.alive() else f"exited with {self.proc.returncode}"
        return RuntimeError(
            f"{self.name} {what} ({status}); log {self.log_path}, last lines:\n"
            f"{tail(self.log_path)}"
        )


def _port_in_use(log_path: Path) -> bool:
    text = tail(log_path, lines=200)
    return "address already in use" in text


def pod_cidr() -> str:
    """A /16 of 127.0.0.0/8 for this control plane's pod IPs, away from 127.0.0.x (where the hub,
    the proxy and every server listen), from the service range and, by chance, from other
    control planes running now."""
    service = ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE)
    while True:
        cidr = ipaddress.ip_network(f"127.{secrets.randbelow(200) + 50}.0.0/16")
        if not cidr.overlaps(service):
            return str(cidr)


class ControlPlane:
    """etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok: loopback only.

    ``workdir``: where to create this control plane's own temp dir (certs, kubeconfigs, the etcd
    data dir and one log file per component); None means the system temp dir. ``stop()`` removes
    that temp dir unless ``keep_logs`` is true, in which case only the etcd data is removed. When
    ``start()`` fails it stops what it started, keeps the logs and raises RuntimeError with the
    failing component's log tail.

    ``kwok``: run kwok and the volume gate (default). ``controllers``: the controllers of
    kube-controller-manager (default ``CONTROLLERS``; empty: do not run it). ``kubelet_stub`` is
    the former name of ``kwok`` (the hand-written kubelet stub it switched is gone): when given,
    it decides ``kwok``.

    Attributes set by ``start()``: ``dir``, ``kubeconfig`` (admin, group system:masters),
    ``server`` (https URL of the apiserver), ``ca_file``, ``etcd_log``, ``apiserver_log``,
    ``scheduler_log``, ``controller_manager_log``, ``kwok_log``, ``volume_gate_log`` (None for a
    component not run), ``pod_cidr`` (kwok's pod IP range), ``logs`` (name -> path), ``pids``
    (name -> pid), ``startup_seconds``. ``kubelet_stub_log`` is kept, always None.
    """

    def __init__(
        self,
        bin_dir: str | os.PathLike[str],
        workdir: str | os.PathLike[str] | None = None,
        *,
        kwok: bool = True,
        controllers: tuple[str, ...] | list[str] = CONTROLLERS,
        kubelet_stub: bool | None = None,
        keep_logs: bool = False,
        timeout: float = 60.0,
    ) -> None:
        self.bin_dir = Path(bin_dir)
        self.etcd_bin = self.bin_dir / "etcd"
        self.kube_bin = self.bin_dir / "kube"
        self.kwok_bin = self.bin_dir / "kwok"
        self.parent_dir = Path(workdir) if workdir is not None else None
        self.kwok = kwok if kubelet_stub is None else kubelet_stub
        self.controllers = tuple(controllers)
        self.pod_cidr = pod_cidr()
        self.keep_logs = keep_logs
        self.timeout = timeout

        self.dir: Path | None = None
        self.kubeconfig: str | None = None
        self.server: str | None = None
        self.ca_file: str | None = None
        self.etcd_log: str | None = None
        self.apiserver_log: str | None = None
        self.scheduler_log: str | None = None
        self.controller_manager_log: str | None = None
        self.kwok_log: str | None = None
        self.volume_gate_log: str | None = None
        self.kubelet_stub_log: str | None = None
        self.startup_seconds: float | None = None

        self._ca: _CA | None = None
        self._components: dict[str, _Component] = {}
        self._lock = threading.Lock()
        self._stopped = False
        self._atexit_registered = False

    # -- public ---------------------------------------------------------------------------------

    @property
    def kubelet_stub(self) -> bool:
        """The former name of ``kwok``."""
        return self.kwok

    @property
    def logs(self) -> dict[str, str]:
        return {name: str(c.log_path) for name, c in self._components.items()}

    @property
    def pids(self) -> dict[str, int]:
        return {name: c.pid for name, c in self._components.items() if c.pid is not None}

    def start(self) -> ControlPlane:
        """Start every component and wait until it is ready; RuntimeError (with logs) if not."""
        if self.dir is not None:
            raise RuntimeError("ControlPlane.start() called twice")
        for path in (self.etcd_bin, self.kube_bin, *([self.kwok_bin] if self.kwok else [])):
            if not os.access(path, os.X_OK):
                raise RuntimeError(f"{path} is missing or not executable: run tests/kube/build.sh")
        t0 = time.monotonic()
        if self.parent_dir is not None:
            self.parent_dir.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix="controlplane-", dir=self.parent_dir))
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        try:
            self._write_certs()
            self._start_etcd()
            self._start_apiserver()
            self._start_scheduler()
            if self.controllers:
                self.controller_manager_log = self._start_controller_manager()
            if self.kwok:
                self._start_kwok()
                self._start_volume_gate()
        except BaseException as e:
            # Keep the logs for a post-mortem; the message of a RuntimeError has their tails.
            keep, self.keep_logs = self.keep_logs, True
            try:
                self.stop()
            finally:
                self.keep_logs = keep
            if isinstance(e, RuntimeError):
                raise RuntimeError(f"{e}\n(logs kept in {self.dir})") from None
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Kill every process this control plane started and remove its temp dir. Idempotent."""
        with self._lock:
            # Reverse start order: kwok and the controllers first, etcd last.
            for component in reversed(list(self._components.values())):
                with contextlib.suppress(Exception):
                    component.stop()
            if self.dir is not None and not self._stopped:
                if self.keep_logs:
                    shutil.rmtree(self.dir / "etcd-data", ignore_errors=True)
                else:
                    shutil.rmtree(self.dir, ignore_errors=True)
            self._stopped = self.dir is not None
        if self._atexit_registered:
            with contextlib.suppress(Exception):
                atexit.unregister(self.stop)
            self._atexit_registered = False

    def user_kubeconfig(self, username: str, groups: tuple[str, ...] | list[str] = ()) -> str:
        """Write a kubeconfig for a client cert with CN=username, O=each group; return its path."""
        if self._ca is None or self.dir is None or self.server is None:
            raise RuntimeError("ControlPlane not started")
        cert, key = self._ca.issue(username, organizations=tuple(groups))
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in username)
        path = self.dir / f"user-{safe}-{os.urandom(3).hex()}.kubeconfig"
        self._write_json(path, _kubeconfig(self.server, self._ca.pem, cert, key, username))
        return str(path)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- certificates ---------------------------------------------------------------------------

    def _write(self, name: str, data: bytes, mode: int = 0o600) -> str:
        path = self.dir / name
        path.write_bytes(data)
        path.chmod(mode)
        return str(path)

    @staticmethod
    def _write_json(path: Path, obj: dict) -> None:
        # JSON is YAML: every kubeconfig reader accepts it.
        path.write_text(json.dumps(obj, indent=2))
        path.chmod(0o600)

    def _write_certs(self) -> None:
        ca = self._ca = _CA()
        self.ca_file = self._write("ca.crt", ca.pem, 0o644)
        cert, key = ca.issue("kube-apiserver", server=True)
        self._serving_cert = self._write("serving.crt", cert, 0o644)
        self._serving_key = self._write("serving.key", key)
        cert, key = ca.issue("admin", organizations=("system:masters",))
        self._admin_cert = self._write("admin.crt", cert, 0o644)
        self._admin_key = self._write("admin.key", key)
        self._admin_pems = (cert, key)
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._sa_key = self._write("sa.key", _pem_key(sa))
        self._sa_pub = self._write(
            "sa.pub",
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            0o644,
        )

    def _ssl_context(self, client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if client_cert:
            ctx.load_cert_chain(self._admin_cert, self._admin_key)
        return ctx

    # -- components -----------------------------------------------------------------------------

    def _launch(self, name: str, argv: list[str], env: dict | None = None) -> _Component:
        log_path = self.dir / f"{name}.log"
        component = _Component(name, argv, log_path, env)
        self._components[name] = component
        component.start()
        return component

    def _retry_on_port_clash(self, name: str, start_and_wait) -> None:
        """Run start_and_wait(); if the component died on a port taken meanwhile, try new ports."""
        for attempt in range(3):
            try:
                start_and_wait()
                return
            except RuntimeError:
                component = self._components.get(name)
                if attempt == 2 or component is None or component.alive():
                    raise
                if not _port_in_use(component.log_path):
                    raise
                component.stop()
                component.log_path.rename(component.log_path.with_suffix(f".{attempt}.log"))

    def _wait(self, component: _Component, what: str, ready) -> None:
        deadline = time.monotonic() + self.timeout
        last_error = None
        while time.monotonic() < deadline:
            if not component.alive():
                raise component.failure(f"exited before it was {what}")
            try:
                if ready():
                    return
            except Exception as e:
                last_error = e
            time.sleep(0.1)
        detail = f"; last probe error: {last_error!r}" if last_error else ""
        raise component.failure(f"not {what} within {self.timeout:.0f} s{detail}")

    def _wait_healthz(self, component: _Component, port: int) -> None:
        """Wait until a component serving on ``port`` (kube-scheduler, kube-controller-manager)
        answers 200 on /healthz."""
        ctx = self._ssl_context(client_cert=False)

        def ready() -> bool:
            status, _ = self._get(f"https://{HOST}:{port}/healthz", ctx)
            return status == 200

        self._wait(component, "healthy (/healthz)", ready)

    def _get(self, url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as r:
                return r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")

    def _start_etcd(self) -> None:
        def attempt() -> None:
            client, peer = free_port(), free_port()
            self.etcd_url = f"http://{HOST}:{client}"
            data_dir = self.dir / "etcd-data"
            shutil.rmtree(data_dir, ignore_errors=True)
            component = self._launch(
                "etcd",
                [
                    str(self.etcd_bin),
                    "--name=controlplane",
                    f"--data-dir={data_dir}",
                    f"--listen-client-urls={self.etcd_url}",
                    f"--advertise-client-urls={self.etcd_url}",
                    f"--listen-peer-urls=http://{HOST}:{peer}",
                    f"--initial-advertise-peer-urls=http://{HOST}:{peer}",
                    f"--initial-cluster=controlplane=http://{HOST}:{peer}",
                    "--initial-cluster-state=new",
                    "--unsafe-no-fsync=true",
                    "--log-level=warn",
                ],
            )

            def ready() -> bool:
                status, body = self._get(f"{self.etcd_url}/health")
                return status == 200 and json.loads(body).get("health") == "true"

            self._wait(component, "healthy", ready)

        self._retry_on_port_clash("etcd", attempt)
        self.etcd_log = str(self._components["etcd"].log_path)

    def _start_apiserver(self) -> None:
        def attempt() -> None:
            port = free_port()
            self.server = f"https://{HOST}:{port}"
            component = self._launch(
                "apiserver",
                [
                    str(self.kube_bin),
                    "apiserver",
                    f"--etcd-servers={self.etcd_url}",
                    f"--bind-address={HOST}",
                    f"--advertise-address={HOST}",
                    f"--secure-port={port}",
                    f"--tls-cert-file={self._serving_cert}",
                    f"--tls-private-key-file={self._serving_key}",
                    f"--client-ca-file={self.ca_file}",
                    f"--cert-dir={self.dir / 'apiserver-certs'}",
                    "--authorization-mode=RBAC",
                    f"--disable-admission-plugins={','.join(DISABLED_ADMISSION_PLUGINS)}",
                    f"--service-account-issuer={self.server}",
                    f"--service-account-key-file={self._sa_pub}",
                    f"--service-account-signing-key-file={self._sa_key}",
                    f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                    # The `kubernetes` Endpoints would carry the advertise address, and Endpoints
                    # reject loopback IPs: with no reconciler nothing tries to write them.
                    "--endpoint-reconciler-type=none",
                    "--profiling=false",
                ],
            )
            ctx = self._ssl_context()

            def ready() -> bool:
                status, _ = self._get(f"{self.server}/readyz", ctx)
                return status == 200

            self._wait(component, "ready (/readyz)", ready)

        self._retry_on_port_clash("apiserver", attempt)
        self.apiserver_log = str(self._components["apiserver"].log_path)
        cert, key = self._admin_pems
        kubeconfig = self.dir / "admin.kubeconfig"
        self._write_json(kubeconfig, _kubeconfig(self.server, self._ca.pem, cert, key, "admin"))
        self.kubeconfig = str(kubeconfig)

    def _start_scheduler(self) -> None:
        def attempt() -> None:
            port = free_port()
            component = self._launch(
                "scheduler",
                [
                    str(self.kube_bin),
                    "scheduler",
                    f"--kubeconfig={self.kubeconfig}",
                    "--leader-elect=false",
                    f"--bind-address={HOST}",
                    f"--secure-port={port}",
                    f"--tls-cert-file={self._serving_cert}",
                    f"--tls-private-key-file={self._serving_key}",
                    f"--cert-dir={self.dir / 'scheduler-certs'}",
                    "--profiling=false",
                ],
            )
            self._wait_healthz(component, port)
            self.scheduler_url = f"https://{HOST}:{port}"

        self._retry_on_port_clash("scheduler", attempt)
        self.scheduler_log = str(self._components["scheduler"].log_path)

    def start_scheduler(self, name: str, profiles: list[dict]) -> str:
        """Start a further kube-scheduler (the same binary) serving ``profiles`` (a
        KubeSchedulerConfiguration's, each with its ``schedulerName``), as zero-to-jupyterhub's
        user-scheduler runs beside the cluster's own; wait until it is healthy and return its
        log's path.  It runs until ``stop()``; ``stop_component(name)`` ends it sooner."""
        if self.dir is None or self.kubeconfig is None:
            raise RuntimeError("ControlPlane not started")
        component_name = f"scheduler-{name}"
        config_path = self.dir / f"{component_name}.config.json"
        # JSON is YAML: kube-scheduler reads its --config either way.
        config_path.write_text(
            json.dumps(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": self.kubeconfig},
                    "leaderElection": {"leaderElect": False},
                    "enableProfiling": False,
                    "profiles": profiles,
                },
                indent=2,
            )
        )

        def attempt() -> None:
            port = free_port()
            component = self._launch(
                component_name,
                [
                    str(self.kube_bin),
                    "scheduler",
                    f"--config={config_path}",
                    f"--bind-address={HOST}",
                    f"--secure-port={port}",
                    f"--tls-cert-file={self._serving_cert}",
                    f"--tls-private-key-file={self._serving_key}",
                    f"--cert-dir={self.dir / (component_name + '-certs')}",
                ],
            )
            self._wait_healthz(component, port)

        self._retry_on_port_clash(component_name, attempt)
        return str(self._components[component_name].log_path)

    def stop_component(self, name: str) -> None:
        """Stop one component this control plane started (SIGTERM, then SIGKILL)."""
        self._components[name].stop()

    def start_controllers(self, name: str, controllers: tuple[str, ...] | list[str]) -> str:
        """Start a further kube-controller-manager (the same binary) running only
        ``controllers`` beside the control plane's own (which keeps its ``controllers``), for a
        test that needs a controller no other test's cluster runs (the StatefulSet controller
        for zero-to-jupyterhub's user placeholders); wait until it is healthy and return its
        log's path.  It runs until ``stop()``; ``stop_component(f"controller-manager-{name}")``
        ends it sooner, and the cluster is as before (the objects it made stay)."""
        if self.dir is None or self.kubeconfig is None:
            raise RuntimeError("ControlPlane not started")
        return self._start_controller_manager(f"controller-manager-{name}", tuple(controllers))

    def _start_controller_manager(
        self, component_name: str = "controller-manager", controllers: tuple[str, ...] = ()
    ) -> str:
        controllers = controllers or self.controllers

        def attempt() -> None:
            port = free_port()
            component = self._launch(
                component_name,
                [
                    str(self.kube_bin),
                    "controller-manager",
                    f"--kubeconfig={self.kubeconfig}",
                    # Without these it looks for an in-cluster config to review the tokens and
                    # authorize the callers of its endpoints; the admin kubeconfig serves both.
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    # Client certs are checked against our CA, not looked up in the cluster (whose
                    # extension-apiserver-authentication ConfigMap has no request-header CA).
                    "--authentication-skip-lookup=true",
                    f"--client-ca-file={self.ca_file}",
                    f"--controllers={','.join(controllers)}",
                    # The PV controller matches a new claim against its cache of PVs; a PV created a
                    # moment before may not be in it yet, and the claim then waits for the next
                    # resync (15 s by default).
                    f"--pvclaimbinder-sync-period={PV_RESYNC}",
                    "--leader-elect=false",
                    "--use-service-account-credentials=false",
                    f"--bind-address={HOST}",
                    f"--secure-port={port}",
                    f"--tls-cert-file={self._serving_cert}",
                    f"--tls-private-key-file={self._serving_key}",
                    f"--cert-dir={self.dir / (component_name + '-certs')}",
                    "--profiling=false",
                ],
            )
            self._wait_healthz(component, port)

        self._retry_on_port_clash(component_name, attempt)
        return str(self._components[component_name].log_path)

    def _start_kwok(self) -> None:
        # kwok reads $KWOK_WORKDIR/kwok.yaml (default ~/.kwok) before --config: point it at a
        # directory of its own so no configuration of this machine's user leaks in.
        workdir = self.dir / "kwok"
        workdir.mkdir()
        component = self._launch(
            "kwok",
            [
                str(self.kwok_bin),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={KWOK_STAGES}",
                "--manage-all-nodes=true",
                f"--cidr={self.pod_cidr}",
                f"--node-ip={NODE_IP}",
                # The Lease a kubelet renews (kwok's flag defaults to 0: no Leases at all).
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
                # No --server-address and no --node-port: kwok serves nothing (no logs, exec or
                # metrics endpoints) and so listens on no port at all.
            ],
            env={**os.environ, "KWOK_WORKDIR": str(workdir)},
        )
        self.kwok_log = str(component.log_path)

        def ready() -> bool:
            return KWOK_READY in component.log_path.read_text(errors="replace")

        self._wait(component, "ready", ready)

    def _start_volume_gate(self) -> None:
        component = self._launch(
            "volume-gate",
            [sys.executable, "-u", str(VOLUME_GATE), "--kubeconfig", self.kubeconfig],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.volume_gate_log = str(component.log_path)

        def ready() -> bool:
            return "volume-gate: ready" in component.log_path.read_text(errors="replace")

        self._wait(component, "ready", ready)

    # -- faults (tests/faults): signals to processes this control plane started ------------------

    def pause(self, name: str) -> None:
        """SIGSTOP a component: it stops answering, while the kernel still accepts connections
        and queues requests for it (what a frozen apiserver looks like to a client)."""
        os.kill(self._components[name].pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT a paused component."""
        os.kill(self._components[name].pid, signal.SIGCONT)

    def restart(self, name: str, down_seconds: float = 0.0) -> None:
        """Stop a component (SIGTERM), wait ``down_seconds``, start it again with the same
        arguments (same ports, etcd's data kept) and wait until it is ready again."""
        component = self._components[name]
        component.stop()
        time.sleep(down_seconds)
        component.start()
        probes = {
            "etcd": lambda: self._get(f"{self.etcd_url}/health")[0] == 200,
            "apiserver": lambda: self._get(f"{self.server}/readyz", self._ssl_context())[0] == 200,
        }
        self._wait(component, "ready again", probes.get(name, component.alive))
