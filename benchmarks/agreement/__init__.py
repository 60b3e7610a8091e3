"""Does ``decide`` predict the real kube-scheduler?  Random scenarios, one verdict each.

For each scenario (seeded, reproducible) it builds a small cluster in a real control plane
(etcd, kube-apiserver and kube-scheduler from tests/kube, loopback only, no kubelet):

- 2-5 Nodes with random labels, taints of every effect, cordons and allocatable cpu, memory,
  pods and GPUs;
- existing pods across namespaces bound by ``spec.nodeName`` (bypassing the scheduler), in every
  phase (set through the status subresource), some terminating (a finalizer keeps them);
- a user whose servers (the holders) sit on one node and mount the user's claims (RWO, RWX, ROX,
  RWOP; PVs sometimes with node affinity), sometimes a VolumeAttachment;
- a new pod with a random nodeSelector, required node affinity (every operator, several terms,
  matchFields), tolerations (incl. empty-key Exists), init containers, sidecars, overhead (from a
  RuntimeClass), limits-only resources, pod-level resources and GPUs.

It reads the objects back from the API, runs ``decide`` on them, creates the new pod with the
affinity ``apply_decision`` emits (for a refusal: the affinity it *would* carry, pinned to the node
it was refused on) and takes the scheduler's first verdict: a binding or a FailedScheduling event.

Agreement:

- refuse <-> FailedScheduling, and the scheduler's reason for the pinned node is the reason of
  the first failing filter (in kube-scheduler's plugin order) among our reason codes; for
  NodeResourcesFit, which reports every shortfall, the sets of resources are equal;
- colocate on N <-> bound to N;
- colocate unpinned, skip <-> bound to a node where ``fit.check_fit`` admits the pod (or, when it
  admits it nowhere, FailedScheduling).

A disagreement is written to ``--keep-failures DIR`` as ``state.yaml`` + ``pod.yaml`` (what
decide saw; ``nebari-colocate simulate DIR/.../state.yaml --pod DIR/.../pod.yaml --json``
reproduces the decision) with ``scheduler.txt`` (what the scheduler said).  The last line is
``agreement: A/N``; the exit status is 1 below N/N.

    python -m benchmarks.agreement --seed 1 --count 200 [--keep-failures DIR] [--concurrency 6]

The modules: :mod:`.scenarios` draws the scenarios (pure), :mod:`.judge` reads the scheduler's
verdict and compares it with the decision, :mod:`.run` drives the control plane and sums up,
``__main__`` is the command line.
"""

from __future__ import annotations

from .run import Outcome, Result, run_agreement, summary

__all__ = ["Outcome", "Result", "run_agreement", "summary"]
