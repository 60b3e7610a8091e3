"""`nebari-colocate simulate` (DESIGN section 8) on the example scenarios and on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from builders import node, pod, pvc

from nebari_colocate import cli

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
