"""Corrupt and hostile input: one clear error, never a traceback or a hang.

``simulate`` (and every reader of user-supplied files) exits 2 with one line naming the file and
the problem; the pure core, given objects the API would accept, decides in bounded time whatever
their numbers; properties (hypothesis) show that no mutated object makes the readers or
``decide`` raise anything but that one error.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import pytest
import yaml
from builders import container, node, pod, pvc, running
from builders import state as make_state
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nebari_colocate import messages, state, validate
from nebari_colocate.placement import REFUSE, Decision, Policy, decide

from .test_simulate_cli import run, write_yaml

# --------------------------------------------------------------------------------------------------
# simulate: exit 2, one line naming the file and the problem


def _holder(**kwargs) -> dict:
    return running("jupyter-alice--app", "cpu-1", claims=["claim-alice"], user="alice", **kwargs)


def _good_pod() -> dict:
    return pod("jupyter-alice", claims=["claim-alice"], user="alice")


def _good_state() -> list[dict]:
    return [node("cpu-1"), pvc("claim-alice"), _holder()]


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
    monkeypatch.setattr(state, "MAX_FILE_BYTES", 1000)
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


# --------------------------------------------------------------------------------------------------
# the pure core on numbers that make no sense: reported, never computed for seconds


def test_a_holder_with_a_saturated_request_fills_its_node_and_is_reported():
    hog = _holder(requests={"memory": "1e999999"})
    new = pod("jupyter-alice", claims=["claim-alice"], user="alice", requests={"memory": "1Gi"})
    decision = decide(new, make_state(node("cpu-1"), pvc("claim-alice"), hog), Policy())
    assert decision.verdict == REFUSE
    assert decision.reasons == ["insufficient:memory"]
    text = messages.user_message(decision, new, username="alice", server_name="")
    assert "it needs 1 GiB but node cpu-1, where your volume is attached, has only 0 bytes" in text


def test_a_pod_asking_for_more_than_int64_fits_no_node():
    greedy = pod("jupyter-alice", claims=["claim-alice"], requests={"cpu": "1e999999999"})
    decision = decide(greedy, make_state(node("cpu-1"), pvc("claim-alice"), _holder()), Policy())
    assert decision.reasons == ["insufficient:cpu"]


# --------------------------------------------------------------------------------------------------
# properties: mutated objects get the one clear error or a decision, nothing else

_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["1e999999", "-1", "500m", "2Gi", "1e999999999", "", "Gi", "ReadWriteOnce"]),
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(obj, prefix=()):
    """Every path to a value inside ``obj`` (dict keys and list indexes)."""
    yield prefix
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from _paths(value, (*prefix, index))


def _mutate(obj, path, value):
    obj = copy.deepcopy(obj)
    if not path:
        return value
    target = obj
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return obj


def _scenario():
    gpu = container("lab", limits={"nvidia.com/gpu": "1"}, requests={"cpu": "1", "memory": "1Gi"})
    new = pod(
        "jupyter-alice",
        claims=["claim-alice"],
        user="alice",
        containers=[gpu],
        node_selector={"gpu": "true"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    objects = [node("cpu-1"), pvc("claim-alice"), _holder(requests={"cpu": "500m"})]
    return new, objects


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_readers_and_decide_raise_nothing_but_the_one_clear_error(data):
    new, objects = _scenario()
    which = data.draw(st.integers(0, len(objects)))
    target = new if which == len(objects) else objects[which]
    path = data.draw(st.sampled_from(list(_paths(target))))
    mutated = _mutate(target, path, data.draw(_json_values))
    if which == len(objects):
        new = mutated
    else:
        objects[which] = mutated
    try:
        if not isinstance(new, dict):
            raise validate.InvalidObject("not a mapping")
        validate.check_pod(new, name_required=False)
        validate.check_objects(objects)
    except validate.InvalidObject as exc:
        assert "\n" not in str(exc)
        return
    for policy in (
        Policy(),
        Policy(premium_node_policy="refuse", storage_access_mode="ReadWriteMany"),
    ):
        for node_access in (True, False):
            decision = decide(new, make_state(*objects, node_access=node_access), policy)
            assert isinstance(decision, Decision)
            messages.user_message(decision, new, username="alice", server_name="x")
            messages.user_html(decision, new, username="alice", server_name="x")
            messages.operator_line(decision, username="alice", server_name="x")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_are_objects_or_a_state_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("h") / "dump.yaml"
    path.write_bytes(data)
    try:
        state.read_objects(path)
    except state.StateError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)


def test_cli_main_turns_every_reader_error_into_exit_2(tmp_path, capsys):
    # explain --pod reads the same way, before any cluster is asked
    bad = tmp_path / "pod.yaml"
    bad.write_bytes(b"\xff\xfe\x00k")
    status, _, err = run(
        ["explain", "alice", "--pod", str(bad), "--kubeconfig", "/nonexistent"], capsys
    )
    assert status == 2 and "pod.yaml: " in err and err.count("\n") == 1


# --------------------------------------------------------------------------------------------------
# the fast reader of big dumps (rapidyaml) reads what PyYAML reads, or steps aside


@functools.lru_cache(maxsize=1)
def _big_text() -> str:
    objects = [node(f"n{i}") for i in range(100)] + [
        running(f"p{i}", f"n{i % 100}", claims=[f"claim-{i}"], requests={"cpu": "250m"})
        for i in range(3000)
    ]
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump({"kind": "List", "items": objects}, Dumper=dumper, sort_keys=False)


def _big_dump(*extra_lines: str) -> str:
    return _big_text() + "".join(extra_lines)


def test_a_big_dump_reads_the_same_through_rapidyaml_and_pyyaml():
    pytest.importorskip("ryml", reason="the test extra installs rapidyaml")
    text = _big_dump()
    assert len(text) > state.FAST_YAML_BYTES
    fast = state._fast_documents(text)
    assert fast is not None
    assert fast == list(yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


@pytest.mark.parametrize(
    "line",
    [
        "extra: yes\n",
        "extra: 010\n",
        "extra: ~\n",
        "extra: 1e3\n",
        "extra: 2026-01-01\n",
        "extra: &a [1]\nmore: *a\n",
        "extra: !!str 1\n",
        "extra: 1_000\n",
        "extra: .inf\n",
    ],
)
def test_the_fast_reader_steps_aside_where_yaml_1_1_reads_differently(line):
    pytest.importorskip("ryml", reason="the test extra installs rapidyaml")
    assert state._fast_documents(_big_dump(line)) is None
