"""Corrupt and hostile input: one clear error, never a traceback or a hang.

The pure core, given objects the API would accept, decides in bounded time whatever their
numbers; properties (hypothesis) show that no mutated object makes the readers or ``decide`` raise
anything but that one error (a :class:`~nebari_colocate.state.StateError` naming the file).  What
the command line makes of hostile files (exit 2, one line naming the file and the problem) is in
test_cli.py.
"""

from __future__ import annotations

import copy
import functools

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nebari_colocate import dumps, messages, state, validate
from nebari_colocate.placement import REFUSE, Decision, Policy, decide
from tests.support.builders import container, node, pod, pvc, running
from tests.support.builders import state as make_state

# --------------------------------------------------------------------------------------------------
# the pure core on numbers that make no sense: reported, never computed for seconds


def _holder(**kwargs) -> dict:
    return running("jupyter-alice--app", "cpu-1", claims=["claim-alice"], user="alice", **kwargs)


def test_a_holder_with_a_saturated_request_fills_its_node_and_is_reported():
    hog = _holder(requests={"memory": "1e999999"})
    new = pod("jupyter-alice", claims=["claim-alice"], user="alice", requests={"memory": "1Gi"})
    decision = decide(new, make_state(node("cpu-1"), pvc("claim-alice"), hog), Policy())
    assert decision.verdict == REFUSE
    assert decision.reasons == ["insufficient:memory"]
    text = messages.user_message(decision, new, username="alice", server_name="")
    assert "It needs 1 GiB but node cpu-1, where your volume is attached, has only 0 bytes" in text


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
        dumps.read_objects(path)
    except state.StateError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)


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
    assert len(text) > dumps.FAST_YAML_BYTES
    fast = dumps._fast_documents(text)
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
    assert dumps._fast_documents(_big_dump(line)) is None
