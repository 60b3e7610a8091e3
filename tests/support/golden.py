"""The words and the JSON a person or a tool reads, rendered over fixed inputs, for the golden
test (tests/unit/test_golden_words.py): a refactor that changes one byte of them fails it.

Each golden file under tests/unit/golden/ is one entry of :func:`render_all`. Regenerate them
only on purpose (a word changed deliberately), from the repository root, and commit the diff
with the change that made it:

    python -m tests.support.golden
"""

# ruff: noqa: E501 - one rendered call per line, as it reads in the golden file

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nebari_colocate import cli, events, faults, fit, messages
from nebari_colocate.events import EventVerdict, Fragment
from nebari_colocate.placement import REASON_CODES, REFUSE, Decision, Policy, decide
from nebari_colocate.wayout import WayOut
from tests.support.builders import gpu_node, node, pod, pvc, state, taint, volume_attachment

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "unit" / "golden"
SCENARIOS = ROOT / "examples" / "scenarios"

#: ``simulate`` options each example scenario is run with, by the golden file's suffix
SIMULATE_OPTIONS: dict[str, list[str]] = {
    "default": [],
    "no-node-access": ["--no-node-access"],
    "premium-refuse": ["--premium-node-policy", "refuse"],
    "rwx": ["--storage-access-mode", "ReadWriteMany"],
}

HOME = "claim-alice"
XSS = "<img src=x onerror=alert(1)>"
CPU = {"nebari.dev/node-type": "cpu"}
GPU = {"nebari.dev/node-type": "gpu"}
NODES = (node("cpu-1", labels=CPU), gpu_node("gpu-1", labels=GPU))
DISPLAY = {"": "JupyterLab", "pandas-app": "Pandas App", XSS: XSS}
ACTION = "/hub/colocate/way-out/alice/gpu-lab"


def _alice(server: str, node_name: str | None = "cpu-1", **kwargs: Any) -> dict[str, Any]:
    name = f"jupyter-alice--{server}" if server else "jupyter-alice"
    if node_name is None:
        return pod(name, claims=[HOME], user="alice", server=server, **kwargs)
    placed = {"node_name": node_name, "phase": "Running"}
    return pod(name, claims=[HOME], user="alice", server=server, **placed, **kwargs)


def _gpu_lab(server: str = "") -> dict[str, Any]:
    return _alice(server, None, limits={"nvidia.com/gpu": "1"}, node_selector=GPU)


# --------------------------------------------------------------------------------------------------
# simulate


def _run_cli(argv: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(argv)
    return f"$ nebari-colocate {' '.join(argv)}\nexit {status}\n--- stdout\n{out.getvalue()}--- stderr\n{err.getvalue()}"


def _simulate() -> Iterator[tuple[str, str]]:
    for scenario in sorted(p for p in SCENARIOS.iterdir() if p.is_dir()):
        rel = scenario.relative_to(ROOT)
        base = ["simulate", str(rel / "state.yaml"), "--pod", str(rel / "pod.yaml")]
        for suffix, options in SIMULATE_OPTIONS.items():
            runs = [_run_cli([*base, *options, "--json"]), _run_cli([*base, *options])]
            yield f"simulate/{scenario.name}.{suffix}.txt", "\n".join(runs)


# --------------------------------------------------------------------------------------------------
# a refusal's words, for every reason code and for decisions decide really takes


def _decided() -> dict[str, tuple[dict[str, Any], Decision, str]]:
    cases: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str, Policy]] = {
        "gpu-lab-blocked-by-app": (
            _gpu_lab(""),
            [pvc(HOME), _alice("pandas-app")],
            "",
            Policy(),
        ),
        "named-server-blocked-by-default-server": (
            _gpu_lab("gpu-lab"),
            [pvc(HOME), _alice("")],
            "gpu-lab",
            Policy(),
        ),
        "capacity-cap": (
            _alice("big-app", None, requests={"cpu": "2"}),
            [pvc(HOME), _alice("", requests={"cpu": "3"})],
            "big-app",
            Policy(),
        ),
        "cordoned-node": (
            _alice("app", None),
            [node("old-1", unschedulable=True), pvc(HOME), _alice("", "old-1")],
            "app",
            Policy(),
        ),
        "tainted-node": (
            _alice("app", None),
            [node("ml-1", taints=[taint("dedicated", "ml")]), pvc(HOME), _alice("", "ml-1")],
            "app",
            Policy(),
        ),
        "premium-node-refused": (
            _alice("dashboard", None),
            [pvc(HOME), _alice("", "gpu-1", limits={"nvidia.com/gpu": "1"})],
            "dashboard",
            Policy(premium_node_policy="refuse"),
        ),
        "claim-in-use": (
            _alice("app", None),
            [pvc(HOME, modes=["ReadWriteOncePod"]), _alice("")],
            "app",
            Policy(),
        ),
        "split-attachment": (
            _alice("app", None),
            [pvc(HOME), _alice("", "cpu-1"), _alice("other", "gpu-1")],
            "app",
            Policy(),
        ),
        "volume-still-detaching": (
            _gpu_lab(""),
            [pvc(HOME), volume_attachment(f"pv-{HOME}", "cpu-1")],
            "",
            Policy(),
        ),
        "hostile-server-name": (
            _gpu_lab(XSS),
            [pvc(HOME), _alice("pandas-app"), _alice(XSS + "x")],
            XSS,
            Policy(),
        ),
    }
    decided = {}
    for name, (new_pod, objects, server, policy) in cases.items():
        decided[name] = (new_pod, decide(new_pod, state(*NODES, *objects), policy), server)
    return decided


def _refused_for(code: str, *, shared: bool = True, way_out: bool = True) -> Decision:
    holders = [_alice(""), _alice("pandas-app")]
    if shared:
        holders.append(
            pod("jupyter-bob", claims=[HOME], node_name="cpu-1", phase="Running", user="bob")
        )
    return Decision(
        REFUSE,
        node="cpu-1",
        reasons=[code],
        claims=[HOME],
        busy_claims=[HOME],
        holder_pods=holders,
        split_nodes=["cpu-1", "gpu-1"],
        way_out=WayOut(stop=("", "pandas-app"), start="gpu-lab") if way_out else None,
    )


def _refusal_words(new_pod: dict[str, Any], decision: Decision, server: str) -> str:
    args: dict[str, Any] = {"username": "alice", "server_name": server}
    text = messages.user_message(decision, new_pod, **args)
    lines = [
        f"verdict: {decision.verdict} reasons: {decision.reasons} warnings: {decision.warnings}",
        f"user_headline: {messages.user_headline(decision, new_pod, **args)}",
        f"user_headline (display names): "
        f"{messages.user_headline(decision, new_pod, display_names=DISPLAY, **args)}",
        f"user_message: {text}",
        f"user_message (display names): "
        f"{messages.user_message(decision, new_pod, display_names=DISPLAY, **args)}",
        f"user_html: {messages.user_html(decision, new_pod, **args)}",
        f"user_html (display names): "
        f"{messages.user_html(decision, new_pod, display_names=DISPLAY, **args)}",
        f"reason_sentences: {messages.reason_sentences(decision, new_pod)}",
        f"outcome_lines: {messages.outcome_lines(decision, text)}",
        f"operator_line: {messages.operator_line(decision, **args)}",
    ]
    if decision.way_out is not None:
        lines.append(f"way_out_sentence: {messages.way_out_sentence(decision.way_out, DISPLAY)}")
        button = messages.way_out_form_html(decision.way_out, action=ACTION, display_names=DISPLAY)
        lines.append(
            "user_html (with the way out's button): "
            f"{messages.user_html(decision, new_pod, display_names=DISPLAY, button=button, **args)}"
        )
    return "\n".join(lines) + "\n"


def _reasons() -> Iterator[tuple[str, str]]:
    codes = [c for c in REASON_CODES if c != fit.INSUFFICIENT_ANY]
    codes += [fit.insufficient(r) for r in ("cpu", "memory", "nvidia.com/gpu", "example.com/fpga")]
    codes.append("a-code-from-the-future")
    new_pod = _alice("gpu-lab", None)
    variants: dict[str, dict[str, bool]] = {
        "": {},
        " (own holders only)": {"shared": False},
        " (own holders only, no way out)": {"shared": False, "way_out": False},
    }
    blocks = [
        f"## {code}{name}\n{_refusal_words(new_pod, _refused_for(code, **kw), 'gpu-lab')}"
        for code in codes
        for name, kw in variants.items()
    ]
    yield "words/reason-codes.txt", "\n".join(blocks)
    blocks = [
        f"## {name}\n{_refusal_words(new_pod, decision, server)}"
        for name, (new_pod, decision, server) in _decided().items()
    ]
    yield "words/decisions.txt", "\n".join(blocks)


# --------------------------------------------------------------------------------------------------
# event verdicts


#: fragments as kube-scheduler, cluster-autoscaler and Karpenter write them
FRAGMENTS = (
    "Insufficient nvidia.com/gpu",
    "Insufficient cpu",
    "node(s) didn't match Pod's node affinity/selector",
    "node(s) had untolerated taint {dedicated: ml}",
    "node(s) had untolerated taint {node.kubernetes.io/unreachable: }",
    "node(s) were unschedulable",
    "Too many pods",
    "node(s) had volume node affinity conflict",
    "node(s) didn't match pod affinity rules",
    "node(s) didn't match pod anti-affinity rules",
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)",
    "pod has unbound immediate PersistentVolumeClaims",
    "node(s) didn't have free ports for the requested pod ports",
    "node(s) didn't match pod topology spread constraints",
    "node(s) exceed max volume count",
    "node(s) had volume node affinity conflict, 1 node(s) didn't match pod affinity rules",
    "something no rule knows",
)


def _verdicts() -> Iterator[tuple[str, EventVerdict]]:
    fragments = tuple(events.read_fragment(f, 2) for f in FRAGMENTS)
    way_out = WayOut(stop=("pandas-app",), start="")
    gpu = (
        Fragment(3, events.FRAGMENT_INSUFFICIENT, "Insufficient nvidia.com/gpu", "nvidia.com/gpu"),
    )
    fail, wait = events.FAIL, events.WAIT
    yield (
        "unschedulable-pinned",
        EventVerdict(fail, events.UNSCHEDULABLE_PINNED, node="cpu-1", fragments=gpu),
    )
    yield (
        "unschedulable-pinned-way-out",
        EventVerdict(
            fail, events.UNSCHEDULABLE_PINNED, node="cpu-1", fragments=gpu, way_out=way_out
        ),
    )
    yield (
        "unschedulable-pinned-victims",
        EventVerdict(fail, events.UNSCHEDULABLE_PINNED, node="cpu-1", fragments=gpu, victims=2),
    )
    yield (
        "preemption-stalled",
        EventVerdict(fail, events.PREEMPTION_STALLED, node="cpu-1", victims=3),
    )
    yield "no-scheduler", EventVerdict(fail, events.NO_SCHEDULER, scheduler="jhub-user-scheduler")
    yield "no-scheduler-unknown", EventVerdict(fail, events.NO_SCHEDULER)
    for cause in (
        events.KARPENTER_COLOCATION,
        events.KARPENTER_NO_INSTANCE_TYPE,
        events.KARPENTER_LIMITS,
    ):
        yield (
            f"no-scale-up-{cause}",
            EventVerdict(
                fail,
                events.NO_SCALE_UP,
                causes=(cause,),
                requests=(("cpu", "4"), ("nvidia.com/gpu", "1")),
            ),
        )
    yield "no-scale-up-autoscaler", EventVerdict(fail, events.NO_SCALE_UP, fragments=fragments[:3])
    yield (
        "unschedulable",
        EventVerdict(fail, events.UNSCHEDULABLE, fragments=fragments, grace=120.0),
    )
    for i, fragment in enumerate(fragments):
        yield (
            f"unschedulable-fragment-{i:02d}",
            EventVerdict(
                fail,
                events.UNSCHEDULABLE,
                fragments=(fragment,),
                grace=60.0,
                scheduler="default-scheduler",
            ),
        )
    yield (
        "multi-attach",
        EventVerdict(
            fail,
            events.MULTI_ATTACH,
            holders=("jupyter-alice--pandas-app", "jupyter-bob"),
            servers=("pandas-app",),
            others=3,
            other_servers=1,
            not_servers=1,
            elsewhere=1,
            way_out=way_out,
        ),
    )
    yield "multi-attach-detaching", EventVerdict(fail, events.MULTI_ATTACH, grace=30.0)
    yield "multi-attach-default", EventVerdict(fail, events.MULTI_ATTACH, servers=("", XSS))
    for cause in events.IMAGE_CAUSES:
        yield (
            f"image-invalid-{cause}",
            EventVerdict(fail, events.IMAGE_INVALID, causes=(cause,), image=XSS),
        )
        yield (
            f"image-pull-{cause}",
            EventVerdict(
                fail, events.IMAGE_PULL, causes=(cause,), image="quay.io/x/y:1", grace=90.0
            ),
        )
    yield "image-pull-no-image", EventVerdict(fail, events.IMAGE_PULL, grace=90.0)
    yield "scaling-up", EventVerdict(wait, events.SCALING_UP)
    yield "scaling-up-gpu", EventVerdict(wait, events.SCALING_UP, gpu=True)
    yield "no-node-yet", EventVerdict(wait, events.NO_NODE_YET, fragments=fragments[:2])
    yield "retrying-pull", EventVerdict(wait, events.RETRYING_PULL, image="quay.io/x/y:1")
    yield "preempting", EventVerdict(wait, events.PREEMPTING, node="cpu-1", victims=2)
    yield "progress-none", EventVerdict(wait, events.PROGRESS)
    for reason in sorted(events.PROGRESS_EVENTS):
        yield f"progress-{reason}", EventVerdict(wait, events.PROGRESS, event=reason)
    yield "code-from-the-future", EventVerdict(fail, "a-code-from-the-future")


def _event_words() -> Iterator[tuple[str, str]]:
    blocks = []
    for name, verdict in _verdicts():
        lines = [
            f"## {name}",
            f"event_text: {messages.event_text(verdict)}",
            f"event_details_text: {messages.event_details_text(verdict)}",
            f"event_progress_html: {messages.event_progress_html(verdict)}",
        ]
        if verdict.action == events.FAIL:
            for server in ("", "pandas-app"):
                failure = messages.event_failure(verdict, server, DISPLAY)
                refusal = messages.event_refusal(verdict, server, DISPLAY, action=ACTION)
                operator = messages.event_operator_line(
                    verdict, username="alice", server_name=server, pod_name="jupyter-alice"
                )
                lines += [
                    f"event_failure[{server!r}]: {failure}",
                    f"event_refusal[{server!r}]: {refusal}",
                    f"event_operator_line[{server!r}]: {operator}",
                ]
        blocks.append("\n".join(lines) + "\n")
    yield "words/event-verdicts.txt", "\n".join(blocks)
    lines = [f"{f!r}: {messages.fragment_words(events.read_fragment(f, 1))}" for f in FRAGMENTS]
    yield "words/fragments.txt", "\n".join(lines) + "\n"
    karpenter = [
        (causes, messages.karpenter_refusal_text(causes, {"cpu": "4"}))
        for causes in (
            [code for _, code in messages._KARPENTER_CAUSE_WORDS],
            [events.KARPENTER_COLOCATION],
            [events.KARPENTER_REQUIREMENTS, events.KARPENTER_TAINT],
            [],
        )
    ]
    lines = [f"karpenter_refusal_text({c}): {t}" for c, t in karpenter]
    lines += [
        f"no_scale_up_text: {messages.no_scale_up_text(['max node group size reached', 'backoff'])}",
        f"scale_up_text(gpu=False): {messages.scale_up_text(gpu=False)}",
        f"scale_up_text(gpu=True): {messages.scale_up_text(gpu=True)}",
    ]
    yield "words/autoscalers.txt", "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# the way out and the move


def _way_out_words() -> Iterator[tuple[str, str]]:
    outcomes = [*messages.OUTCOME_WORDS, "an-outcome-from-the-future"]
    lines = []
    for outcome in outcomes:
        for stop in ((), ("pandas-app",), ("", "pandas-app", XSS)):
            kwargs: dict[str, Any] = {"display_names": DISPLAY, "seconds": 90.0}
            for detail in ("", "the API did not answer"):
                lines += [
                    f"way_out_failed({outcome}, {stop}, {detail!r}): "
                    + messages.way_out_failed(
                        outcome, start="gpu-lab", stop=stop, detail=detail, **kwargs
                    ),
                    f"way_out_failed_html({outcome}, {stop}, {detail!r}): "
                    + messages.way_out_failed_html(
                        outcome, start="", stop=stop, detail=detail, **kwargs
                    ),
                    f"move_failed({outcome}, {stop}, {detail!r}): "
                    + messages.move_failed(outcome, servers=stop, detail=detail, **kwargs),
                    f"move_failed_html({outcome}, {stop}, {detail!r}): "
                    + messages.move_failed_html(outcome, servers=stop, detail=detail, **kwargs),
                ]
    yield "words/way-out-outcomes.txt", "\n".join(lines) + "\n"
    lines = []
    for way_out in (WayOut(("pandas-app",), ""), WayOut(("", XSS), "gpu-lab")):
        for names in (None, DISPLAY):
            lines += [
                f"way_out_sentence: {messages.way_out_sentence(way_out, names)}",
                f"way_out_button_label: {messages.way_out_button_label(way_out, names)}",
                f"way_out_busy_label: {messages.way_out_busy_label(way_out, names)}",
                f"way_out_form_html: {messages.way_out_form_html(way_out, action=ACTION, display_names=names)}",
            ]
    for servers in (("pandas-app",), ("pandas-app", XSS)):
        lines += [
            f"premium_ride_text: {messages.premium_ride_text(servers, DISPLAY)}",
            f"premium_ride_html: "
            f"{messages.premium_ride_html(servers, 'gpu-1', '/hub/colocate/move/alice', DISPLAY)}",
        ]
    yield "words/way-out-form.txt", "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# the hub log, the API faults, the command's words


def _hub_words() -> Iterator[tuple[str, str]]:
    lines = []
    for fault in [*messages.API_FAULTS, "a-fault-from-the-future"]:
        for detail in ("", "503 Service Unavailable"):
            kwargs = {"server_name": "pandas-app", "detail": detail}
            lines += [
                f"api_fault_message({fault}, {detail!r}): {messages.api_fault_message(fault, **kwargs)}",
                f"api_fault_html({fault}, {detail!r}): {messages.api_fault_html(fault, **kwargs)}",
            ]
    lines += [
        f"late_pod_delete_line: {messages.late_pod_delete_line('jupyter-alice', 12.5, 10.0)}",
        f"late_pod_delete_failed_line: "
        f"{messages.late_pod_delete_failed_line('jupyter-alice', RuntimeError('boom'))}",
        f"removed_affinity_line: {messages.removed_affinity_line([('a', 'b'), ('c', 'd')])}",
        f"cleaned_when_called_line: {messages.cleaned_when_called_line(['x', 'y'])}",
        f"dropped_manifest_terms_line: {messages.dropped_manifest_terms_line('p', ['k1', 'k2'])}",
        f"missing_priority_class_note: {messages.missing_priority_class_note('high', 1000)}",
        f"empty_namespace_note: {messages.empty_namespace_note('jhub')}",
        f"denied_read_note: {messages.denied_read_note('list', 'nodes', messages.NODES_COST_EXPLAIN)}",
        f"denied_read_note(None): {messages.denied_read_note('list', 'nodes', None)}",
        f"api_refused: {messages.api_refused(403, 'list pods', reason='Forbidden')}",
        f"api_unreachable: {messages.api_unreachable('https://127.0.0.1:6443', 'kubeconfig', 'refused')}",
        f"api_no_answer: {messages.api_no_answer('https://127.0.0.1:6443', 5.0)}",
        f"migrate_plan_hint: {messages.migrate_plan_hint()}",
        f"delete_old_volume_hint: {messages.delete_old_volume_hint('pv-old')}",
        f"migrate_command: {messages.migrate_command('apply', 'alice', 'jhub', 'nfs')}",
    ]
    for problem in messages.CONNECT_PROBLEMS:
        lines.append(
            f"connect_failed({problem}): {messages.connect_failed(problem, '~/.kube/config', 'x')}"
        )
    for code in messages.STORAGE_CLASS_PROBLEMS:
        lines.append(
            f"storage_class_problem({code}): {messages.storage_class_problem(code, 'nfs', 'p')}"
        )
    yield "words/hub-and-command.txt", "\n".join(lines) + "\n"


def _constant(value: Any) -> Any:
    if callable(value) and not isinstance(value, type):
        return "<callable>"
    if isinstance(value, dict):
        return {str(k): _constant(v) for k, v in value.items()}
    if isinstance(value, (frozenset, set)):
        return sorted(_constant(v) for v in value)
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: _constant(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [_constant(v) for v in value]
    return value


def _tables() -> Iterator[tuple[str, str]]:
    """Every public constant of ``messages`` (its words tables, as ``messages.X`` reads them)."""
    from nebari_colocate import objects, placement, wayout

    borrowed = {  # names messages imports from the rules: theirs, not words
        name
        for module in (events, faults, fit, objects, placement, wayout)
        for name in vars(module)
    }
    found = {
        name: _constant(value)
        for name, value in vars(messages).items()
        if name.isupper()
        and name not in borrowed
        and isinstance(value, (str, dict, tuple, list, frozenset))
    }
    yield "words/tables.json", json.dumps(found, indent=1, sort_keys=True) + "\n"


def _metrics() -> Iterator[tuple[str, str]]:
    from nebari_colocate import metrics

    rows = []
    for collectors in (metrics.collectors(), metrics.view_collectors()):
        for key, c in sorted(collectors.items()):
            rows.append(f"{key}: {c._type} {c._name} {list(c._labelnames)} {c._documentation!r}")
    yield "metrics.txt", "\n".join(rows) + "\n"


SECTIONS: tuple[Callable[[], Iterator[tuple[str, str]]], ...] = (
    _simulate,
    _reasons,
    _event_words,
    _way_out_words,
    _hub_words,
    _tables,
    _metrics,
)


def render_all() -> dict[str, str]:
    """Golden file name (relative to tests/unit/golden/) -> its text."""
    rendered: dict[str, str] = {}
    for section in SECTIONS:
        for name, text in section():
            assert name not in rendered, name
            rendered[name] = text
    return rendered


def main() -> None:
    rendered = render_all()
    for old in GOLDEN.rglob("*"):
        if old.is_file() and old.relative_to(GOLDEN).as_posix() not in rendered:
            old.unlink()
    for name, text in rendered.items():
        path = GOLDEN / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"golden: {len(rendered)} files written to {GOLDEN.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
