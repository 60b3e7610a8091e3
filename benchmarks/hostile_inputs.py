"""Hostile input through the pure core and the file readers: the worst case, and a big dump.

Three parts:

1. **The hub's event loop.**  Every hostile value of issue 11 (``memory: 1e999999``,
   ``cpu: 1e999999999``, megabyte-long digit strings, exponents that wrap at int32, negative and
   fractional counts, 1.5 MB pods with thousands of containers, megabyte event messages) is put
   where the spawner meets it: in a pod of another namespace bound to the user's pinned node, and
   in the user's own manifest.  Timed: the pure work of one spawn check (``ClusterState``
   indexes, ``decide``, ``apply_decision``, the messages) and the event classifier.  Quantity
   caches are cleared before every run, so each figure is a first parse.
2. **The readers of user-supplied files.**  ``nebari-colocate simulate`` on each hostile file
   (binary, alias bomb, recursive alias, 100,000-deep nesting, a 200,000-digit integer, invalid
   objects): the time to its one-line error.
3. **A 20,000-pod dump** (kubectl-like objects, ~60 MB of YAML): ``simulate`` in a child process,
   wall time and peak resident memory.

Last line: ``hostile inputs: worst=… ms (<case>) in the hub's pure core over N cases; readers
worst=… ms; 20000-pod dump (… MB): … s, … MB peak``.

    python -m benchmarks.hostile_inputs [--pods 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

from nebari_colocate import cli, events, messages, quantity
from nebari_colocate.affinity import apply_decision
from nebari_colocate.placement import REFUSE, Policy, decide
from nebari_colocate.state import ClusterState
from tests.support import builders

NAMESPACE = "dev"
HOSTILE_QUANTITIES = {
    "memory 1e999999": ("memory", "1e999999"),
    "cpu 1e999999999": ("cpu", "1e999999999"),
    "memory -1e999999": ("memory", "-1e999999"),
    "memory 1e4294967296 (int32 wrap)": ("memory", "1e4294967296"),
    "memory 1e-999999999": ("memory", "1e-999999999"),
    "memory 1 MB of digits": ("memory", "9" * 1_000_000),
    "memory 1 MB of zeros then a digit": ("memory", "0." + "0" * 1_000_000 + "1e1000002"),
    "memory 1 MB fraction": ("memory", "1." + "0" * 1_000_000 + "1"),
    "memory 1 MB of digits then junk": ("memory", "1" * 1_000_000 + "x"),
    "cpu python int 10**4000": ("cpu", 10**4000),
    "gpu -5": ("nvidia.com/gpu", "-5"),
    "cpu 9Ei": ("cpu", "9Ei"),
}


def _pod(
    name: str,
    *,
    node: str | None,
    requests: dict | None = None,
    n_containers: int = 1,
    claims=(),
    namespace: str = NAMESPACE,
    user: str | None = None,
) -> dict:
    """A running pod of ``n_containers`` containers, each requesting ``requests``; ``user``: the
    username label and the annotations KubeSpawner writes."""
    containers = [
        builders.container(f"c{i}", image="x", requests=dict(requests or {}))
        for i in range(n_containers)
    ]
    owner: dict = {}
    if user:
        owner = {
            "labels": {"hub.jupyter.org/username": user},
            "annotations": {"hub.jupyter.org/username": user, "hub.jupyter.org/servername": ""},
        }
    return builders.pod(
        name,
        namespace=namespace,
        node_name=node,
        phase="Running",
        containers=containers,
        claims=claims,
        **owner,
    )


def _base_objects() -> list[dict]:
    node = {
        "kind": "Node",
        "metadata": {"name": "cpu-1", "labels": {"kubernetes.io/hostname": "cpu-1"}},
        "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}},
    }
    claim = {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "claim-alice", "namespace": NAMESPACE},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-alice"},
    }
    holder = _pod(
        "jupyter-alice--app",
        node="cpu-1",
        claims=["claim-alice"],
        user="alice",
        requests={"cpu": "1", "memory": "1Gi"},
    )
    return [node, claim, holder]


def _new_pod(requests: dict | None = None) -> dict:
    return _pod(
        "jupyter-alice",
        node=None,
        claims=["claim-alice"],
        user="alice",
        requests=requests or {"cpu": "500m", "memory": "512Mi"},
    )


def spawn_check(objects: list[dict], pod: dict) -> None:
    """The pure work of one spawn check, as the spawner does it with the pods in hand (an error
    is where the spawner takes the safe side)."""
    state = ClusterState.from_objects(objects, namespace=NAMESPACE)
    try:
        decision = decide(pod, state, Policy())
    except ValueError:
        return
    if decision.verdict != REFUSE:
        apply_decision(pod, decision, "nebari.dev/colocate-user", "alice")
    messages.user_message(decision, pod, username="alice", server_name="")
    messages.user_html(decision, pod, username="alice", server_name="")
    messages.operator_line(decision, username="alice", server_name="")


def _timed(fn, repeat: int) -> float:
    worst = 0.0
    for _ in range(repeat):
        quantity._parse_text.cache_clear()
        started = time.perf_counter()
        fn()
        worst = max(worst, time.perf_counter() - started)
    return worst * 1000


def hub_cases() -> dict:
    cases = {}
    for label, (resource_name, value) in HOSTILE_QUANTITIES.items():
        other = _pod(
            "other-ns-pod", node="cpu-1", namespace="elsewhere", requests={resource_name: value}
        )
        objects = [*_base_objects(), other]
        cases[f"{label} on the pinned node"] = (objects, _new_pod())
        cases[f"{label} in the user's manifest"] = (
            _base_objects(),
            _new_pod({resource_name: value}),
        )
    return cases


def volume_cases() -> dict:
    """Big objects, hostile and ordinary side by side: the cost is the volume, not the values."""
    cases = {}
    for label, amount in (("huge", "1e999999"), ("ordinary", "100m")):
        # The API's limit on an object is 1.5 MB: as many containers as fit, each with requests.
        wide = _pod(
            "wide",
            node="cpu-1",
            namespace="elsewhere",
            n_containers=12_000,
            requests={"cpu": amount, "memory": amount, "example.com/x": "1"},
        )
        cases[f"1.5 MB pod of 12,000 containers, {label} quantities"] = (
            [*_base_objects(), wide],
            _new_pod(),
        )
        crowd = [
            _pod(f"p{i}", node="cpu-1", namespace=f"ns{i % 50}", requests={"memory": amount})
            for i in range(5000)
        ]
        cases[f"5,000 pods on the pinned node, {label} quantities"] = (
            [*_base_objects(), *crowd],
            _new_pod(),
        )
    return cases


def event_cases() -> dict:
    now = datetime.now(timezone.utc)
    stamp = now.isoformat().replace("+00:00", "Z")

    def event(reason: str, message: str, kind: str = "Warning") -> dict:
        return {
            "metadata": {"uid": reason},
            "type": kind,
            "reason": reason,
            "message": message,
            "lastTimestamp": stamp,
            "involvedObject": {"name": "jupyter-alice"},
        }

    return {
        "FailedScheduling of 1 MB": [
            event(
                "FailedScheduling",
                "0/3 nodes are available: " + ", ".join(["1 Insufficient cpu"] * 50_000) + ".",
            )
        ],
        "FailedScheduling of 1 MB of digits": [
            event("FailedScheduling", "0/" + "9" * 1_000_000 + " nodes")
        ],
        "FailedAttachVolume of 1 MB": [
            event(
                "FailedAttachVolume",
                'Multi-Attach error for volume "'
                + "v" * 1_000_000
                + '" Volume is already used by pod(s) '
                + "p, " * 100_000,
            )
        ],
        "image event of 1 MB": [
            event("Failed", 'Failed to pull image "' + "i" * 1_000_000 + '": x')
        ],
    }


# --------------------------------------------------------------------------------------------------
# readers


def reader_cases(folder: Path) -> dict:
    good_pod = _new_pod()
    pod_file = folder / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(good_pod))
    state_file = folder / "state.yaml"
    state_file.write_text(yaml.safe_dump_all(_base_objects()))
    bomb = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] + [
        f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)
    ]

    def text(name: str, data) -> Path:
        path = folder / name
        (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
        return path

    def state_with(**fields) -> Path:
        objects = _base_objects()
        objects[2]["spec"]["containers"][0]["resources"]["requests"].update(fields)
        return text(f"holder-{'-'.join(fields)}.yaml", yaml.safe_dump_all(objects))

    return {
        "binary file": (text("binary.yaml", os.urandom(4096) + b"\0"), pod_file),
        "latin-1 file": (text("latin1.yaml", "kind: Pod # caf\xe9\n".encode("latin-1")), pod_file),
        "alias bomb (10^9 nodes)": (state_file, text("bomb.yaml", "kind: Pod\n" + "\n".join(bomb))),
        "recursive alias": (text("recursive.yaml", "kind: List\nitems: &a [*a]\n"), pod_file),
        "100,000-deep nesting": (text("deep.json", "[" * 100_000 + "]" * 100_000), pod_file),
        "200,000-digit integer": (
            state_file,
            text(
                "int.yaml",
                yaml.safe_dump(good_pod).replace(
                    "containers:", "overhead:\n    cpu: " + "9" * 200_000 + "\n  containers:"
                ),
            ),
        ),
        "memory 1e999999 in a holder": (state_with(memory="1e999999"), pod_file),
        "cpu 1e999999999 in a holder": (state_with(cpu="1e999999999"), pod_file),
        "metadata a string": (
            text("meta.yaml", yaml.safe_dump({**_base_objects()[2], "metadata": "x"})),
            pod_file,
        ),
    }


def run_reader(state_file: Path, pod_file: Path) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(["simulate", str(state_file), "--pod", str(pod_file), "--json"])
    return status, err.getvalue().strip()


# --------------------------------------------------------------------------------------------------
# a big dump


def kubectl_pod(i: int) -> dict:
    """A pod as ``kubectl get pods -o yaml`` prints it (managedFields, status and all): ~3 KB."""
    user = f"user{i // 3}"
    name = f"jupyter-{user}" + (f"--app{i % 3}" if i % 3 else "")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE if i % 4 else f"team-{i % 40}",
            "uid": f"{i:08d}-0000-4000-8000-000000000000",
            "resourceVersion": str(100000 + i),
            "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {
                "app": "jupyterhub",
                "component": "singleuser-server",
                "hub.jupyter.org/username": user,
                "hub.jupyter.org/servername": f"app{i % 3}" if i % 3 else "",
                "nebari.dev/colocate-user": user,
            },
            "annotations": {
                "hub.jupyter.org/username": user,
                "hub.jupyter.org/servername": f"app{i % 3}" if i % 3 else "",
            },
            "managedFields": [
                {
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "manager": "jupyterhub",
                    "operation": "Update",
                    "time": "2026-11-30T10:00:00Z",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:labels": {f"f:{k}": {} for k in ("app", "component", "heritage")}
                        },
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"notebook"}': {
                                    ".": {},
                                    "f:image": {},
                                    "f:name": {},
                                    "f:resources": {},
                                }
                            }
                        },
                    },
                },
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "notebook",
                    "image": "quay.io/nebari/nebari-jupyterlab:2026.11.1",
                    "args": ["jupyterhub-singleuser", "--ip=0.0.0.0", "--port=8888"],
                    "env": [
                        {"name": f"JUPYTERHUB_VAR_{k}", "value": f"value-{k}-{i}"}
                        for k in range(12)
                    ],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "1Gi"},
                        "limits": {"cpu": "2", "memory": "4Gi"},
                    },
                    "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
                    "ports": [{"containerPort": 8888, "name": "notebook-port", "protocol": "TCP"}],
                }
            ],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": f"claim-{user}"}}],
            "nodeName": f"node-{i % 200}",
            "nodeSelector": {"node-type": "cpu"},
            "tolerations": [
                {
                    "key": "hub.jupyter.org/dedicated",
                    "operator": "Equal",
                    "value": "user",
                    "effect": "NoSchedule",
                }
            ],
            "restartPolicy": "OnFailure",
        },
        "status": {
            "phase": "Running",
            "podIP": f"127.1.{i // 250 % 250}.{i % 250}",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-11-30T10:00:05Z"}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                {
                    "name": "notebook",
                    "ready": True,
                    "restartCount": 0,
                    "image": "quay.io/nebari/nebari-jupyterlab:2026.11.1",
                    "imageID": "quay.io/nebari/nebari-jupyterlab@sha256:" + "ab" * 32,
                    "state": {"running": {"startedAt": "2026-11-30T10:00:04Z"}},
                }
            ],
        },
    }


def big_dump(folder: Path, pods: int) -> tuple[Path, Path, int]:
    items: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{n}", "labels": {"node-type": "cpu"}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250"}},
        }
        for n in range(200)
    ]
    items += [kubectl_pod(i) for i in range(pods)]
    items += [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"claim-user{u}", "namespace": NAMESPACE},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": f"pv-user{u}"},
        }
        for u in range(pods // 3 + 1)
    ]
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    path = folder / "dump.yaml"
    with open(path, "w") as f:
        yaml.dump(
            {"apiVersion": "v1", "kind": "List", "items": items}, f, Dumper=dumper, sort_keys=False
        )
    pod = kubectl_pod(3)  # user1's default server: its app pods hold the claim
    pod.pop("status")
    pod["spec"].pop("nodeName")
    pod_file = folder / "big-pod.yaml"
    pod_file.write_text(yaml.safe_dump(pod))
    return path, pod_file, path.stat().st_size


def simulate_child(state_file: Path, pod_file: Path, fast: bool = True) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB, stdout) of ``simulate`` in its own process; ``fast=False``
    hides rapidyaml, so PyYAML's C loader reads the dump."""
    hide = "" if fast else "sys.modules['ryml'] = None; "
    code = (
        f"import sys; {hide}from nebari_colocate import cli; "
        "status = cli.main(sys.argv[1:]); "
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent
        # (this benchmark, which holds the dump's objects) across exec.
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]; "
        "print(hwm, file=sys.stderr); "
        "sys.exit(status)"
    )
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", code, "simulate", str(state_file), "--pod", str(pod_file), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"simulate on the big dump failed: {result.stderr.strip()}")
    peak_kb = int(result.stderr.strip().splitlines()[-1])
    return elapsed, peak_kb / 1024, result.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=20_000, help="pods in the big dump")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (the worst counts)")
    args = parser.parse_args()

    results: list[tuple[float, str]] = []
    print("== the hub's pure core (one spawn check, worst of --repeat runs)")
    for label, (objects, pod) in hub_cases().items():
        ms = _timed(lambda o=objects, p=pod: spawn_check(o, p), args.repeat)
        results.append((ms, label))
        print(f"  {ms:9.3f} ms  {label}")
    worst_ms, worst_label = max(results)
    print("== big objects (the cost follows the bytes, hostile or not)")
    for label, (objects, pod) in volume_cases().items():
        ms = _timed(lambda o=objects, p=pod: spawn_check(o, p), args.repeat)
        print(f"  {ms:9.3f} ms  {label}")
    print("== the event classifier (events.py) on megabyte event messages")
    now = datetime.now(timezone.utc)
    for label, evs in event_cases().items():
        ms = _timed(lambda e=evs: events.classify(e, pinned_node="cpu-1", now=now), args.repeat)
        print(f"  {ms:9.3f} ms  {label}")

    print("== readers of user-supplied files (simulate: time to its one-line error)")
    reader_worst = (0.0, "")
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        folder = Path(tmp)
        for label, (state_file, pod_file) in reader_cases(folder).items():
            started = time.perf_counter()
            status, err = run_reader(state_file, pod_file)
            ms = (time.perf_counter() - started) * 1000
            reader_worst = max(reader_worst, (ms, label))
            shown = err if len(err) < 150 else err[:147] + "..."
            print(f"  {ms:9.3f} ms  exit {status}  {label}: {shown}")
            if status != 2 or "\n" in err:
                raise SystemExit(f"{label}: expected exit 2 and one line, got {status}: {err!r}")

        print(f"== a {args.pods}-pod dump")
        built = time.perf_counter()
        dump, big_pod, size = big_dump(folder, args.pods)
        print(f"  written in {time.perf_counter() - built:.1f} s: {dump.name} {size / 1e6:.1f} MB")
        try:
            import ryml  # noqa: F401

            readers = [("rapidyaml", True), ("PyYAML's C loader", False)]
        except ImportError:
            readers = [("PyYAML's C loader", False)]
        figures = []
        for name, fast in readers:
            seconds, peak_mb, out = simulate_child(dump, big_pod, fast)
            figures.append((name, seconds, peak_mb))
            verdict = json.loads(out)
            print(
                f"  simulate through {name}: {seconds:.1f} s, peak RSS {peak_mb:.0f} MB, verdict "
                f"{verdict['verdict']} node {verdict['node']} holders {len(verdict['holders'])}"
            )
        name, seconds, peak_mb = figures[0]
    print(
        f"hostile inputs: worst={worst_ms:.2f} ms ({worst_label}) in the hub's pure core over "
        f"{len(results)} hostile values; readers worst={reader_worst[0]:.0f} ms "
        f"({reader_worst[1]}); {args.pods}-pod dump ({size / 1e6:.0f} MB, {name}): "
        f"{seconds:.1f} s, {peak_mb:.0f} MB peak"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
