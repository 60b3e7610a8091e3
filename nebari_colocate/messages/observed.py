"""The hub log's words of observe mode (``colocation_mode = "observe"``): what enforce would have
done with a spawn, said once per decision and once per hopeless pod event.  (pure)
"""

from __future__ import annotations

from ..placement import COLOCATE, REFUSE, SKIP, Decision

#: what enforce would have done, by the name a record carries (``observe_mode.Observation.would``)
WOULD_REFUSE, WOULD_PIN, WOULD_COLOCATE, WOULD_SKIP, WOULD_END = (
    "refuse",
    "pin",
    "colocate",
    "skip",
    "end",
)


def would(decision: Decision) -> str:
    """What enforce does with ``decision``: refuse the spawn, pin the pod to a node, co-locate it
    with no node known yet (the first server lands anywhere), or skip co-location."""
    if decision.verdict == REFUSE:
        return WOULD_REFUSE
    if decision.verdict == COLOCATE:
        return WOULD_PIN if decision.node else WOULD_COLOCATE
    if decision.verdict == SKIP:
        return WOULD_SKIP
    return decision.verdict


def whose(username: str, server_name: str) -> str:
    """``alice's 'gpu-lab'``, or ``alice's default server``."""
    return f"{username}'s '{server_name}'" if server_name else f"{username}'s default server"


def observed_decision_line(
    decision: Decision, *, username: str, server_name: str, message: str, operator_line: str
) -> str:
    """The hub-log line of a decision observe mode did not act on: what enforce would have done
    (``message``: the words the user would have read, for a refusal), then the operator line."""
    server = whose(username, server_name)
    action = would(decision)
    if action == WOULD_REFUSE:
        said = f"would refuse {server}: {message}"
    elif action == WOULD_PIN:
        said = f"would pin {server} to node {decision.node}"
    elif action == WOULD_COLOCATE:
        said = f"would co-locate {server} (no server holds its volume yet: it may start anywhere)"
    else:
        said = f"would skip co-location for {server} (no volume of it is exclusive)"
    if decision.warnings and action != WOULD_REFUSE:
        said += f", with warnings {', '.join(sorted(decision.warnings))}"
    return f"observe: {said} [{operator_line}]"


def observed_event_line(
    reason: str, *, username: str, server_name: str, message: str, operator_line: str
) -> str:
    """The hub-log line of a pod event on which enforce would have ended the spawn at once
    (fail fast): observe mode lets it wait, as KubeSpawner does."""
    return (
        f"observe: would end {whose(username, server_name)} now ({reason}): {message} "
        f"[{operator_line}]"
    )


def observe_mode_config_line(label_key: str) -> str:
    """The hub-log line of configure(c) in observe mode: the hub config is left as it is."""
    return (
        "nebari-colocate: colocation_mode is 'observe': hand-written co-location pod affinity "
        f"(on {label_key} or hub.jupyter.org/username) is left in place and the spawner changes "
        "no pod; the hub log says 'observe: would ...' for each decision"
    )
