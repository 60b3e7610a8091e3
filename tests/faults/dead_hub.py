"""A hub in a process of its own, for the fault test that kills it with SIGKILL mid-spawn.

    PYTHONPATH=tests python tests/faults/dead_hub.py KUBECONFIG NAMESPACE

It reads one JSON command a line on stdin, ``{"spawn": [user, server, traits]}``, and starts
that spawn at once (ColocatingKubeSpawners as ``Hub.make`` builds them, through the fault proxy
whose ``KUBECONFIG`` it is given); it writes one JSON line on stdout per fact:
``{"ready": true}`` once it reads commands, ``{"started": [user, server]}`` and
``{"failed": [user, server, error]}`` as spawns end. It never exits by itself: the test kills it
(``kill -9``: no ``stop()``, no ``finally``, no late-pod sweep, every class-level cache, lock
and view gone with the process), as a hub's pod is killed by an OOM or a node that goes away.

Test scaffolding, not part of the library.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

#: the traits every spawner of this hub gets (``Hub.make``'s, with a start that waits long
#: enough for the kill to find it pending)
TRAITS = {
    "colocation_check_timeout": 1.0,
    "k8s_api_request_timeout": 3,
    "k8s_api_request_retry_timeout": 8,
    "start_timeout": 300,
}


def say(**fact) -> None:
    print(json.dumps(fact), flush=True)


async def spawn(spawner, user: str, server: str) -> None:
    try:
        await spawner.start()
    except Exception as exc:
        say(failed=[user, server, repr(exc)])
    else:
        say(started=[user, server])


async def main(kubeconfig: str, namespace: str) -> None:
    from kubernetes_asyncio import config
    from kubernetes_asyncio.config import kube_config

    from nebari_colocate.spawner import ColocatingKubeSpawner
    from tests.support.spawning import make_spawner

    # KubeSpawner's shared client reads the default kubeconfig: point it at the proxy.
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = kubeconfig
    await config.load_kube_config(config_file=kubeconfig)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks = set()
    say(ready=True)
    while line := await reader.readline():
        user, server, traits = json.loads(line)["spawn"]
        spawner = make_spawner(
            ColocatingKubeSpawner, namespace, user, server, **{**TRAITS, **traits}
        )
        task = asyncio.ensure_future(spawn(spawner, user, server))
        tasks.add(task)  # the loop keeps only weak references
    await asyncio.Event().wait()  # stdin closed: wait for the kill


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
