"""KubeSpawner's pod reflector on the live view's watch (nebari_colocate.shared_reflector): which
pods its mapping selects, how it follows the watch's changes, and that what the view keeps of a
pod answers KubeSpawner's own readers as the whole pod does.  Plain dicts, no cluster.

(The reflector with real spawners runs in tests/cluster/test_shared_reflector_cluster.py.)
"""

from __future__ import annotations

import asyncio
import copy

import pytest
from kubespawner import KubeSpawner

from nebari_colocate.informer import Collection
from nebari_colocate.shared_reflector import PodSelection, older, reflector_fields_ok, selects
from nebari_colocate.slim import Shared, slim_pod
from tests.support.builders import pod

SERVER = {"component": "singleuser-server"}


def labelled(name: str, namespace: str = "jhub", **labels: str) -> dict:
    p = pod(name, namespace=namespace)
    p["metadata"]["labels"] = dict(labels)
    return p


SRV = "singleuser-server"


@pytest.mark.parametrize(
    "name, obj, namespace, labels, expected",
    [
        ("a server pod of the namespace", labelled("a", component=SRV), "jhub", SERVER, True),
        ("another component", labelled("a", component="hub"), "jhub", SERVER, False),
        ("no labels", labelled("a"), "jhub", SERVER, False),
        ("another namespace", labelled("a", "other", component=SRV), "jhub", SERVER, False),
        ("every namespace", labelled("a", "other", component=SRV), None, SERVER, True),
        ("extra labels do not matter", labelled("a", component=SRV, app="x"), "jhub", SERVER, True),
        ("all its labels", labelled("a", component=SRV), "jhub", {**SERVER, "app": "x"}, False),
        ("an empty selector selects all", labelled("a"), "jhub", {}, True),
        ("a pod with no metadata", {}, "jhub", SERVER, False),
    ],
)
def test_the_reflector_selects_what_kubespawners_label_selector_selects(
    name, obj, namespace, labels, expected
):
    assert selects(obj, namespace, labels) is expected, name


def test_the_selection_follows_added_modified_and_deleted_pods_of_the_store():
    selection = PodSelection("jhub", SERVER)
    store = Collection("pods", method=None, transform=slim_pod, on_change=selection.change)
    server = labelled("jupyter-alice", component="singleuser-server")
    store._event({"type": "ADDED", "object": labelled("backup")})
    store._event({"type": "ADDED", "object": server})
    assert list(selection) == ["jhub/jupyter-alice"]
    assert "jhub/backup" not in selection and selection.get("jhub/backup") is None

    running = copy.deepcopy(server)
    running["status"] = {"phase": "Running", "podIP": "127.0.0.9"}
    store._event({"type": "MODIFIED", "object": running})
    assert selection["jhub/jupyter-alice"]["status"]["podIP"] == "127.0.0.9"
    assert len(selection) == 1

    relabelled = copy.deepcopy(running)
    relabelled["metadata"]["labels"] = {"component": "other"}
    store._event({"type": "MODIFIED", "object": relabelled})
    assert len(selection) == 0
    store._event({"type": "MODIFIED", "object": running})
    store._event({"type": "DELETED", "object": running})
    assert dict(selection) == {}


def test_a_relist_replaces_the_selection_and_keeps_a_pod_present_in_both_lists():
    selection = PodSelection(None, SERVER)
    store = Collection("pods", method=None, transform=slim_pod, on_change=selection.change)
    a = labelled("a", component="singleuser-server")
    b = labelled("b", "other", component="singleuser-server")
    store._replace_all([a, b])
    assert sorted(selection) == ["jhub/a", "other/b"]
    store._replace_all([b, labelled("c", component="singleuser-server")])
    assert sorted(selection) == ["jhub/c", "other/b"]


async def test_a_relist_gives_the_loop_turns_and_never_drops_a_pod_in_both_lists():
    selection = PodSelection("jhub", SERVER)
    store = Collection("pods", method=None, transform=slim_pod, on_change=selection.change)
    keep = labelled("jupyter-alice", component=SRV)
    store._replace_all([keep, *(labelled(f"old-{i}", component=SRV) for i in range(500))])
    fresh = [labelled(f"new-{i}", component=SRV) for i in range(1000)] + [keep]
    turns, missing = 0, 0
    relisting = asyncio.ensure_future(store._replace_gradually([slim_pod(p) for p in fresh]))
    while not relisting.done():
        turns += 1
        missing += "jhub/jupyter-alice" not in selection
        await asyncio.sleep(0)
    await relisting
    assert turns > 10 and missing == 0
    assert sorted(selection) == sorted(f"jhub/{p['metadata']['name']}" for p in fresh)
    assert store.items.keys() == selection.keys()


def versioned(name: str, version: str | None, phase: str = "Pending", **labels: str) -> dict:
    p = labelled(name, **(labels or {"component": SRV}))
    if version is not None:
        p["metadata"]["resourceVersion"] = version
    p["status"] = {"phase": phase}
    return p


@pytest.mark.parametrize(
    "mine, theirs, expected",
    [
        ("5", "7", True),
        ("7", "5", False),
        ("7", "7", False),
        ("9", "10", True),  # numbers, not strings: "9" > "10" as text
        ("abc", "7", False),  # not etcd's: unknown, so not older
        (None, "7", False),
        ("7", None, False),
        ("", "7", False),
    ],
)
def test_an_older_version_is_a_smaller_whole_resource_version(mine, theirs, expected):
    assert older(versioned("a", mine), versioned("a", theirs)) is expected


@pytest.mark.parametrize(
    "name, steps, expected",
    [
        # each step: ("watch", old, new) as the store's change, or ("read", pod or None)
        (
            "a read of a pod the quiet watch never showed adds it",
            [("read", versioned("a", "5", "Running"))],
            "Running",
        ),
        (
            "the watch catching up with an older version does not undo the read",
            [
                ("read", versioned("a", "7", "Running")),
                ("watch", None, versioned("a", "5", "Pending")),
            ],
            "Running",
        ),
        (
            "the watch's newer version wins over the read",
            [
                ("read", versioned("a", "7", "Running")),
                ("watch", None, versioned("a", "9", "Succeeded")),
            ],
            "Succeeded",
        ),
        (
            "a read older than what the watch gave is ignored",
            [
                ("watch", None, versioned("a", "9", "Running")),
                ("read", versioned("a", "7", "Pending")),
            ],
            "Running",
        ),
        (
            "a read answering 404 drops the pod",
            [("watch", None, versioned("a", "9", "Running")), ("read", None)],
            None,
        ),
        (
            "a read of a pod relabelled out of the selection drops it",
            [
                ("watch", None, versioned("a", "9", "Running")),
                ("read", versioned("a", "11", "Running", component="other")),
            ],
            None,
        ),
        (
            "the watch's delete after a read removes the pod",
            [
                ("read", versioned("a", "7", "Running")),
                ("watch", versioned("a", "7", "Running"), None),
            ],
            None,
        ),
        (
            "versions that are not numbers: the latest answer wins",
            [
                ("read", versioned("a", "x", "Running")),
                ("watch", None, versioned("a", "y", "Pending")),
            ],
            "Pending",
        ),
    ],
)
def test_reads_by_name_and_watch_changes_keep_the_newest_version(name, steps, expected):
    selection = PodSelection("jhub", SERVER)
    for step in steps:
        if step[0] == "read":
            selection.read("jhub/a", step[1])
        else:
            selection.change(step[1], step[2])
    got = selection.get("jhub/a")
    assert (None if got is None else got["status"]["phase"]) == expected, name


def running(pod: dict | None) -> bool:
    return pod is not None and pod["status"]["phase"] == "Running"


def gone(pod: dict | None) -> bool:
    return pod is None


@pytest.mark.parametrize(
    "name, before, steps, done, woken",
    [
        (
            "already so: set at once",
            versioned("a", "5", "Running"),
            [],
            running,
            True,
        ),
        (
            "woken by the watch's change of that pod",
            versioned("a", "5", "Pending"),
            [("watch", "a", "6", "Running")],
            running,
            True,
        ),
        (
            "woken by a read by name (a quiet watch)",
            versioned("a", "5", "Pending"),
            [("read", "a", "6", "Running")],
            running,
            True,
        ),
        (
            "another pod's change does not wake it",
            versioned("a", "5", "Pending"),
            [("watch", "b", "6", "Running")],
            running,
            False,
        ),
        (
            "a change that is not yet so leaves it waiting",
            versioned("a", "5", "Pending"),
            [("watch", "a", "6", "Pending")],
            running,
            False,
        ),
        (
            "an older version the watch catches up with does not wake it",
            versioned("a", "7", "Pending"),
            [("watch", "a", "6", "Running")],
            running,
            False,
        ),
        (
            "the pod's deletion wakes a wait for it gone",
            versioned("a", "5", "Running"),
            [("delete", "a", "5", "Running")],
            gone,
            True,
        ),
        (
            "a read answering 404 wakes a wait for it gone",
            versioned("a", "5", "Running"),
            [("read", "a", None, None)],
            gone,
            True,
        ),
        (
            "a pod not there yet is not gone-and-done for a wait for it running",
            None,
            [("watch", "a", "3", "Pending"), ("watch", "a", "4", "Running")],
            running,
            True,
        ),
    ],
)
async def test_a_wait_on_one_pod_is_woken_by_that_pods_changes_only(
    name, before, steps, done, woken
):
    selection = PodSelection("jhub", SERVER)
    if before is not None:
        selection.change(None, before)
    future = selection.until("jhub/a", done)
    for kind, pod_name, version, phase in steps:
        have = selection.get(f"jhub/{pod_name}")
        if kind == "read":
            new = None if version is None else versioned(pod_name, version, phase)
            selection.read(f"jhub/{pod_name}", new)
        elif kind == "delete":
            selection.change(have, None)
        else:
            selection.change(have, versioned(pod_name, version, phase))
    assert future.done() is woken, name
    if woken:
        assert future.result() is True, name
    if not woken:
        future.cancel()
    await asyncio.sleep(0)  # (a future's done callbacks run on the loop's next turn)
    assert selection._waiters == {}, "a wait that ended leaves nothing behind"


async def test_a_wait_cancelled_or_ended_by_wake_all_leaves_no_waiter():
    selection = PodSelection("jhub", SERVER)
    selection.change(None, versioned("a", "5", "Pending"))
    first = selection.until("jhub/a", running)
    second = selection.until("jhub/a", gone)
    third = selection.until("jhub/b", running)
    assert not first.done() and not second.done() and not third.done()
    first.cancel()
    await asyncio.sleep(0)
    assert set(selection._waiters) == {"jhub/a", "jhub/b"}
    assert len(selection._waiters["jhub/a"]) == 1
    selection.wake_all()
    await asyncio.sleep(0)
    assert second.done() and third.done() and selection._waiters == {}
    assert (second.result(), third.result()) == (False, False), "ended, not met"


async def test_a_waiters_own_error_ends_its_wait_not_the_watch():
    selection = PodSelection("jhub", SERVER)

    def broken(pod):
        if pod is not None:
            raise KeyError("status")
        return False

    future = selection.until("jhub/a", broken)
    calm = selection.until("jhub/a", running)
    selection.change(None, versioned("a", "5", "Running"))  # no exception out of the watch
    assert isinstance(future.exception(), KeyError)
    assert calm.done() and calm.exception() is None


@pytest.mark.parametrize(
    "namespace, key, expected",
    [("jhub", "jhub/a", True), ("jhub", "other/a", False), (None, "other/a", True)],
)
def test_a_selection_reads_by_name_only_the_pods_of_its_namespace(namespace, key, expected):
    assert PodSelection(namespace, SERVER).selects_key(key) is expected


def test_the_selection_is_read_only():
    selection = PodSelection("jhub", SERVER)
    selection.fill([labelled("a", component="singleuser-server")])
    with pytest.raises(TypeError):
        selection["jhub/a"] = {}  # type: ignore[index]
    assert not hasattr(selection, "pop")


def server_pod(phase: str, *, deleting: bool = False, **status) -> dict:
    p = pod("jupyter-alice", namespace="jhub", phase=phase, deleting=deleting)
    p["metadata"].update(uid="0b5c-uid", labels=dict(SERVER), managedFields=[{"m": 1}])
    p["spec"]["containers"][0]["ports"] = [{"containerPort": 8888, "name": "notebook-port"}]
    p["status"].update(status)
    p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return p


def notebook(**state) -> dict:
    return {"name": "notebook", "ready": "running" in state, "state": state, "restartCount": 0}


STARTED = {"startedAt": "2026-01-01T00:00:00Z"}
IP = "127.0.0.5"
UP = notebook(running=STARTED)
EXITED = notebook(terminated={"exitCode": 3, "reason": "Error", **STARTED})
PROXY = {"name": "proxy", "ready": True, "state": {"running": STARTED}}
KUBESPAWNER_READS = [
    ("pending", server_pod("Pending")),
    ("running", server_pod("Running", podIP=IP, containerStatuses=[UP])),
    ("being deleted", server_pod("Running", deleting=True, podIP=IP, containerStatuses=[UP])),
    ("not ready", server_pod("Running", podIP=IP, containerStatuses=[{**UP, "ready": False}])),
    ("no IP yet", server_pod("Running", podIP=None, containerStatuses=[UP])),
    ("exited 3", server_pod("Running", podIP=IP, containerStatuses=[EXITED])),
    ("waiting", server_pod("Pending", containerStatuses=[notebook(waiting={"reason": "Pull"})])),
    ("culled: no container statuses", server_pod("Running", podIP=IP)),
    ("a sidecar too", server_pod("Running", podIP=IP, containerStatuses=[UP, PROXY])),
]


def poll_answer(p: dict):
    """What KubeSpawner.poll() answers from a reflector's pod (its own reading, line by line
    of kubespawner 7.0 / 7.1), before it looks at the URL."""
    if p["status"]["phase"] == "Pending":
        return None
    statuses = p["status"].get("containerStatuses")
    if statuses is None:
        return 1
    for c in statuses:
        if c["name"] == "notebook":
            if "terminated" in c["state"]:
                return c["state"]["terminated"]["exitCode"]
            break
    return None


@pytest.mark.parametrize("name, full", KUBESPAWNER_READS)
def test_kubespawner_reads_the_same_of_a_slim_pod_as_of_the_whole_pod(name, full):
    slim = slim_pod(full, Shared())

    def running(p):
        try:
            return KubeSpawner.is_pod_running(None, p)
        except (KeyError, TypeError) as exc:  # KubeSpawner's own reading may fail so; the same
            return type(exc)

    assert running(slim) == running(full), name
    if hasattr(KubeSpawner, "_get_pod_port"):  # kubespawner >= 7.1 builds the URL from it
        assert KubeSpawner._get_pod_port(None, slim) == 8888
    assert poll_answer(slim) == poll_answer(full), name
    assert KubeSpawner.pod_has_uid(None, slim) and slim["metadata"]["uid"] == "0b5c-uid"
    assert slim["metadata"].get("deletionTimestamp") == full["metadata"].get("deletionTimestamp")
    assert slim["status"].get("podIP") == full["status"].get("podIP")
    assert "podIP" in slim["status"] or "podIP" not in full["status"]


def test_equal_container_statuses_of_many_servers_are_kept_once():
    shared = Shared()
    servers = [server_pod("Running", podIP=f"127.0.0.{i}", containerStatuses=[UP]) for i in (1, 2)]
    pods = [slim_pod(p, shared) for p in servers]
    assert len({id(p["status"]["containerStatuses"]) for p in pods}) == 1
    assert len({p["status"]["podIP"] for p in pods}) == 2


@pytest.mark.parametrize(
    "traits, shareable",
    [
        ({}, True),
        ({"internal_ssl": True}, False),
        ({"services_enabled": True}, False),
        ({"after_pod_created_hook": lambda spawner, pod: None}, False),
        ({"get_pod_url": lambda spawner, pod: "http://x"}, False),
    ],
)
def test_the_watch_is_shared_only_when_kubespawner_reads_nothing_the_view_drops(traits, shareable):
    class Spawner:
        internal_ssl = services_enabled = False
        after_pod_created_hook = get_pod_url = None

    spawner = Spawner()
    for name, value in traits.items():
        setattr(spawner, name, value)
    assert reflector_fields_ok(spawner) is shareable


@pytest.mark.parametrize(
    "name, listed, kept_again",
    [
        ("the same version: the object kept already", {"resourceVersion": "7", "uid": "u1"}, True),
        ("a newer version: a new object", {"resourceVersion": "8", "uid": "u1"}, False),
        ("a new pod under the name: a new object", {"resourceVersion": "7", "uid": "u2"}, False),
        ("no version: a new object", {"uid": "u1"}, False),
    ],
)
def test_a_relist_keeps_the_objects_it_lists_unchanged_and_tells_no_listener(
    name, listed, kept_again
):
    """After a break a relist gives every object again: those of the version kept already are
    not kept twice (what the LIST parsed dies young: no full garbage collection of the heap)."""
    selection = PodSelection("jhub", SERVER)
    changes = []

    def on_change(old, new):
        changes.append((old, new))
        selection.change(old, new)

    store = Collection("pods", method=None, transform=slim_pod, on_change=on_change)
    kept = labelled("a", component=SRV)
    kept["metadata"].update(resourceVersion="7", uid="u1")
    store._replace_all([kept])
    before = store.items["jhub/a"]
    again = labelled("a", component=SRV)
    again["metadata"].update(listed)
    obj = store._listed(again)
    assert (obj is before) is kept_again, name
    changes.clear()
    asyncio.run(store._replace_gradually([obj]))
    assert (store.items["jhub/a"] is before) is kept_again, name
    assert (changes == []) is kept_again, name
    assert selection["jhub/a"] is store.items["jhub/a"]


@pytest.mark.parametrize("enabled_before", [True, False])
def test_the_collector_is_paused_while_lists_run_nested_and_put_back_as_it_was(enabled_before):
    import gc

    from nebari_colocate.informer import collector_paused

    was = gc.isenabled()
    (gc.enable if enabled_before else gc.disable)()
    try:
        with collector_paused():
            assert not gc.isenabled()
            with collector_paused():  # every collection lists at once after an API restart
                assert not gc.isenabled()
            assert not gc.isenabled()  # the outer LIST still runs
        assert gc.isenabled() is enabled_before
        with pytest.raises(RuntimeError), collector_paused():
            raise RuntimeError("the LIST failed")
        assert gc.isenabled() is enabled_before
    finally:
        (gc.enable if was else gc.disable)()
