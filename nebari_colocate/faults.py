"""The Kubernetes API failing a spawn: which client exceptions are API faults, and the exception
the hub shows instead of them.

KubeSpawner lets the API client's exceptions through raw (``aiohttp.ClientConnectorError``,
``Could not create PVC ...``); the spawner names the fault with :func:`api_fault` and raises
:class:`KubernetesApiFault`, whose words are :func:`nebari_colocate.messages.api_fault_message`'s.
See docs/troubleshooting.md.
"""

from __future__ import annotations

import asyncio

UNREACHABLE = "unreachable"  # no connection (the API server may be restarting)
OVERLOADED = "overloaded"  # HTTP 429: asked to retry later
SERVER_ERROR = "server-error"  # HTTP 5xx
TIMEOUT = "timeout"  # no answer in time
REJECTED = "rejected"  # any other HTTP error: retrying will not help
#: every fault code, as ``nebari_colocate_api_faults_total`` labels them
FAULT_CODES = (UNREACHABLE, OVERLOADED, SERVER_ERROR, TIMEOUT, REJECTED)


class KubernetesApiFault(RuntimeError):
    """A spawn the Kubernetes API failed (unreachable, overloaded, erroring, too slow), in words.

    JupyterHub shows ``jupyterhub_message`` / ``jupyterhub_html_message`` instead of the raw client
    exception; ``fault`` is the code (:data:`FAULT_CODES`), ``log_message`` the operator line.  The
    original exception is its ``__cause__`` (and in the hub log).
    """

    def __init__(self, message: str, html: str, log_message: str, fault: str):
        super().__init__(message)
        self.jupyterhub_message = message
        self.jupyterhub_html_message = html
        self.log_message = log_message
        self.fault = fault


def connection_failed(exc: BaseException) -> bool:
    """No connection to the API server, or it dropped (a restart): worth trying again within
    ``k8s_api_request_retry_timeout``.  A create cut mid-way may have been carried out; trying
    again answers 409, which KubeSpawner already handles."""
    import aiohttp

    return isinstance(exc, (aiohttp.ClientConnectionError, ConnectionError)) and not isinstance(
        exc, asyncio.TimeoutError
    )


def api_fault(exc: BaseException) -> tuple[str, str] | None:
    """(fault code, detail) when ``exc`` is the Kubernetes API failing a spawn, else None.

    KubeSpawner lets these through raw: aiohttp's connection errors while the API server
    restarts, ``ApiException`` for 429 and 5xx answers, and exponential_backoff's
    ``TimeoutError("Could not create PVC ...")`` / ``("Could not create pod ...")`` when the API
    server stops answering (even when the PVC exists).  Its own ``pod ... did not start in N
    seconds!`` (``start_timeout``) is not an API fault, nor is an exception that already carries
    words for the hub (a refusal, a fault named before).
    """
    import aiohttp
    from kubernetes_asyncio.client.exceptions import ApiException

    if hasattr(exc, "jupyterhub_message"):
        return None
    if isinstance(exc, ApiException):
        status = exc.status or 0
        if status == 429:
            return OVERLOADED, "HTTP 429"
        if status >= 500:
            return SERVER_ERROR, f"HTTP {status}"
        if status == 0:
            return UNREACHABLE, str(exc.reason or "no answer")
        return REJECTED, f"HTTP {status} {exc.reason or ''}".strip()
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        if "did not start in" in str(exc):
            return None
        return TIMEOUT, str(exc)
    if isinstance(exc, (aiohttp.ClientError, ConnectionError)):
        return UNREACHABLE, f"{type(exc).__name__}: {exc}"
    return None
