"""The command line (docs/cli.md): ``nebari-colocate simulate`` on the example scenarios and on bad
and hostile files, ``explain`` and ``audit`` before they reach a cluster (kubeconfig, exit 2 with
one line), the installed command.  CLI tests that need a cluster are in
tests/cluster/test_explain_audit.py and tests/cluster/test_migrate.py."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nebari_colocate import cli, dumps, kubeapi, messages, validate
from tests.support.builders import node, pod, pvc, running

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
ENTRY_POINT = Path(sys.executable).with_name("nebari-colocate")
CONTRACT_FIELDS = {"verdict", "node", "reasons", "warnings", "holders", "message"}


def scenario_args(name: str, *extra: str) -> list[str]:
    folder = SCENARIOS / name
    return ["simulate", str(folder / "state.yaml"), "--pod", str(folder / "pod.yaml"), *extra]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """main(argv) -> (exit status, stdout, stderr); argparse errors exit through SystemExit."""
    try:
        status = cli.main(argv)
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def simulate_json(argv: list[str], capsys) -> dict:
    status, out, err = run([*argv, "--json"], capsys)
    assert (status, err) == (0, "")
    return json.loads(out)


def write_yaml(path: Path, *documents) -> Path:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


# --------------------------------------------------------------------------------------------------
# the example scenarios


@pytest.mark.parametrize(
    "test_variation_id, scenario, extra_args, expect",
    [
        (
            "gpu-lab-blocked",
            "gpu-lab-blocked",
            [],
            {
                "verdict": "refuse",
                "node": "cpu-1",
                "reasons": ["insufficient:nvidia.com/gpu", "node-selector"],
                "warnings": [],
                "holders": ["jupyter-alice--pandas-app"],
            },
        ),
        (
            "capacity-cap",
            "capacity-cap",
            [],
            {
                "verdict": "refuse",
                "node": "cpu-1",
                "reasons": ["insufficient:cpu"],
                "warnings": [],
                "holders": ["jupyter-alice"],
            },
        ),
        (
            "gpu-node-kept-alive-warns",
            "gpu-node-kept-alive",
            [],
            {
                "verdict": "colocate",
                "node": "gpu-1",
                "reasons": [],
                "warnings": ["premium-node"],
                "holders": ["jupyter-alice"],
            },
        ),
        (
            "gpu-node-kept-alive-refused-by-policy",
            "gpu-node-kept-alive",
            ["--premium-node-policy", "refuse"],
            {
                "verdict": "refuse",
                "node": "gpu-1",
                "reasons": ["premium-node"],
                "warnings": [],
                "holders": ["jupyter-alice"],
            },
        ),
        (
            "gpu-node-kept-alive-allowed-by-policy",
            "gpu-node-kept-alive",
            ["--premium-node-policy", "ALLOW"],
            {
                "verdict": "colocate",
                "node": "gpu-1",
                "reasons": [],
                "warnings": [],
                "holders": ["jupyter-alice"],
            },
        ),
        (
            # z2jh's user placeholder (priority -10) makes room: the scheduler preempts it.
            "placeholder-preempted",
            "placeholder-preempted",
            [],
            {
                "verdict": "colocate",
                "node": "cpu-1",
                "reasons": [],
                "warnings": ["preempts:1"],
                "holders": ["jupyter-alice"],
            },
        ),
        (
            "rwx-home",
            "rwx-home",
            [],
            {"verdict": "skip", "node": None, "reasons": [], "warnings": [], "holders": []},
        ),
        (
            # A hub without Node access cannot see that cpu-1 is a CPU node: the holder's spec
            # proves no label, so it colocates, unverified.
            "gpu-lab-blocked-without-node-access",
            "gpu-lab-blocked",
            ["--no-node-access"],
            {
                "verdict": "colocate",
                "node": "cpu-1",
                "reasons": [],
                "warnings": [],
                "holders": ["jupyter-alice--pandas-app"],
            },
        ),
        (
            # The lab's own spec (requests a GPU) proves gpu-1 is a premium node.
            "gpu-node-kept-alive-without-node-access",
            "gpu-node-kept-alive",
            ["--no-node-access"],
            {
                "verdict": "colocate",
                "node": "gpu-1",
                "reasons": [],
                "warnings": ["premium-node"],
                "holders": ["jupyter-alice"],
            },
        ),
    ],
)
def test_simulate_decides_the_example_scenarios(
    test_variation_id, scenario, extra_args, expect, capsys
):
    result = simulate_json(scenario_args(scenario, *extra_args), capsys)
    assert set(result) >= CONTRACT_FIELDS
    assert {k: result[k] for k in expect} == expect
    assert (result["message"] != "") is (expect["verdict"] == "refuse")


def _without_priority_classes(tmp_path: Path) -> Path:
    state = yaml.safe_load((SCENARIOS / "placeholder-preempted" / "state.yaml").read_text())
    state["items"] = [o for o in state["items"] if o["kind"] != "PriorityClass"]
    return write_yaml(tmp_path / "state.yaml", state)


def test_a_dump_without_the_priority_class_the_pod_names_says_so(tmp_path, capsys):
    state = _without_priority_classes(tmp_path)
    pod = SCENARIOS / "placeholder-preempted" / "pod.yaml"
    status, out, err = run(["simulate", str(state), "--pod", str(pod), "--json"], capsys)
    result = json.loads(out)
    assert status == 0
    assert len(result["input_warnings"]) == 1
    assert "PriorityClass 'jhub-default-priority'" in result["input_warnings"][0]
    assert "judged at priority 0" in err
    # the pods of the dump carry their admitted priority: the placeholder is still preempted
    assert (result["verdict"], result["warnings"]) == ("colocate", ["preempts:1"])


def test_the_pod_priority_class_from_the_dump_decides_against_a_higher_placeholder(
    tmp_path, capsys
):
    state = yaml.safe_load((SCENARIOS / "placeholder-preempted" / "state.yaml").read_text())
    for obj in state["items"]:
        if obj["kind"] == "PriorityClass" and obj["metadata"]["name"] == "jhub-default-priority":
            obj["value"] = -20  # now below the placeholder's -10: nothing to preempt
    path = write_yaml(tmp_path / "state.yaml", state)
    pod = SCENARIOS / "placeholder-preempted" / "pod.yaml"
    result = simulate_json(["simulate", str(path), "--pod", str(pod)], capsys)
    assert (result["verdict"], result["reasons"], result["preemption"]) == (
        "refuse",
        ["insufficient:cpu"],
        None,
    )


@pytest.mark.parametrize(
    "test_variation_id, extra_args, expect_verified",
    [
        ("with-node-access", [], True),
        ("without-node-access", ["--no-node-access"], False),
    ],
)
def test_no_node_access_marks_the_decision_unverified(
    test_variation_id, extra_args, expect_verified, capsys
):
    result = simulate_json(scenario_args("gpu-node-kept-alive", *extra_args), capsys)
    assert result["verified"] is expect_verified


def test_refusal_message_in_json_is_the_user_text(capsys):
    result = simulate_json(scenario_args("gpu-lab-blocked"), capsys)
    assert result["message"].startswith("Your default server cannot start")
    assert "needs a GPU node (nvidia.com/gpu); node cpu-1" in result["message"]
    assert "bob" not in result["message"]


@pytest.mark.parametrize(
    "test_variation_id, storage_access_mode, expect_verdict",
    [
        ("missing-claim-as-rwo", "ReadWriteOnce", "colocate"),
        ("missing-claim-as-rwx", "readwritemany", "skip"),
    ],
)
def test_storage_access_mode_judges_claims_missing_from_the_dump(
    test_variation_id, storage_access_mode, expect_verdict, tmp_path, capsys
):
    state_file = write_yaml(tmp_path / "state.yaml", node("cpu-1"))
    pod_file = write_yaml(tmp_path / "pod.yaml", pod("jupyter-alice", claims=["claim-alice"]))
    argv = ["simulate", str(state_file), "--pod", str(pod_file)]
    result = simulate_json([*argv, "--storage-access-mode", storage_access_mode], capsys)
    assert result["verdict"] == expect_verdict


SHARE = "jupyterhub-jhub-share"  # Nebari's one claim for every user's home


@pytest.mark.parametrize(
    "test_variation_id, pod_namespace, objects, expect",
    [
        (
            "shared-claim-found-in-the-dumps-one-namespace",
            None,
            [
                pvc(SHARE, namespace="jhub", modes=["ReadWriteMany"]),
                running("jupyter-bob", "cpu-1", namespace="jhub", claims=[SHARE], user="bob"),
            ],
            {"verdict": "skip", "namespace": "jhub", "namespace_from": "dump", "warnings": []},
        ),
        (
            "exclusive-claim-found-in-the-dumps-one-namespace-pins",
            None,
            [
                pvc(SHARE, namespace="jhub"),
                running("jupyter-alice", "cpu-1", namespace="jhub", claims=[SHARE]),
                running("coredns", "cpu-2", namespace="kube-system"),
            ],
            {"verdict": "colocate", "node": "cpu-1", "namespace": "jhub", "warnings": []},
        ),
        (
            "claim-in-two-namespaces-assumes-default-and-warns",
            None,
            [pvc(SHARE, namespace="jhub"), pvc(SHARE, namespace="prod")],
            {
                "verdict": "colocate",
                "namespace": "default",
                "namespace_from": "assumed",
                "warnings": ["claim-not-found", "namespace-assumed"],
            },
        ),
        (
            "nothing-namespaced-in-the-dump-assumes-default-and-warns",
            None,
            [],
            {
                "namespace": "default",
                "namespace_from": "assumed",
                "warnings": ["claim-not-found", "namespace-assumed"],
            },
        ),
        (
            "the-manifests-own-namespace-wins",
            "dev",
            [pvc(SHARE, namespace="jhub", modes=["ReadWriteMany"])],
            {"verdict": "colocate", "namespace": "dev", "namespace_from": "pod", "warnings": []},
        ),
    ],
)
def test_a_manifest_without_namespace_is_judged_where_the_dump_has_its_claims(
    test_variation_id, pod_namespace, objects, expect, tmp_path, capsys
):
    # KubeSpawner's manifest has no metadata.namespace: judged in `default`, every claim would
    # be missing, judged exclusive, and the answer `colocate` with no word of it.
    state_file = write_yaml(tmp_path / "state.yaml", node("cpu-1"), node("cpu-2"), *objects)
    manifest = pod("jupyter-alice--new", namespace=pod_namespace, claims=[SHARE], user="alice")
    pod_file = write_yaml(tmp_path / "pod.yaml", manifest)
    result = simulate_json(["simulate", str(state_file), "--pod", str(pod_file)], capsys)
    assert {k: result[k] for k in expect} == expect


@pytest.mark.parametrize(
    "test_variation_id, objects, expect_lines",
    [
        (
            "taken-from-the-dump",
            [pvc(SHARE, namespace="jhub", modes=["ReadWriteMany"])],
            ["namespace: jhub (the pod manifest names none; taken from the dump)"],
        ),
        (
            "assumed",
            [pvc(SHARE, namespace="jhub"), pvc(SHARE, namespace="prod")],
            [
                "warning: namespace-assumed: the pod manifest names no namespace and the dump "
                "does not tell one; judged in namespace default (set metadata.namespace)",
                f"warning: claim-not-found: {SHARE} not in the dump in namespace default; "
                "judged as ReadWriteOnce (--storage-access-mode)",
            ],
        ),
    ],
)
def test_text_output_says_which_namespace_a_manifest_without_one_was_judged_in(
    test_variation_id, objects, expect_lines, tmp_path, capsys
):
    state_file = write_yaml(tmp_path / "state.yaml", node("cpu-1"), *objects)
    manifest = pod("jupyter-alice--new", namespace=None, claims=[SHARE], user="alice")
    pod_file = write_yaml(tmp_path / "pod.yaml", manifest)
    status, out, err = run(["simulate", str(state_file), "--pod", str(pod_file)], capsys)
    assert (status, err) == (0, "")
    for line in expect_lines:
        assert line in out.splitlines()
    assert out.splitlines()[-1].startswith("colocate verdict=")


def test_reasons_and_holders_are_sorted(tmp_path, capsys):
    holders = [
        pod(name, claims=["claim-alice"], node_name="cpu-1", phase="Running")
        for name in ("zeta-app", "alpha-app", "mid-app")
    ]
    cordoned = node("cpu-1", unschedulable=True, labels={"type": "cpu"})
    state_file = write_yaml(tmp_path / "state.yaml", cordoned, pvc("claim-alice"), *holders)
    new = pod(
        "jupyter-alice",
        claims=["claim-alice"],
        limits={"nvidia.com/gpu": "1"},
        node_selector={"type": "gpu"},
    )
    pod_file = write_yaml(tmp_path / "pod.yaml", new)
    result = simulate_json(["simulate", str(state_file), "--pod", str(pod_file)], capsys)
    assert result["reasons"] == [
        "insufficient:nvidia.com/gpu",
        "node-selector",
        "node-unschedulable",
    ]
    assert result["holders"] == ["alpha-app", "mid-app", "zeta-app"]


def test_json_output_is_exactly_one_object(capsys):
    status, out, _ = run([*scenario_args("capacity-cap"), "--json"], capsys)
    assert status == 0
    assert out.count("\n") == 1
    assert isinstance(json.loads(out), dict)


@pytest.mark.parametrize(
    "test_variation_id, scenario, expect_lines",
    [
        (
            "refusal-prints-the-message-and-the-operator-line",
            "capacity-cap",
            ["Your server 'big-app' cannot start", "colocate verdict=refuse"],
        ),
        (
            "warning-is-printed",
            "gpu-node-kept-alive",
            ["node gpu-1", "warning: premium-node", "colocate verdict=colocate"],
        ),
        ("skip-says-any-node", "rwx-home", ["any node", "colocate verdict=skip"]),
    ],
)
def test_text_output_has_the_message_and_the_operator_line(
    test_variation_id, scenario, expect_lines, capsys
):
    status, out, err = run(scenario_args(scenario), capsys)
    assert (status, err) == (0, "")
    lines = out.splitlines()
    for expected in expect_lines:
        assert any(expected in line for line in lines), (expected, out)
    assert lines[-1].startswith("colocate verdict=")


# --------------------------------------------------------------------------------------------------
# bad input: exit 2, one line on stderr naming the file


def _valid_state(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "state.yaml", node("cpu-1"), pvc("claim-alice"))


def _valid_pod(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "pod.yaml", pod("jupyter-alice", claims=["claim-alice"]))


def _missing_state(tmp_path):
    return tmp_path / "absent.yaml", _valid_pod(tmp_path), [], "absent.yaml"


def _missing_pod(tmp_path):
    return _valid_state(tmp_path), tmp_path / "no-pod.yaml", [], "no-pod.yaml"


def _invalid_yaml_state(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("items: [unclosed\n  - kind: Node\n")
    return broken, _valid_pod(tmp_path), [], "broken.yaml"


def _scalar_pod(tmp_path):
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string\n")
    return _valid_state(tmp_path), scalar, [], "scalar.yaml"


def _two_pods(tmp_path):
    pods = write_yaml(tmp_path / "two.yaml", pod("a"), pod("b"))
    return _valid_state(tmp_path), pods, [], "two.yaml"


def _no_pod(tmp_path):
    empty = write_yaml(tmp_path / "nodes-only.yaml", node("cpu-1"))
    return _valid_state(tmp_path), empty, [], "nodes-only.yaml"


def _invalid_access_mode(tmp_path):
    args = ["--storage-access-mode", "ReadWriteSometimes"]
    return _valid_state(tmp_path), _valid_pod(tmp_path), args, "ReadWriteSometimes"


def _invalid_premium_policy(tmp_path):
    args = ["--premium-node-policy", "maybe"]
    return _valid_state(tmp_path), _valid_pod(tmp_path), args, "maybe"


def _invalid_quantity_when_pinned(tmp_path):
    holder = pod("jupyter-alice--app", claims=["claim-alice"], node_name="cpu-1", phase="Running")
    state_file = write_yaml(tmp_path / "state.yaml", node("cpu-1"), pvc("claim-alice"), holder)
    bad = write_yaml(
        tmp_path / "bad-pod.yaml",
        pod("jupyter-alice", claims=["claim-alice"], requests={"cpu": "lots"}),
    )
    return state_file, bad, [], "bad-pod.yaml"


def _invalid_quantity_when_skipped(tmp_path):
    # The verdict needs no fit check here; the pod is still invalid input.
    state_file = write_yaml(tmp_path / "state.yaml", pvc("claim-alice", modes=["ReadWriteMany"]))
    bad = write_yaml(
        tmp_path / "bad-pod.yaml",
        pod("jupyter-alice", claims=["claim-alice"], limits={"memory": "4GB"}),
    )
    return state_file, bad, [], "bad-pod.yaml"


@pytest.mark.parametrize(
    "test_variation_id, make_input",
    [
        ("missing-state-file", _missing_state),
        ("missing-pod-file", _missing_pod),
        ("invalid-yaml", _invalid_yaml_state),
        ("pod-file-not-a-mapping", _scalar_pod),
        ("pod-file-with-two-pods", _two_pods),
        ("pod-file-without-a-pod", _no_pod),
        ("invalid-storage-access-mode", _invalid_access_mode),
        ("invalid-premium-node-policy", _invalid_premium_policy),
        ("invalid-quantity-in-pod-pinned", _invalid_quantity_when_pinned),
        ("invalid-quantity-in-pod-skipped", _invalid_quantity_when_skipped),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_problem(
    test_variation_id, make_input, tmp_path, capsys
):
    state_file, pod_file, extra, expect_named = make_input(tmp_path)
    argv = ["simulate", str(state_file), "--pod", str(pod_file), *extra, "--json"]
    status, out, err = run(argv, capsys)
    assert status == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert expect_named in err


# --------------------------------------------------------------------------------------------------
# hostile files (docs/cli.md, "What is refused as input"): exit 2, one line naming the file and
# the problem, never a traceback or a hang


def _good_pod() -> dict:
    return pod("jupyter-alice", claims=["claim-alice"], user="alice")


def _good_state() -> list[dict]:
    holder = running("jupyter-alice--app", "cpu-1", claims=["claim-alice"], user="alice")
    return [node("cpu-1"), pvc("claim-alice"), holder]


def _files(tmp_path: Path, *, state_docs=None, pod_docs=None, state_text=None, pod_text=None):
    state_file, pod_file = tmp_path / "state.yaml", tmp_path / "pod.yaml"
    if state_text is not None:
        (state_file.write_bytes if isinstance(state_text, bytes) else state_file.write_text)(
            state_text
        )
    else:
        write_yaml(state_file, *(state_docs if state_docs is not None else _good_state()))
    if pod_text is not None:
        (pod_file.write_bytes if isinstance(pod_text, bytes) else pod_file.write_text)(pod_text)
    else:
        write_yaml(pod_file, *(pod_docs if pod_docs is not None else [_good_pod()]))
    return state_file, pod_file


def _alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "kind: Pod\n" + "\n".join(lines) + "\n"


def _with(obj: dict, path: str, value) -> dict:
    """A deep copy of ``obj`` with the dotted ``path`` set (``[0]`` indexes a list)."""
    obj = copy.deepcopy(obj)
    target = obj
    parts = [p for p in path.replace("[", ".[").split(".") if p]
    for part in parts[:-1]:
        target = target[int(part[1:-1])] if part.startswith("[") else target.setdefault(part, {})
    last = parts[-1]
    if last.startswith("["):
        target[int(last[1:-1])] = value
    else:
        target[last] = value
    return obj


def _pod_case(path: str, value):
    return lambda tmp_path: _files(tmp_path, pod_docs=[_with(_good_pod(), path, value)])


def _state_case(index: int, path: str, value):
    def make(tmp_path):
        docs = _good_state()
        docs[index] = _with(docs[index], path, value)
        return _files(tmp_path, state_docs=docs)

    return make


HOSTILE = [
    # (id, make files, the file named, words of the problem)
    (
        "binary-state",
        lambda p: _files(p, state_text=b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
        "state.yaml",
        "binary file",
    ),
    (
        "latin1-pod",
        lambda p: _files(p, pod_text="kind: Pod\nmetadata: {name: caf\xe9}\n".encode("latin-1")),
        "pod.yaml",
        "not UTF-8",
    ),
    (
        "cpu-exponent-overflow",
        _pod_case("spec.containers.[0].resources", {"requests": {"cpu": "1e999999999"}}),
        "pod.yaml",
        "beyond what Kubernetes can count",
    ),
    (
        "memory-huge-exponent-in-pod",
        _pod_case("spec.containers.[0].resources", {"limits": {"memory": "1e999999"}}),
        "pod.yaml",
        "beyond what Kubernetes can count",
    ),
    (
        "memory-huge-exponent-in-a-holder",
        _state_case(2, "spec.containers.[0].resources", {"requests": {"memory": "1e999999"}}),
        "state.yaml",
        "beyond what Kubernetes can count",
    ),
    (
        "metadata-is-a-string-in-state",
        _state_case(2, "metadata", "jupyter-alice--app"),
        "state.yaml",
        "metadata: must be a mapping",
    ),
    (
        "metadata-is-a-string-in-pod",
        _pod_case("metadata", "jupyter-alice"),
        "pod.yaml",
        "metadata: must be a mapping",
    ),
    ("alias-bomb", lambda p: _files(p, pod_text=_alias_bomb()), "pod.yaml", "alias bomb"),
    (
        "recursive-alias",
        lambda p: _files(p, state_text="kind: List\nitems: &a [*a]\n"),
        "state.yaml",
        "recursive",
    ),
    (
        "deeply-nested-json",
        lambda p: _files(p, state_text="[" * 100_000 + "]" * 100_000),
        "state.yaml",
        "nested too deeply",
    ),
    (
        "huge-integer-literal",
        lambda p: _files(
            p,
            pod_text=yaml.safe_dump(_good_pod()).replace(
                "containers:", "overhead:\n    cpu: " + "9" * 200_000 + "\n  containers:"
            ),
        ),
        "pod.yaml",
        "beyond what Kubernetes can count",
    ),
    ("no-containers", _pod_case("spec.containers", []), "pod.yaml", "at least one container"),
    ("containers-missing", _pod_case("spec", {"volumes": []}), "pod.yaml", "spec.containers"),
    (
        "negative-cpu",
        _pod_case("spec.containers.[0].resources", {"requests": {"cpu": "-1"}}),
        "pod.yaml",
        "negative",
    ),
    (
        "negative-gpu",
        _pod_case("spec.containers.[0].resources", {"limits": {"nvidia.com/gpu": "-5"}}),
        "pod.yaml",
        "negative",
    ),
    (
        "fractional-gpu",
        _pod_case("spec.containers.[0].resources", {"limits": {"nvidia.com/gpu": "0.5"}}),
        "pod.yaml",
        "whole number",
    ),
    (
        "request-above-limit",
        _pod_case(
            "spec.containers.[0].resources",
            {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
        ),
        "pod.yaml",
        "its limit",
    ),
    (
        "integer-node-selector-value",
        _pod_case("spec.nodeSelector", {"gpu": 1}),
        "pod.yaml",
        "spec.nodeSelector.gpu: must be a string",
    ),
    (
        "integer-label-value",
        _state_case(0, "metadata.labels", {"zone": 3}),
        "state.yaml",
        "metadata.labels.zone: must be a string",
    ),
    (
        "access-modes-a-string",
        _state_case(1, "spec.accessModes", "ReadWriteOnce"),
        "state.yaml",
        "spec.accessModes: must be a list",
    ),
    (
        "unknown-access-mode",
        _state_case(1, "spec.accessModes", ["ReadWriteSometimes"]),
        "state.yaml",
        "is not one of",
    ),
    (
        "negative-allocatable",
        _state_case(0, "status.allocatable.cpu", "-4"),
        "state.yaml",
        "negative",
    ),
    (
        "unknown-selector-operator",
        _pod_case(
            "spec.affinity",
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "a", "operator": "Like", "values": ["b"]}
                                ]
                            }
                        ]
                    }
                }
            },
        ),
        "pod.yaml",
        "operator",
    ),
    (
        "volumes-a-mapping",
        _pod_case("spec.volumes", {"home": "claim-alice"}),
        "pod.yaml",
        "spec.volumes: must be a list",
    ),
    (
        "container-without-name",
        _pod_case("spec.containers", [{"image": "x"}]),
        "pod.yaml",
        "spec.containers[0].name: is missing",
    ),
]


@pytest.mark.parametrize(
    "test_variation_id, make_files, named, problem", HOSTILE, ids=[h[0] for h in HOSTILE]
)
def test_hostile_input_exits_2_with_one_line_naming_the_file_and_the_problem(
    test_variation_id, make_files, named, problem, tmp_path, capsys
):
    state_file, pod_file = make_files(tmp_path)
    status, out, err = run(["simulate", str(state_file), "--pod", str(pod_file), "--json"], capsys)
    assert (status, out) == (2, ""), err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert named in err and problem in err, err


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(dumps, "MAX_FILE_BYTES", 1000)
    state_file, pod_file = _files(tmp_path, state_docs=_good_state() * 20)
    status, _, err = run(["simulate", str(state_file), "--pod", str(pod_file)], capsys)
    assert status == 2
    assert "state.yaml: larger than" in err and err.count("\n") == 1


def test_json_dumps_are_read_like_yaml(tmp_path, capsys):
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps({"kind": "List", "items": _good_state()}))
    _, pod_file = _files(tmp_path)
    status, out, err = run(["simulate", str(state_file), "--pod", str(pod_file), "--json"], capsys)
    assert (status, err) == (0, "")
    assert json.loads(out)["node"] == "cpu-1"


def test_kubectl_style_dumps_with_ignored_kinds_still_validate_what_decides(tmp_path, capsys):
    service = {"kind": "Service", "metadata": "not checked: simulate ignores Services"}
    state_file, pod_file = _files(tmp_path, state_docs=[*_good_state(), service])
    status, _, err = run(["simulate", str(state_file), "--pod", str(pod_file)], capsys)
    assert (status, err) == (0, "")


def test_cli_main_turns_every_reader_error_into_exit_2(tmp_path, capsys):
    # explain --pod reads the same way, before any cluster is asked
    bad = tmp_path / "pod.yaml"
    bad.write_bytes(b"\xff\xfe\x00k")
    status, _, err = run(
        ["explain", "alice", "--pod", str(bad), "--kubeconfig", "/nonexistent"], capsys
    )
    assert status == 2 and "pod.yaml: " in err and err.count("\n") == 1


# --------------------------------------------------------------------------------------------------
# explain and audit before they reach a cluster (docs/cli.md, "Connecting to the cluster")


def test_kubeconfig_option_wins_over_the_environment(monkeypatch):
    env = {"KUBECONFIG": "/from/env"}
    assert kubeapi.kubeconfig_paths("/from/option", env) == "/from/option"
    assert kubeapi.kubeconfig_paths(None, env) == "/from/env"
    assert kubeapi.kubeconfig_paths(None, {}).endswith("/.kube/config")


@pytest.mark.parametrize("command", [["explain", "alice"], ["audit"]])
def test_a_missing_kubeconfig_exits_2_with_one_line(command, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    status, out, err = run(command, capsys)
    assert (status, out) == (2, "")
    assert err == (
        f"nebari-colocate: no kubeconfig: {tmp_path / 'nowhere'} does not exist (pass "
        "--kubeconfig or set KUBECONFIG)\n"
    )


@pytest.mark.parametrize(
    "test_variation_id, content, extra, expect",
    [
        ("not YAML", "clusters: [", [], "cannot use it"),
        ("no contexts", "apiVersion: v1\nkind: Config\n", [], "cannot use it"),
        (
            "unknown context",
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                    "users": [{"name": "u", "user": {}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            ),
            ["--context", "nope"],
            "cannot use it",
        ),
    ],
)
def test_an_unusable_kubeconfig_exits_2_with_one_line(
    test_variation_id, content, extra, expect, capsys, tmp_path
):
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    status, out, err = run(["audit", "--kubeconfig", str(path), *extra], capsys)
    assert (status, out) == (2, "")
    assert err.startswith(f"nebari-colocate: kubeconfig {path}: {expect}")
    assert err.count("\n") == 1


def test_an_unreachable_api_server_exits_2_naming_it(capsys, tmp_path):
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = f"https://127.0.0.1:{port}"
    config = {
        "apiVersion": "v1",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    status, out, err = run(["audit", "--kubeconfig", str(path), "--timeout", "10"], capsys)
    assert (status, out) == (2, "")
    assert err.startswith(f"nebari-colocate: cannot reach the Kubernetes API at {server}")
    assert err.count("\n") == 1


def test_inside_a_pod_without_a_service_account_token_exits_2(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    monkeypatch.setattr(kubeapi, "SERVICE_ACCOUNT_DIR", tmp_path)
    status, out, err = run(["explain", "alice"], capsys)
    assert (status, out) == (2, "")
    assert "the pod's service account cannot be used" in err
    assert err.count("\n") == 1


def test_explain_rejects_a_bad_pod_file_before_it_looks_for_a_cluster(capsys, tmp_path):
    missing = tmp_path / "missing.yaml"
    argv = ["explain", "alice", "--pod", str(missing), "--kubeconfig", str(tmp_path / "nowhere")]
    status, out, err = run(argv, capsys)
    assert (status, out) == (2, "")
    assert err.startswith(f"nebari-colocate: {missing}: cannot read")


# --------------------------------------------------------------------------------------------------
# the installed command


def test_installed_command_prints_the_json_decision():
    completed = subprocess.run(
        [str(ENTRY_POINT), *scenario_args("gpu-lab-blocked"), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (completed.returncode, completed.stderr) == (0, "")
    result = json.loads(completed.stdout)
    assert (result["verdict"], result["node"]) == ("refuse", "cpu-1")
    assert result["reasons"] == ["insufficient:nvidia.com/gpu", "node-selector"]


def test_installed_command_exits_2_on_a_missing_file(tmp_path):
    argv = ["simulate", str(tmp_path / "absent.yaml"), "--pod", str(_valid_pod(tmp_path))]
    completed = subprocess.run(
        [str(ENTRY_POINT), *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 2
    assert completed.stdout == ""
    assert "absent.yaml" in completed.stderr and completed.stderr.count("\n") == 1


# --------------------------------------------------------------------------------------------------
# the rest of the dump counted as the scheduler counts it; admission's RuntimeClass overhead


def _other_namespace_pod(node_name: str, cpu: str = "10e399") -> dict:
    """A pod of another namespace, with a request kube-apiserver accepts and stores."""
    other = running("etl-7f9c", node_name, requests={"cpu": cpu})
    other["metadata"]["namespace"] = "data-pipelines"
    return other


@pytest.mark.parametrize(
    "test_variation_id, other_pod, expect",
    [
        (
            # the scheduler saturates it: the node is full of cpu, so the new pod does not fit
            "on-the-pinned-node-it-fills-the-node",
            _other_namespace_pod("cpu-1"),
            {"verdict": "refuse", "node": "cpu-1", "reasons": ["insufficient:cpu"]},
        ),
        (
            "on-another-node-it-changes-nothing",
            _other_namespace_pod("cpu-2"),
            {"verdict": "colocate", "node": "cpu-1", "reasons": []},
        ),
    ],
)
def test_a_quantity_beyond_int64_outside_the_decision_is_counted_saturated_with_a_warning(
    test_variation_id, other_pod, expect, tmp_path, capsys
):
    new_pod = pod("jupyter-alice", claims=["claim-alice"], user="alice", requests={"cpu": "1"})
    state_file, pod_file = _files(
        tmp_path, state_docs=[*_good_state(), node("cpu-2"), other_pod], pod_docs=[new_pod]
    )
    status, out, err = run(["simulate", str(state_file), "--pod", str(pod_file), "--json"], capsys)
    assert status == 0, err
    result = json.loads(out)
    assert {k: result[k] for k in expect} == expect
    (warning,) = result["input_warnings"]
    assert "data-pipelines/etl-7f9c" in warning and "10e399" in warning
    assert "counted as the scheduler counts it" in warning
    assert err == f"warning: {warning}\n"


def test_a_quantity_beyond_int64_in_a_claim_holder_is_still_refused(tmp_path, capsys):
    holder = running(
        "jupyter-alice--app", "cpu-1", claims=["claim-alice"], user="alice", requests={"cpu": "1"}
    )
    holder["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "10e399"
    state_file, pod_file = _files(tmp_path, state_docs=[node("cpu-1"), pvc("claim-alice"), holder])
    status, out, err = run(["simulate", str(state_file), "--pod", str(pod_file), "--json"], capsys)
    assert (status, out) == (2, "")
    assert "beyond what Kubernetes can count" in err and err.count("\n") == 1


def test_simulate_checks_each_object_of_the_dump_once(tmp_path, capsys, monkeypatch):
    checked: list[int] = []
    check_object = validate.check_object

    def counting(index, obj, **kwargs):
        checked.append(index)
        return check_object(index, obj, **kwargs)

    monkeypatch.setattr(validate, "check_object", counting)
    docs = [*_good_state(), node("cpu-2"), _other_namespace_pod("cpu-2")]
    state_file, pod_file = _files(tmp_path, state_docs=docs)
    status, out, err = run(["simulate", str(state_file), "--pod", str(pod_file), "--json"], capsys)
    assert status == 0, err
    assert sorted(checked) == list(range(len(docs)))  # the namespace found in the same pass
    assert len(json.loads(out)["input_warnings"]) == 1


def _runtime_class(name: str = "gvisor", cpu: str = "1") -> dict:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": "runsc",
        "overhead": {"podFixed": {"cpu": cpu, "memory": "128Mi"}},
    }


@pytest.mark.parametrize(
    "test_variation_id, extra_objects, expect, expect_warning",
    [
        (
            # 3 CPU used of 4; 0.5 CPU asked + 1 CPU of the class's overhead does not fit
            "the-classs-overhead-is-added-as-admission-adds-it",
            [_runtime_class()],
            {"verdict": "refuse", "reasons": ["insufficient:cpu"]},
            None,
        ),
        (
            "a-class-the-dump-lacks-is-said-and-its-overhead-not-counted",
            [],
            {"verdict": "colocate", "reasons": []},
            "RuntimeClass 'gvisor', which the dump does not contain",
        ),
    ],
)
def test_simulate_counts_the_runtime_class_overhead_of_the_new_pod(
    test_variation_id, extra_objects, expect, expect_warning, tmp_path, capsys
):
    holder = running(
        "jupyter-alice--app", "cpu-1", claims=["claim-alice"], user="alice", requests={"cpu": "3"}
    )
    new_pod = pod("jupyter-alice", claims=["claim-alice"], user="alice", requests={"cpu": "500m"})
    new_pod["spec"]["runtimeClassName"] = "gvisor"
    state_file, pod_file = _files(
        tmp_path,
        state_docs=[node("cpu-1"), pvc("claim-alice"), holder, *extra_objects],
        pod_docs=[new_pod],
    )
    status, out, err = run(["simulate", str(state_file), "--pod", str(pod_file), "--json"], capsys)
    assert status == 0, err
    result = json.loads(out)
    assert {k: result[k] for k in expect} == expect
    if expect_warning is None:
        assert (err, result["input_warnings"]) == ("", [])
    else:
        (warning,) = result["input_warnings"]
        assert expect_warning in warning
        assert err == f"warning: {warning}\n"


def test_a_pod_overhead_that_conflicts_with_its_runtime_class_exits_2(tmp_path, capsys):
    new_pod = pod("jupyter-alice", claims=["claim-alice"], user="alice")
    new_pod["spec"].update(runtimeClassName="gvisor", overhead={"cpu": "2"})
    state_file, pod_file = _files(
        tmp_path, state_docs=[*_good_state(), _runtime_class()], pod_docs=[new_pod]
    )
    status, out, err = run(["simulate", str(state_file), "--pod", str(pod_file), "--json"], capsys)
    assert (status, out) == (2, "")
    assert "RuntimeClass 'gvisor'" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("problem", "cause", "expect"),
    [
        (
            "no-kubeconfig",
            "",
            "no kubeconfig: /k does not exist (pass --kubeconfig or set KUBECONFIG)",
        ),
        ("bad-kubeconfig", "not YAML", "kubeconfig /k: cannot use it: not YAML"),
        (
            "bad-service-account",
            "no token",
            "no kubeconfig at /k, and the pod's service account cannot be used: no token",
        ),
        (
            "a-problem-from-the-future",
            "",
            "no kubeconfig: /k does not exist (pass --kubeconfig or set KUBECONFIG)",
        ),
    ],
)
def test_a_command_that_cannot_connect_says_why_in_one_line(problem, cause, expect):
    assert messages.connect_failed(problem, "/k", cause) == expect


def test_simulate_json_offers_the_move_of_the_whole_set_beside_the_way_out(capsys):
    """Failure mode 3 with an empty node that holds alice's whole set: ``way_out.move``
    (docs/cli.md; added, nothing renamed)."""
    status, out, _ = run([*scenario_args("capacity-cap-move"), "--json"], capsys)
    assert status == 0
    result = json.loads(out)
    assert result["way_out"] == {
        "stop": [""],
        "start": "big-app",
        "move": {"restart": [""], "start": "big-app", "node": "cpu-2", "new_node": False},
    }
    assert (
        "Or: Restart your default server together on a machine with room for both, then start "
        "'big-app'. Running kernels restart. Details: "
    ) in result["message"]
