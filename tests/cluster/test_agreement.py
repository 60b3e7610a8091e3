"""decide against the real kube-scheduler on random scenarios (benchmarks.agreement, small N).

The benchmark's generator builds each scenario in a control plane whose state stays as written
(``frozen_control_plane``: no kwok, so phases stay as set, and no attach/detach controller, so the
only VolumeAttachments are the scenario's), in its own namespaces with nodes labelled per scenario,
decides, creates the pod with the affinity decide emits and compares with the scheduler's first
verdict. Each scenario is also decided from direct API reads and from the live view (started
before the scenario exists, so it learns every object from watch events): both must decide
exactly as the full state.
The full runs (N >= 200, several seeds) are in docs/performance.md.
"""

from __future__ import annotations

from benchmarks import agreement

SEED = 20261130
COUNT = 30


async def test_decide_agrees_with_the_real_scheduler_on_random_scenarios(
    frozen_control_plane, tmp_path
):
    from kubernetes_asyncio import config

    api_client = await config.new_client_from_config(
        config_file=frozen_control_plane.kubeconfig, persist_config=False
    )
    lines: list[str] = []
    try:
        result = await agreement.run_agreement(
            api_client,
            seed=SEED,
            count=COUNT,
            concurrency=6,
            keep_failures=tmp_path,
            log=lines.append,
        )
    finally:
        await api_client.close()
    print("\n".join([*lines, *agreement.summary(result), result.line]))
    disagreements = [f"scenario {o.index}: {o.why}" for o in result.outcomes if not o.agree]
    assert result.agreed == COUNT, "\n".join(disagreements) + f"\n(pairs kept in {tmp_path})"
    mismatches = [
        f"scenario {o.index}: {o.loader_mismatch}" for o in result.outcomes if o.loader_mismatch
    ]
    assert not mismatches, "\n".join(mismatches)
    # The generator covers the verdicts it is meant to compare.
    verdicts = {o.verdict for o in result.outcomes}
    assert {"refuse", "colocate"} <= verdicts
