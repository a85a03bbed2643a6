"""``vgpu-guard simulate``: the default scenario's outcomes (volcano mode, Volcano's model with the
stale cache of #3616, its writes arbitrated by the webhook's Arbiter), the JSON schema, the report,
the modes and Volcano releases, exit codes."""

from __future__ import annotations

import json
import re
import shlex
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
from vgpu_guard.cli.simulation import Mode, SimulationResult, simulate
from vgpu_guard.configfile import load_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "simulate"
SCHEMA = json.loads((ROOT / "docs" / "simulate.schema.json").read_text())

# vgpu-guard's controller's message (routing mode) for the same pod.
CONTROLLER_ALONE = "0/1 nodes are available: 8 GPUs have no free memory (12288 MiB requested)"
# Volcano's FitErrors message (api/unschedule_info.go), the model's deviceshare error in it.
OVERCOMMIT_ALONE = "0/1 nodes are unavailable: 1 hami-vgpuDeviceSharing not enough gpu fitted on this node."
OVERCOMMIT_IN_DEFAULT = (
    "0/14 nodes are unavailable: 1 hami-vgpuDeviceSharing not enough gpu fitted on this node, 13 node(s) "
    "didn't match Pod's node affinity/selector."
)
SEED_000_DENIED = (
    'admission webhook "pod-assignments.vgpu-guard.io" denied the request: [vgpu-assignment-capacity] '
    "metadata.annotations[volcano.sh/vgpu-ids-new]: GPU GPU-gpu-0-7 on node gpu-0 has 0 MiB free of 24576 MiB, "
    "12288 MiB asked (held by default/web-b2nkn9lffm-6c45b, default/web-b2nkn9lffm-6lkgg); the assignment of "
    "pod default/web-b2nkn9lffm-7lj4v is refused before it lands, and Volcano decides again on its next session"
)
AFTER_SESSION_1 = " (after vgpu-guard's arbiter refused its assignment to gpu-0 in Volcano's session 1)"
# What `vgpu-guard simulate` without -f runs: the stale cache on (cli/simulate.py mode_from).
BUILT_IN = Mode(stale_cache=True, stale_cache_from="the built-in scenario's default")
BATCH_DENIED = (
    "[queue-guarantee-capacity] spec.guarantee.resource.cpu: 36 would bring guaranteed cpu to 68 but "
    "cluster capacity is 64 (14 Ready nodes); lower it to at most 32 or add nodes"
)


@pytest.fixture(scope="module")
def default_result() -> SimulationResult:
    return simulate(default_scenario(), load_config(env={}), BUILT_IN)


@pytest.fixture(scope="module")
def default_json(default_result: SimulationResult) -> dict[str, Any]:
    # Through json, as `-o json` prints it.
    loaded: dict[str, Any] = json.loads(json.dumps(to_json(default_result)))
    return loaded


def pods_by_name(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in out["pods"]}


# --- the default scenario's outcomes ---------------------------------------------------------------


def test_seed_000_volcano_places_three_on_the_free_card_the_arbiter_refuses_the_third(
    default_json: dict[str, Any],
) -> None:
    """#3616's stale session sends the three 12 GiB replicas to the one free 24 GiB card, all Bindings
    at once; the webhook's arbiter reserves two and refuses the third with the card's numbers and
    holders; Volcano's next session, on fresh data, finds no card and the pod waits with the reason."""
    first, second = default_json["volcano"]["sessions"][:2]
    web = [b for b in first["binds"] if b["pod"].startswith("default/web-")]
    assert [(b["node"], b["assignment"], b["result"]) for b in web] == [
        ("gpu-0", "GPU-gpu-0-7,NVIDIA,12288,0:", "bound"),
        ("gpu-0", "GPU-gpu-0-7,NVIDIA,12288,0:", "bound"),
        ("gpu-0", "GPU-gpu-0-7,NVIDIA,12288,0:", "denied"),
    ]
    assert (web[2]["step"], web[2]["message"]) == ("bind", SEED_000_DENIED)
    assert {"pod": "default/web-b2nkn9lffm-7lj4v", "reason": OVERCOMMIT_IN_DEFAULT} in second["waiting"]
    assert not any(b["pod"].startswith("default/web-") for b in second["binds"])
    pods = [p for p in default_json["pods"] if p["name"].startswith("web-")]
    assert [p["phase"] for p in pods] == ["Bound", "Bound", "Pending"]
    for pod in pods[:2]:
        assert pod["node"] == "gpu-0"
        assert pod["devices"] == [{"uuid": "GPU-gpu-0-7", "memory": 12288, "cores": 0, "mig_profile": None}]
        assert pod["scheduler"] == "volcano"  # volcano mode: Volcano keeps its pods
    assert pods[2]["reason"] == OVERCOMMIT_IN_DEFAULT + AFTER_SESSION_1
    assert pods[2]["node"] is None and pods[2]["devices"] == []
    busy = [p for p in default_json["pods"] if p["name"].startswith("train-")]
    assert [(p["phase"], p["scheduler"], p["existing"]) for p in busy] == [("Bound", "volcano", True)] * 7
    assert default_json["violations"] == []
    assert default_json["scheduling"]["mode"] == "volcano"
    assert default_json["volcano"]["stale_cache"] is True


def test_the_reservations_are_the_arbiters(default_result: SimulationResult) -> None:
    """Every entry of a pod Volcano bound was written by the webhook's arbiter at admission
    (``admitted: true``), not adopted afterwards by the controller."""
    from vgpu_guard.engine.ledger import decode_ledger

    volcano_bound = {f"{p.namespace}/{p.name}" for p in default_result.pods if p.node and not p.existing}
    entries = [
        a for obj in default_result.view.ledgers.values() for a in decode_ledger(obj).allocations.values()
    ]
    ours = [a for a in entries if a.key in volcano_bound]
    assert len(ours) == len(volcano_bound) == 14
    assert all(a.admitted and not a.adopted for a in ours)


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


def test_priority_decides_not_creation_order() -> None:
    """Alone (no stale cache): Volcano places the pending gangs by priority, each whole or not at all."""
    result = simulate(load_scenario([str(EXAMPLES / "priority.yaml")]), load_config(env={}))
    pods = {p.name: p for p in result.pods}
    for i in range(3):
        high = pods[f"priority-high-test-{i}"]
        assert (high.phase, high.node, high.priority) == ("Bound", "prio-0", 100)
        assert [(d.uuid, d.memory) for d in high.devices] == [(f"GPU-prio-0-{i}", 16384)]
        for job, priority in (("priority-med", 50), ("priority-low", 10)):
            waiting = pods[f"{job}-test-{i}"]
            assert (waiting.phase, waiting.priority) == ("Pending", priority)
            assert waiting.reason is not None and waiting.reason.startswith(
                "2/3 tasks in gang unschedulable: gang "
            )
    assert not any(b.result != "bound" for r in result.volcano.sessions for b in r.binds)


def test_the_stale_cache_refuses_seed_000s_third_pod_and_gangs_start_whole(
    default_json: dict[str, Any],
) -> None:
    """The built-in scenario's stale sessions reproduce #3616 on the Deployment's pods: the arbiter
    refuses exactly one assignment (the third 12 GiB pod). Gangs are counted within their statement,
    so priority-high starts whole on three cards and the lower gangs wait whole (issue 35)."""
    pods = pods_by_name(default_json)
    assert [pods[f"priority-high-test-{i}"]["node"] for i in range(3)] == ["prio-0"] * 3
    waiting = [f"priority-{level}-test-{i}" for level in ("med", "low") for i in range(3)]
    assert all(pods[name]["phase"] == "Pending" for name in waiting)
    refused = [b for s in default_json["volcano"]["sessions"] for b in s["binds"] if b["result"] == "denied"]
    assert [b["pod"] for b in refused] == ["default/web-b2nkn9lffm-7lj4v"]
    assert default_json["violations"] == []


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
    member = next(a for a in default_json["admission"] if a["name"] == "priority-high-test-0")
    assert not any(op["path"] == "/spec/schedulerName" for op in member["patch"])  # volcano mode: no routing
    assert member["object"]["metadata"]["annotations"]["scheduling.k8s.io/group-name"].startswith(
        "priority-high-"
    )


def test_a_volcano_jobs_pods_come_after_its_podgroup_is_inqueue(default_json: dict[str, Any]) -> None:
    """Volcano's job controller: PodGroup <job>-<uid> first, pods once the enqueue action let it in."""
    job = next(a for a in default_json["admission"] if a["kind"] == "Job" and a["name"] == "priority-high")
    (group,) = {
        a["object"]["metadata"]["annotations"]["scheduling.k8s.io/group-name"]
        for a in default_json["admission"]
        if a["name"].startswith("priority-high-test-")
    }
    assert re.fullmatch(r"priority-high-[0-9a-f-]{36}", group)
    assert job["note"] == (
        f"PodGroup {group} created by Volcano's job controller; Volcano's enqueue made it Inqueue in "
        "session 1, then the job controller created its pods"
    )
    assert f"default/{group}" in default_json["volcano"]["sessions"][0]["enqueued"]
    first_bind = min(
        s["session"]
        for s in default_json["volcano"]["sessions"]
        for b in s["binds"]
        if b["pod"].startswith("default/priority-high-")
    )
    assert first_bind == 2


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
    assert out["scheduling"]["mode"] == "volcano"
    assert out["scheduling"]["note"].startswith(
        "volcano (scheduling.routing off: the default, as the chart installs it): Volcano schedules vGPU pods"
    )
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
    again = json.loads(json.dumps(to_json(simulate(default_scenario(), load_config(env={}), BUILT_IN))))
    assert again == default_json


def test_text_report_key_lines(default_result: SimulationResult) -> None:
    text = to_text(default_result)
    lines = text.splitlines()
    assert lines[0] == "vgpu-guard simulate: built-in default scenario"  # the CLI adds its cluster
    assert lines[1].startswith(
        "Mode: volcano (scheduling.routing off: the default, as the chart installs it): "
    )
    assert lines[2] == (
        "Volcano: a model of Volcano 1.16 (>= 1.16: the assignment rides on the Binding); stale cache (#3616) "
        f"on (the built-in scenario's default); 3 sessions; vgpu-guard's controller settled in "
        f"{default_result.passes} passes."
    )
    assert lines[3].startswith("Legend: session = one Volcano scheduling cycle (enqueue, allocate, bind); ")
    assert "ADMISSION (33 requests, 3 denied)" in lines
    assert "VOLCANO (3 sessions: 15 assignments written, 14 bound, 1 refused)" in lines
    assert "  1        5         5      1       0       0" in lines
    refused = lines.index("REFUSED ASSIGNMENTS (Volcano decides each again on its next session)")
    assert lines[refused + 2] == (
        "  1        denied  default/web-b2nkn9lffm-7lj4v  gpu-0  GPU-gpu-0-7,NVIDIA,12288,0:  Binding"
    )
    assert lines[refused + 3] == f"        {SEED_000_DENIED}"
    assert "PODS (28: 21 Bound, 7 Pending, 0 Rejected)" in lines
    assert f"    default/web-b2nkn9lffm-7lj4v: {OVERCOMMIT_IN_DEFAULT}{AFTER_SESSION_1}" in lines
    assert (
        "  DENIED     Queue       batch                                examples/simulate/queue-guarantees.yaml#8"
        in lines
    )
    assert f"    Queue batch: {BATCH_DENIED}" in lines
    assert "    allowed  Pod         3 pods of Deployment default/web     by replicaset-controller" in lines
    assert (
        "  default/mig-pod                   Bound    0     volcano    mig-0   GPU-mig-0-0 MIG 1g.5gb (5120 MiB)"
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


def test_default_text_is_one_line_per_object_and_v_gives_the_details(
    default_result: SimulationResult,
) -> None:
    """Without -v no detail line sits under an admission row or a pod (issue 38 item 8); -v puts
    every warning, note and reason back under its own object, and has no grouped lists."""
    short, verbose = to_text(default_result).splitlines(), to_text(default_result, verbose=True).splitlines()
    admission_and_pods = short[
        : short.index("VOLCANO (3 sessions: 15 assignments written, 14 bound, 1 refused)")
    ]
    admission_and_pods += short[short.index("PODS (28: 21 Bound, 7 Pending, 0 Rejected)") :]
    assert not [line for line in admission_and_pods if line.startswith("      ")]
    assert "    allowed  Pod         2 pods of Job default/finetune       by volcano-controllers" in short
    assert len(short) < len(verbose) - 25
    hami = "warning: vgpu-guard: set annotation volcano.sh/vgpu-mode=hami-core (defaultMode auto, both modes offered)"
    assert verbose.count(f"        {hami}") == 10  # under each row: 4 groups of alike pods, 6 single pods
    assert "        creates 3 pods" in verbose
    assert "      (same reason as above)" in verbose
    assert f"        {BATCH_DENIED}" in verbose
    assert not any(line.startswith(("  Warnings (", "  Why denied:", "  Why not bound:")) for line in verbose)


def test_warnings_and_reasons_are_grouped_once_with_what_they_apply_to(
    default_result: SimulationResult,
) -> None:
    lines = to_text(default_result).splitlines()
    assert [line for line in lines if "vgpu-mode=hami-core" in line] == [
        "    set annotation volcano.sh/vgpu-mode=hami-core (defaultMode auto, both modes offered): 18 pods: "
        "3 pods of Deployment default/web, 3 pods of Job default/priority-low and 4 more"
    ]
    warnings = lines.index("  Warnings (8 distinct warnings; -v shows each under its object):")
    assert lines[warnings + 2] == (
        '    container "cuda-container": rounded volcano.sh/vgpu-memory 3000 -> 5120 (MIG 1g.5gb): default/mig-pod'
    )
    assert lines[warnings + 8].endswith(
        "runs in IB cluster ib-a; node affinity added: 3 pods of Job default/allreduce"
    )
    # One line per denied object, in admission order, with the webhook's whole message.
    denied = {
        a.result.object["metadata"]["name"]: a.result.decision.message for a in default_result.admission
    }
    assert lines[lines.index("  Why denied:") + 1 : warnings] == [
        f"    Deployment default/web-typo: {denied['web-typo']}",
        f"    Queue batch: {BATCH_DENIED}",
        f"    Job default/pretrain: {denied['pretrain']}",
    ]
    why = lines[lines.index("  Why not bound:") + 1 :][:3]
    assert [line.split(": ", 1)[0] for line in why] == [
        "    default/web-b2nkn9lffm-7lj4v",
        "    3 pods of Job default/priority-low",
        "    3 pods of Job default/priority-med",
    ]


def test_a_gang_reason_says_its_numbers_are_after_the_gangs_other_members(
    default_result: SimulationResult, default_json: dict[str, Any]
) -> None:
    """priority-low's blocker is judged with test-0 placed tentatively on the card the ledger shows
    empty (issue 38 item 8): Volcano's words for the node read as a fact beside a ledger at 0 / 24576.
    The reason itself says its numbers are what would remain once test-0 is placed, so the pod's
    condition (Volcano's model writes it), the JSON and the text all say so."""
    empty = next(g for g in default_json["gpus"] if g["uuid"] == "GPU-prio-0-3")
    assert (empty["memory_used"], empty["pods"]) == (0, [])
    reason = pods_by_name(default_json)["priority-low-test-0"]["reason"]
    assert (
        "; priority-low-test-1, judged on what would remain once priority-low-test-0 is placed: 0/14 "
        in reason
    )
    assert reason.endswith(
        "1 hami-vgpuDeviceSharing not enough gpu fitted on this node, 13 node(s) didn't match "
        "Pod's node affinity/selector."
    )
    assert f"    3 pods of Job default/priority-low: {reason}" in to_text(default_result).splitlines()


def test_v_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "-f", str(EXAMPLES / "mig.yaml")]
    assert run(argv) == 0
    short = capsys.readouterr().out
    assert run([*argv, "--verbose"]) == 0 and run([*argv, "-v"]) == 0
    verbose, again = capsys.readouterr().out.split("vgpu-guard simulate: ")[1:]
    assert verbose == again
    rounded = (
        'vgpu-guard: container "cuda-container": rounded volcano.sh/vgpu-memory 3000 -> 5120 (MIG 1g.5gb)'
    )
    assert f"\n        warning: {rounded}\n" in verbose and rounded not in short
    assert f"\n    {rounded.removeprefix('vgpu-guard: ')}: default/mig-pod\n" in short
    # -v changes the text only.
    assert run([*argv, "-v", "-o", "json"]) == 0
    with_v = capsys.readouterr().out
    assert run([*argv, "-o", "json"]) == 0
    assert capsys.readouterr().out == with_v


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


def test_routing_mode_from_the_flag_or_the_configuration_routes_vgpu_pods_to_the_controller(
    tmp_path: Path,
) -> None:
    """--routing, or scheduling.routing: true in --config: the mutation routes vGPU pods to
    vgpu-guard's controller, which places them; Volcano's model places nothing (its job controller
    and enqueue still make Volcano Jobs' pods)."""
    config = tmp_path / "config.yaml"
    config.write_text("scheduling:\n  routing: true\n")
    by_flag = simulate(
        load_scenario([str(EXAMPLES / "overcommit.yaml")]), load_config(env={}), Mode(routing=True)
    )
    by_file = simulate(load_scenario([str(EXAMPLES / "overcommit.yaml")]), load_config(config, env={}))
    assert by_flag.note.startswith(
        "routing (scheduling.routing on, from --routing): vGPU pods get schedulerName"
    )
    assert by_file.note.startswith("routing (scheduling.routing on, from the configuration): ")
    for result in (by_flag, by_file):
        web = [p for p in result.pods if p.name.startswith("web-")]
        assert [(p.phase, p.scheduler) for p in web] == [("Bound", "vgpu-guard")] * 2 + [
            ("Pending", "vgpu-guard")
        ]
        assert web[2].reason == CONTROLLER_ALONE
        assert not any(r.binds for r in result.volcano.sessions)
    jobs = simulate(load_scenario([str(EXAMPLES / "priority.yaml")]), load_config(env={}), Mode(routing=True))
    assert {(p.phase, p.scheduler) for p in jobs.pods if p.name.startswith("priority-high-")} == {
        ("Bound", "vgpu-guard")
    }


def test_routing_off_in_the_configuration_is_volcano_mode(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("scheduling:\n  routing: false\n")
    result = simulate(load_scenario([str(EXAMPLES / "mig.yaml")]), load_config(config, env={}))
    assert result.mode == "volcano"
    assert result.note.startswith("volcano (scheduling.routing off, from the configuration): ")
    assert {(p.phase, p.scheduler) for p in result.pods} == {("Bound", "volcano")}


def test_volcano_1_15_patches_the_assignment_and_its_binding_is_what_the_arbiter_refuses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """1.10-1.15 write the assignment in a PATCH while allocating; the PATCH is only checked (a
    discarded session must hold nothing, issue 43) and each fits alone, so all three are written.
    The Binding commits it: the third replica's Binding is refused and the pod waits."""
    argv = [
        "simulate",
        "-f",
        str(EXAMPLES / "overcommit.yaml"),
        "--volcano-version",
        "1.15",
        "--volcano-stale-cache",
    ]
    assert run([*argv, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["volcano"]["version"], out["volcano"]["sequence"]) == ("1.15", "patch-then-bind")
    binds = out["volcano"]["sessions"][0]["binds"]
    assert sorted((b["result"], b["step"]) for b in binds) == [
        ("bound", "bind"),
        ("bound", "bind"),
        ("denied", "bind"),
    ]
    denied = next(b for b in binds if b["result"] == "denied")
    assert "denied the request: [vgpu-assignment-capacity]" in denied["message"]
    waiting = next(p for p in out["pods"] if p["name"] == denied["pod"].split("/")[1])
    assert waiting["phase"] == "Pending" and out["violations"] == []


def test_an_unknown_volcano_version_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["simulate", "--volcano-version", "1.9"]) == 2
    assert capsys.readouterr().err.startswith(
        "error: Volcano version '1.9' is not modelled: give 1.10 to 1.15"
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
        command, _, shown = block.split("```", 1)[0].partition("\n")
        path, *flags = shlex.split(command)
        assert run(["simulate", "-f", str(ROOT / path), *flags]) == 0
        printed = capsys.readouterr().out
        # Run from the repository root, as the README does: the scenario is named by its relative path.
        assert printed.replace(str(ROOT) + "/", "") == shown, path


def test_counts_of_one_read_in_the_singular(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    one = gpu_pod({"volcano.sh/vgpu-number": 1}, name="one", schedulerName="volcano")
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(one))
    run(["simulate", "-f", str(path)])
    out = capsys.readouterr().out
    assert "ADMISSION (1 request, 0 denied)" in out
    assert "Summary: 1 pod bound, 0 pending, 0 rejected; 0 of 1 admission request denied;" in out
