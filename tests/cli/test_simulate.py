"""``vgpu-guard simulate``: the default scenario's outcomes, the JSON schema, the report, exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.builders import pod as gpu_pod
from vgpu_guard.cli.app import run
from vgpu_guard.cli.documents import read_documents
from vgpu_guard.cli.scenario import default_scenario, load_scenario
from vgpu_guard.cli.simulate_report import to_json, to_text
from vgpu_guard.cli.simulation import SimulationResult, simulate
from vgpu_guard.configfile import load_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "simulate"
SCHEMA = json.loads((ROOT / "docs" / "simulate.schema.json").read_text())

OVERCOMMIT_ALONE = "0/1 nodes are available: 8 GPUs have no free memory (12288 MiB requested)"
OVERCOMMIT_IN_DEFAULT = (
    "0/14 nodes are available: 9 nodes don't match the pod's node selector/affinity, 4 nodes have no vGPU "
    "devices, 8 GPUs have no free memory (12288 MiB requested)"
)
BATCH_DENIED = (
    "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed cpu to 68 but "
    "cluster capacity is 64 (14 Ready nodes); lower it to at most 32 or add nodes"
)


@pytest.fixture(scope="module")
def default_result() -> SimulationResult:
    return simulate(default_scenario(), load_config(env={}))


@pytest.fixture(scope="module")
def default_json(default_result: SimulationResult) -> dict[str, Any]:
    # Through json, as `-o json` prints it.
    loaded: dict[str, Any] = json.loads(json.dumps(to_json(default_result)))
    return loaded


def pods_by_name(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in out["pods"]}


# --- the default scenario's outcomes ---------------------------------------------------------------


def test_overcommit_two_replicas_share_the_free_gpu_and_the_third_waits(default_json: dict[str, Any]) -> None:
    web = [p for p in default_json["pods"] if p["name"].startswith("web-")]
    assert [p["phase"] for p in web] == ["Bound", "Bound", "Pending"]
    for pod in web[:2]:
        assert pod["node"] == "gpu-0"
        assert pod["devices"] == [{"uuid": "GPU-gpu-0-7", "memory": 12288, "cores": 0, "mig_profile": None}]
        assert pod["scheduler"] == "vgpu-guard"
    assert web[2]["reason"] == OVERCOMMIT_IN_DEFAULT
    assert web[2]["node"] is None and web[2]["devices"] == []
    busy = [p for p in default_json["pods"] if p["name"].startswith("train-")]
    assert [(p["phase"], p["scheduler"], p["existing"]) for p in busy] == [("Bound", "volcano", True)] * 7
    assert default_json["violations"] == []


def test_slices_and_the_rounded_mig_request(default_json: dict[str, Any]) -> None:
    pods = pods_by_name(default_json)
    assert (pods["hami-pod"]["node"], pods["hami-pod"]["devices"]) == (
        "t4-0",
        [{"uuid": "GPU-t4-0-0", "memory": 3000, "cores": 50, "mig_profile": None}],
    )
    assert (pods["gpu-pod"]["node"], pods["gpu-pod"]["devices"]) == (
        "t4-0",
        [{"uuid": "GPU-t4-0-0", "memory": 1000, "cores": 10, "mig_profile": None}],
    )
    # 3000 MiB fits no MIG instance: rounded to the 5 GiB profile, placed on a slot of that size.
    assert (pods["mig-pod"]["node"], pods["mig-pod"]["devices"]) == (
        "mig-0",
        [{"uuid": "GPU-mig-0-0", "memory": 5120, "cores": 0, "mig_profile": "1g.5gb"}],
    )
    mig_admission = next(a for a in default_json["admission"] if a["name"] == "mig-pod")
    assert (
        'vgpu-guard: container "cuda-container": rounded volcano.sh/vgpu-memory 3000 -> 5120 (MIG 1g.5gb)'
        in mig_admission["warnings"]
    )


def test_priority_decides_not_creation_order(default_json: dict[str, Any]) -> None:
    pods = pods_by_name(default_json)
    for i in range(3):
        high = pods[f"priority-high-test-{i}"]
        assert (high["phase"], high["node"], high["priority"]) == ("Bound", "prio-0", 100)
        assert high["devices"] == [
            {"uuid": f"GPU-prio-0-{i}", "memory": 16384, "cores": 0, "mig_profile": None}
        ]
        for job, priority in (("priority-med", 50), ("priority-low", 10)):
            waiting = pods[f"{job}-test-{i}"]
            assert (waiting["phase"], waiting["priority"]) == ("Pending", priority)
            assert waiting["reason"].startswith(
                f"gang default/{job}: only 1 of 3 members can run (minMember 3);"
            )


def test_exactly_the_typo_deployment_and_the_batch_queue_are_denied(default_json: dict[str, Any]) -> None:
    denied = [(a["kind"], a["name"], a["code"]) for a in default_json["admission"] if not a["allowed"]]
    assert denied == [
        ("Deployment", "web-typo", 403),
        ("Queue", "batch", 403),
        # The gang no IB cluster holds is refused as the Job it is applied as: no pod is made.
        ("Job", "pretrain", 403),
    ]
    by_name = {a["name"]: a for a in default_json["admission"]}
    assert by_name["batch"]["message"] == BATCH_DENIED
    assert by_name["web-typo"]["message"].startswith(
        "[vgpu-memory-unit] spec.template.spec.containers[0].resources.limits[volcano.sh/vgpu-memory]: 12Gi"
    )
    # A denied workload creates no pods; an admitted one lists the pods its controller made.
    assert not any(p["name"].startswith("web-typo") for p in default_json["pods"])
    assert by_name["web-typo"]["pods"] == []
    assert len(by_name["web"]["pods"]) == 3


def test_pods_of_workloads_are_admitted_as_their_controllers(default_json: dict[str, Any]) -> None:
    by_user = {(a["username"], a["kind"]) for a in default_json["admission"] if a["source"].endswith(")")}
    assert by_user == {
        ("system:serviceaccount:kube-system:replicaset-controller", "Pod"),
        ("system:serviceaccount:volcano-system:volcano-controllers", "Pod"),
    }
    routed = next(a for a in default_json["admission"] if a["name"] == "priority-high-test-0")
    assert {"op": "replace", "path": "/spec/schedulerName", "value": "vgpu-guard"} in routed["patch"]
    assert routed["object"]["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "priority-high"


def test_the_ledger_per_gpu(default_json: dict[str, Any]) -> None:
    rows = [
        (g["node"], g["uuid"], g["memory_used"], g["memory_total"], g["cores_used"])
        for g in default_json["gpus"]
    ]
    assert rows == [
        *[("gpu-0", f"GPU-gpu-0-{i}", 24576, 24576, 0) for i in range(8)],
        *[(f"ib-a-{i}", f"GPU-ib-a-{i}-0", 24576, 24576, 0) for i in range(4)],
        *[(f"ib-b-{i}", f"GPU-ib-b-{i}-0", 24576, 24576, 0) for i in range(2)],
        ("mig-0", "GPU-mig-0-0", 5120, 40960, 0),
        ("mig-0", "GPU-mig-0-1", 0, 40960, 0),
        *[("prio-0", f"GPU-prio-0-{i}", 16384, 24576, 0) for i in range(3)],
        ("prio-0", "GPU-prio-0-3", 0, 24576, 0),
        ("t4-0", "GPU-t4-0-0", 4000, 15360, 60),
    ]
    free_card = next(g for g in default_json["gpus"] if g["uuid"] == "GPU-gpu-0-7")
    assert len(free_card["pods"]) == 2 and all(p.startswith("default/web-") for p in free_card["pods"])
    assert next(g for g in default_json["gpus"] if g["uuid"] == "GPU-mig-0-0")["mode"] == "mig"


def test_queue_totals_against_capacity(default_json: dict[str, Any]) -> None:
    assert [q["name"] for q in default_json["queues"]] == ["inference", "notebooks", "training"]
    notebooks = next(q for q in default_json["queues"] if q["name"] == "notebooks")
    assert notebooks == {
        "name": "notebooks",
        "parent": None,
        "guarantee": {"cpu": "8", "memory": "16Gi"},
        "findings": [],
    }
    assert default_json["queue_totals"] == [
        {
            "resource": "cpu",
            "guaranteed": "32",
            "capacity": "64",
            "nodes": 14,
            "percent": 50,
            "exceeded": False,
        },
        {
            "resource": "memory",
            "guaranteed": "112Gi",
            "capacity": "432Gi",
            "nodes": 14,
            "percent": 25,
            "exceeded": False,
        },
    ]


# --- JSON, text, determinism -------------------------------------------------------------------------


def test_json_output_matches_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["simulate", "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(out)
    assert out["scheduling"]["routing"].startswith("scheduling.routing is on (simulate's default)")
    assert out["scenario"] == "built-in default scenario on the scenario's own Nodes (14)"


def test_the_schema_rejects_what_it_should(default_json: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    bound = next(p for p in default_json["pods"] if p["phase"] == "Bound")
    for broken in ({**bound, "phase": "Running"}, {**bound, "reason": "x"}, {**bound, "node": None}):
        assert not validator.is_valid({**default_json, "pods": [broken]})


def test_admission_entries_have_reviews_shape(
    capsys: pytest.CaptureFixture[str], default_json: dict[str, Any]
) -> None:
    assert run(["review", "-f", str(EXAMPLES / "mig.yaml"), "-o", "json"]) == 0
    # Less the cluster each object was judged against: review's own (simulate runs on one).
    review_keys = set(json.loads(capsys.readouterr().out)["objects"][0]) - {"cluster"}
    for entry in default_json["admission"]:
        assert review_keys <= set(entry)


def test_same_scenario_same_output(default_json: dict[str, Any]) -> None:
    again = json.loads(json.dumps(to_json(simulate(default_scenario(), load_config(env={})))))
    assert again == default_json


def test_text_report_key_lines(default_result: SimulationResult) -> None:
    text = to_text(default_result)
    lines = text.splitlines()
    assert lines[0] == "vgpu-guard simulate: built-in default scenario"  # the CLI adds its cluster
    assert "ADMISSION (33 requests, 3 denied)" in lines
    assert "PODS (28: 21 Bound, 7 Pending, 0 Rejected)" in lines
    assert f"      {OVERCOMMIT_IN_DEFAULT}" in lines
    assert (
        "  DENIED     Queue       batch                                examples/simulate/queue-guarantees.yaml#8"
        in lines
    )
    assert f"        {BATCH_DENIED}" in lines
    assert "    allowed  Pod         3 pods of Deployment default/web     by replicaset-controller" in lines
    assert (
        "  default/mig-pod                   Bound    0     vgpu-guard  mig-0   GPU-mig-0-0 MIG 1g.5gb (5120 MiB)"
        in lines
    )
    assert (
        "  t4-0    GPU-t4-0-0    Tesla T4               hami-core    4000 / 15360    60    default/gpu-pod, default/hami-pod"
        in lines
    )
    assert "  cpu       32          64 (14 nodes)     50%  ok" in lines
    assert lines[-1] == (
        "Summary: 21 pods bound, 7 pending, 0 rejected; 3 of 33 admission requests denied; no GPU overcommitted."
    )
    # Tables are aligned: every row of the pod table starts its PHASE column at the same offset.
    table = lines[lines.index("PODS (28: 21 Bound, 7 Pending, 0 Rejected)") + 1 :]
    header = table[0]
    rows = [line for line in table[1:] if line.startswith("  default/")]
    assert len(rows) == 28
    phase = re.compile(r" (Bound|Pending|Rejected) ")
    assert {phase.search(row).start() for row in rows} == {header.index(" PHASE")}  # type: ignore[union-attr]


# --- the examples --------------------------------------------------------------------------------------


def test_default_scenario_is_every_example_in_its_section_order() -> None:
    text = (ROOT / "vgpu_guard" / "data" / "scenarios" / "default.yaml").read_text(encoding="utf-8")
    order = re.findall(r"^# ===== (\S+) =", text, re.MULTILINE)
    assert sorted(order) == sorted(p.name for p in EXAMPLES.glob("*.yaml"))
    examples = [d.object for name in order for d in read_documents(str(EXAMPLES / name))]
    assert [d.object for d in default_scenario().documents] == examples


def test_overcommit_example_alone_gives_the_controllers_exact_message() -> None:
    result = simulate(load_scenario([str(EXAMPLES / "overcommit.yaml")]), load_config(env={}))
    web = [p for p in result.pods if p.name.startswith("web-")]
    assert [(p.phase, p.node) for p in web] == [("Bound", "gpu-0"), ("Bound", "gpu-0"), ("Pending", None)]
    assert web[2].reason == OVERCOMMIT_ALONE
    assert result.violations == ()


def test_queue_guarantees_example_alone_denies_batch_against_its_48_cpu() -> None:
    # Not "lower it to at most 0": alone, the example's cluster leaves batch room it can be told.
    result = simulate(load_scenario([str(EXAMPLES / "queue-guarantees.yaml")]), load_config(env={}))
    verdicts = [(a.result.object["metadata"]["name"], a.result.decision.allowed) for a in result.admission]
    assert verdicts == [("training", True), ("inference", True), ("notebooks", True), ("batch", False)]
    assert result.admission[3].result.decision.message == (
        "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed cpu to 68 but "
        "cluster capacity is 48 (4 Ready nodes); lower it to at most 16 or add nodes"
    )


# --- configuration and odd inputs --------------------------------------------------------------------


def test_routing_off_in_the_config_leaves_pods_to_volcano(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("scheduling:\n  routing: false\n")
    result = simulate(load_scenario([str(EXAMPLES / "mig.yaml")]), load_config(config, env={}))
    assert result.routing == (
        "scheduling.routing is off (from the configuration); "
        "IB clusters come from node label vgpu-guard.io/ib-cluster (simulate's default)"
    )
    assert {(p.phase, p.scheduler) for p in result.pods} == {("Pending", "volcano")}
    assert result.pods[0].reason == (
        "not simulated: schedulerName is volcano; simulate runs only vgpu-guard's allocator"
    )


def test_rejected_pods_by_admission_and_by_the_api_server(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    node = next(d.object for d in read_documents(str(EXAMPLES / "mig.yaml")))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {
            "priorityClassName": "missing",
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"volcano.sh/vgpu-number": 1}}}
            ],
        },
    }
    privileged = json.loads(json.dumps(pod))
    privileged["metadata"]["name"] = "q"
    del privileged["spec"]["priorityClassName"]
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    scenario.write_text(yaml.safe_dump_all([node, pod, privileged]))
    result = simulate(load_scenario([str(scenario)]), load_config(env={}))
    outcomes = {p.name: p for p in result.pods}
    assert outcomes["p"].phase == "Rejected"
    assert outcomes["p"].reason == (
        'refused by the API server: pods "p" is forbidden: no PriorityClass with name missing was found'
    )
    assert outcomes["q"].phase == "Rejected"
    assert outcomes["q"].reason is not None and outcomes["q"].reason.startswith(
        "denied by admission: [vgpu-privileged]"
    )


def test_unreadable_input_exits_2_naming_file_and_document(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n- not an object\n")
    assert run(["simulate", "-f", str(bad)]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {bad} document 2: expected a Kubernetes object (a mapping), got list\n"
    )
    assert run(["simulate", "-f", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: cannot read" in capsys.readouterr().err


def test_a_kind_the_simulated_api_cannot_serve_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    scenario = tmp_path / "svc.yaml"
    scenario.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: web}\n")
    assert run(["simulate", "-f", str(scenario)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {scenario}#1: simulate cannot create v1 Service")


def test_bad_config_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("scheduling:\n  policy: random\n")
    assert run(["simulate", "--config", str(config)]) == 2
    assert "scheduling.policy" in capsys.readouterr().err


def test_readme_states_the_default_scenarios_real_capacity(default_json: dict[str, Any]) -> None:
    # It once said 64 cpu where simulate printed 67.
    cpu = next(t for t in default_json["queue_totals"] if t["resource"] == "cpu")
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"on one cluster of {cpu['nodes']} nodes and {cpu['capacity']} cpu, in one run" in readme


def test_readme_shows_the_examples_real_output(capsys: pytest.CaptureFixture[str]) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = readme.split("```text\n$ vgpu-guard simulate -f ")[1:]
    assert len(blocks) == len(list(EXAMPLES.glob("*.yaml")))
    for block in blocks:
        path, _, shown = block.split("```", 1)[0].partition(".yaml\n")
        assert run(["simulate", "-f", str(ROOT / f"{path}.yaml")]) == 0
        printed = capsys.readouterr().out
        # Run from the repository root, as the README does: the scenario is named by its relative path.
        assert printed.replace(str(ROOT) + "/", "") == shown, path


def test_counts_of_one_read_in_the_singular(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    one = gpu_pod({"volcano.sh/vgpu-number": 1}, name="one")
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(one))
    run(["simulate", "-f", str(path)])
    out = capsys.readouterr().out
    assert "ADMISSION (1 request, 0 denied)" in out
    assert "Summary: 1 pod bound, 0 pending, 0 rejected; 0 of 1 admission request denied;" in out
