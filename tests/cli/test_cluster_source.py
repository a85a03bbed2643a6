"""One cluster source for ``review`` and ``simulate``, named in the first line of both: the built-in
cluster, ``--cluster FILE``, the input's own Nodes, or ``--kubeconfig`` (a live cluster read
read-only: the API double over HTTPS, and a real kube-apiserver)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apidouble_support.http.server import serve_double
from tests.real_cluster import real_cluster
from vgpu_guard.apidouble.store import Store
from vgpu_guard.cli.app import run
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.resources import CRDS, NODES, PODGROUPS, QUEUES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QUEUES_FILE = str(EXAMPLES / "queue-guarantees" / "queues.yaml")
CLUSTER_FILE = str(EXAMPLES / "queue-guarantees" / "cluster.yaml")
VOLCANO_CRDS = ROOT / "vgpu_guard" / "data" / "crds" / "volcano"
BUILTIN = (
    "built-in example cluster (the {what} brings no Nodes; --cluster FILE or --kubeconfig PATH for yours)"
)


def denial(capacity: str, nodes: int, room: str, guaranteed: str = "68") -> str:
    return (
        f"[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed cpu to {guaranteed} "
        f"but cluster capacity is {capacity} ({nodes} Ready nodes); lower it to at most {room} or add nodes"
    )


def out_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = run([*args, "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


def first_line(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    run(list(args))
    return capsys.readouterr().out.splitlines()[0]


def verdicts(simulated: dict[str, Any]) -> list[tuple[str, bool, str]]:
    return [(a["name"], a["allowed"], a["message"]) for a in simulated["admission"]]


def reviewed(report: dict[str, Any]) -> list[tuple[str, bool, str]]:
    return [(o["name"], o["allowed"], o["message"]) for o in report["objects"]]


# --- files ------------------------------------------------------------------------------------------


def test_a_file_without_nodes_is_judged_against_the_built_in_cluster_by_both(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert first_line(capsys, "simulate", "-f", QUEUES_FILE) == (
        f"vgpu-guard simulate: {QUEUES_FILE} on {BUILTIN.format(what='scenario')}"
    )
    assert first_line(capsys, "review", "-f", QUEUES_FILE) == (
        f"Reviewed 4 object(s) against {BUILTIN.format(what='input')}."
    )
    _, simulated = out_json(capsys, "simulate", "-f", QUEUES_FILE)
    _, review = out_json(capsys, "review", "-f", QUEUES_FILE)
    assert review["cluster"] == BUILTIN.format(what="input")
    assert verdicts(simulated) == reviewed(review)
    # The old simulate ran a file without Nodes on no cluster at all: "ask for at most 0".
    assert "at most 0" not in json.dumps(simulated)


def test_cluster_file_is_the_same_cluster_for_both(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("-f", QUEUES_FILE, "--cluster", CLUSTER_FILE)
    assert first_line(capsys, "simulate", *args) == (
        f"vgpu-guard simulate: {QUEUES_FILE} on cluster file {CLUSTER_FILE}"
    )
    assert first_line(capsys, "review", *args) == f"Reviewed 4 object(s) against cluster file {CLUSTER_FILE}."
    _, simulated = out_json(capsys, "simulate", *args)
    _, review = out_json(capsys, "review", *args)
    assert verdicts(simulated) == reviewed(review)
    assert verdicts(simulated)[3] == ("batch", False, denial("64", 8, "32"))


def test_a_files_own_nodes_are_the_cluster_for_both(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The old review judged a file's queues against the built-in cluster even when the file
    # described its own (simulate used the file's): the same file, two verdicts.
    both = tmp_path / "both.yaml"
    both.write_text(Path(CLUSTER_FILE).read_text() + "---\n" + Path(QUEUES_FILE).read_text())
    assert first_line(capsys, "simulate", "-f", str(both)) == (
        f"vgpu-guard simulate: {both} on the scenario's own Nodes (8)"
    )
    assert first_line(capsys, "review", "-f", str(both)) == (
        "Reviewed 4 object(s) against the input's own Nodes (8)."
    )
    _, simulated = out_json(capsys, "simulate", "-f", str(both))
    code, review = out_json(capsys, "review", "-f", str(both))
    assert code == 1
    queues = [r for r in reviewed(review) if r[0] in ("training", "inference", "notebooks", "batch")]
    assert verdicts(simulated) == queues
    assert queues[3] == ("batch", False, denial("64", 8, "32"))


def test_cluster_and_kubeconfig_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(["review", "-f", QUEUES_FILE, "--cluster", CLUSTER_FILE, "--kubeconfig", "k"])
    assert exit_.value.code == 2
    assert "argument --kubeconfig: not allowed with argument --cluster" in capsys.readouterr().err


# --- a live cluster: the API double over HTTPS ----------------------------------------------------------


def _live_store() -> Store:
    """The example's 64 cpu, plus a queue already guaranteeing 20 cpu and a PodGroup."""
    store = Store(seed=3)
    for name in ("scheduling.volcano.sh_queues.yaml", "scheduling.volcano.sh_podgroups.yaml"):
        store.create(CRDS, yaml.safe_load((VOLCANO_CRDS / name).read_text()))
    for node in yaml.safe_load_all(Path(CLUSTER_FILE).read_text()):
        store.create(NODES, node)
    store.create(
        QUEUES,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"weight": 1, "guarantee": {"resource": {"cpu": "20"}}, "deserved": {"cpu": "20"}},
        },
    )
    store.create(
        PODGROUPS,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"minMember": 2, "queue": "research"},
        },
        namespace="default",
    )
    return store


async def test_kubeconfig_reads_the_live_clusters_nodes_and_queues_read_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = _live_store()
    async with serve_double(tmp_path, store=store) as api:
        kubeconfig = str(api.kubeconfig)
        context = yaml.safe_load(api.kubeconfig.read_text())["current-context"]
        before = store.list(QUEUES).resource_version
        # The CLI runs its own event loop: in a thread, while this loop serves the double.
        code = await asyncio.to_thread(run, ["review", "-f", QUEUES_FILE, "--kubeconfig", kubeconfig])
        review_text = capsys.readouterr().out
        await asyncio.to_thread(run, ["simulate", "-f", QUEUES_FILE, "--kubeconfig", kubeconfig])
        simulate_first = capsys.readouterr().out.splitlines()[0]
        await asyncio.to_thread(
            run,
            ["simulate", "-f", QUEUES_FILE, "--kubeconfig", kubeconfig, "--context", context, "-o", "json"],
        )
        simulated = json.loads(capsys.readouterr().out)
        assert [q["metadata"]["name"] for q in store.list(QUEUES).items] == ["research"]
        assert store.list(QUEUES).resource_version == before
    live = (
        f"live cluster of kubeconfig {kubeconfig}, context {context} "
        "(read-only: 8 Nodes, 1 Queue, 1 PodGroup, no HyperNode API)"
    )
    assert code == 1
    # research's 20 cpu are guaranteed already: batch is judged against what is left of the 64.
    assert review_text.splitlines() == [
        f"Reviewed 4 object(s) against {live}.",
        "",
        f"allowed Queue training  [{QUEUES_FILE}#1]",
        f"allowed Queue inference  [{QUEUES_FILE}#2]",
        f"allowed Queue notebooks  [{QUEUES_FILE}#3]",
        f"DENIED  Queue batch  [{QUEUES_FILE}#4]",
        f"    {denial('64', 8, '12', guaranteed='88')}",
        "",
        "3 allowed, 1 denied.",
    ]
    assert simulate_first == f"vgpu-guard simulate: {QUEUES_FILE} on {live}"
    assert verdicts(simulated)[3] == ("batch", False, denial("64", 8, "12", guaranteed="88"))
    assert [q["name"] for q in simulated["queues"]] == ["inference", "notebooks", "research", "training"]


def test_a_broken_kubeconfig_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\ncontexts: []\n")
    for command in ("review", "simulate"):
        assert run([command, "-f", QUEUES_FILE, "--kubeconfig", str(path)]) == 2
        assert capsys.readouterr().err == (
            f"error: kubeconfig {path} (--kubeconfig): key current-context is missing or empty; "
            f"run `kubectl config use-context NAME --kubeconfig {path}`\n"
        )


def test_a_missing_kubeconfig_or_context_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope"
    # The client library would print "Config not found: ..." and then raise another error.
    assert run(["review", "-f", QUEUES_FILE, "--kubeconfig", str(missing), "--context", "x"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (
        f"error: kubeconfig {missing} (--kubeconfig): no such file; pass the path of a kubeconfig, "
        "e.g. ~/.kube/config\n"
    )
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
    )
    assert run(["simulate", "-f", QUEUES_FILE, "--kubeconfig", str(path), "--context", "prod"]) == 2
    assert capsys.readouterr().err == (
        f"error: kubeconfig {path} (--kubeconfig): --context 'prod' names no entry of contexts; "
        f"run `kubectl config get-contexts --kubeconfig {path}` and pass one of them\n"
    )


async def test_an_unreachable_cluster_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    async with serve_double(tmp_path) as api:
        kubeconfig = str(api.kubeconfig)
    # The double is gone: the kubeconfig points at a closed port.
    code = await asyncio.to_thread(run, ["review", "-f", QUEUES_FILE, "--kubeconfig", kubeconfig])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: kubeconfig {kubeconfig}, context ") and len(err.splitlines()) == 1
    assert ": cannot read the cluster: " in err


# --- a live cluster: a real kube-apiserver ------------------------------------------------------------


def test_kubeconfig_of_a_real_api_server(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with real_cluster(tmp_path) as cluster:
        node = next(yaml.safe_load_all(Path(CLUSTER_FILE).read_text()))
        node["metadata"]["name"] = "cli-review-0"
        node["status"]["allocatable"].update(cpu="64", memory="256Gi")

        async def add_node() -> None:
            client = await AioClusterClient.from_kubeconfig(str(cluster.kubeconfig))
            try:
                await client.create(NODES, node)
            finally:
                await client.close()

        asyncio.run(add_node())
        try:
            code = run(["review", "-f", QUEUES_FILE, "--kubeconfig", str(cluster.kubeconfig), "-o", "json"])
            report = json.loads(capsys.readouterr().out)
            # The live Node as the server returns it (managedFields, nodeInfo...) runs in simulate too.
            simulated_code = run(
                ["simulate", "-f", QUEUES_FILE, "--kubeconfig", str(cluster.kubeconfig), "-o", "json"]
            )
            simulated = json.loads(capsys.readouterr().out)
        finally:

            async def remove_node() -> None:
                client = await AioClusterClient.from_kubeconfig(str(cluster.kubeconfig))
                try:
                    await client.delete(NODES, "cli-review-0")
                finally:
                    await client.close()

            asyncio.run(remove_node())
    assert code == 1
    # A control plane without kubelets or Volcano: the one Node we made, no Queue API at all.
    assert report["cluster"].startswith(f"live cluster of kubeconfig {cluster.kubeconfig}, context ")
    assert report["cluster"].endswith("(read-only: 1 Node, no Queue API, no PodGroup API, no HyperNode API)")
    assert simulated_code == 0 and simulated["scenario"] == f"{QUEUES_FILE} on {report['cluster']}"
    assert verdicts(simulated) == reviewed(report)
    assert reviewed(report) == [
        ("training", True, ""),
        ("inference", True, ""),
        ("notebooks", True, ""),
        ("batch", False, denial("64", 1, "32").replace("1 Ready nodes", "1 Ready node")),
    ]


@pytest.mark.parametrize("command", ["review", "simulate"])
def test_a_context_without_a_kubeconfig_is_refused_not_ignored(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Reviewed against the built-in cluster instead of the one named, it read as a pass."""
    assert run([command, "-f", str(ROOT / "examples" / "denials" / "pods.yaml"), "--context", "prod"]) == 2
    assert (
        capsys.readouterr().err == "error: --context prod names a kubeconfig context: add --kubeconfig PATH\n"
    )
