"""The Kubernetes API failing a spawn: KubeSpawner's raw client exceptions become words.

``faults.api_fault`` names the fault of an exception KubeSpawner lets through; the words are
``messages.api_fault_message`` (escaped in ``api_fault_html``).  The fault suite (tests/faults)
provokes each of them on a real control plane.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from nebari_colocate import faults, messages
from nebari_colocate.faults import api_fault
from nebari_colocate.jupyterhub import ColocationRefused


def _connector_error() -> aiohttp.ClientConnectorError:
    from aiohttp.client_reqrep import ConnectionKey

    key = ConnectionKey("127.0.0.1", 6443, True, True, None, None, None)
    return aiohttp.ClientConnectorError(key, OSError(111, "Connection refused"))


@pytest.mark.parametrize(
    "test_variation_id, exc, expect",
    [
        ("apiserver-restarting", _connector_error(), "unreachable"),
        ("connection-dropped", aiohttp.ServerDisconnectedError(), "unreachable"),
        ("frozen-pvc-create", TimeoutError("Could not create PVC claim-alice"), "timeout"),
        ("frozen-pod-create", TimeoutError("Could not create pod dev/jupyter-alice"), "timeout"),
        ("request-timeout", asyncio.TimeoutError(), "timeout"),
        ("throttled", ApiException(status=429, reason="Too Many Requests"), "overloaded"),
        (
            "internal-error",
            ApiException(status=500, reason="Internal Server Error"),
            "server-error",
        ),
        ("unavailable", ApiException(status=503, reason="Service Unavailable"), "server-error"),
        ("forbidden", ApiException(status=403, reason="Forbidden"), "rejected"),
        (
            "start-timeout-is-not-an-api-fault",
            TimeoutError("pod x did not start in 300 seconds!"),
            None,
        ),
        ("a-bug-is-not-an-api-fault", KeyError("spec"), None),
        ("a-refusal-is-not-an-api-fault", ColocationRefused("no", "<b>no</b>", "log"), None),
        (
            "a-fault-named-before-is-not-named-again",
            faults.KubernetesApiFault("m", "h", "log", faults.TIMEOUT),
            None,
        ),
    ],
)
def test_kubespawners_raw_client_exceptions_are_named(test_variation_id, exc, expect):
    found = api_fault(exc)
    assert (found[0] if found else None) == expect


@pytest.mark.parametrize("fault", sorted(messages.API_FAULTS))
def test_every_fault_has_words_and_escaped_html(fault):
    text = messages.api_fault_message(fault, server_name="<b>app</b>", detail="HTTP 403 Forbidden")
    assert text.startswith("Your server '<b>app</b>' could not start: the cluster")
    assert "try again" in text or "administrator" in text
    html = messages.api_fault_html(fault, server_name="<b>app</b>", detail="x")
    assert "<b>app</b>" not in html and "&lt;b&gt;app&lt;/b&gt;" in html


def test_every_fault_code_has_words():
    assert sorted(messages.API_FAULTS) == sorted(faults.FAULT_CODES)


def test_the_operator_line_names_the_fault_and_the_client_exception_on_one_line():
    line = messages.api_fault_operator_line(
        faults.TIMEOUT,
        TimeoutError("Could not create\nPVC claim-alice"),
        username="alice",
        server_name="app",
        pod_name="jupyter-alice--app",
    )
    assert line == (
        "colocate api-fault=timeout user='alice' server='app' pod=jupyter-alice--app "
        "error=TimeoutError: Could not create PVC claim-alice"
    )
