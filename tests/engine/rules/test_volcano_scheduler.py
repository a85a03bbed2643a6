"""A vGPU pod left to kube-scheduler while Volcano schedules vGPU pods (issue 43 item 9).

kube-scheduler binds such a pod with no GPU assignment and the device plugin's Allocate then fails
it on the node; it was admitted without a word. Now it is warned with the fix, or, with
``admission.schedulerName`` set, given that scheduler as HAMi's webhook gives pods its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tests.builders import config_with, default_config, gpu_node, pod, view_of
from vgpu_guard.cli.app import run
from vgpu_guard.configfile import ConfigError, load_config
from vgpu_guard.engine.admission import request_for, review_object
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.rules.pods_mutate import normalise_pod
from vgpu_guard.engine.violations import WARNING_LIMIT

GPU = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 1000}
WARNED = (
    "vgpu-guard: spec.schedulerName default-scheduler: Volcano will not assign this pod a GPU; "
    "set schedulerName: volcano"
)
SET = "vgpu-guard: set spec.schedulerName=volcano (was default-scheduler; admission.schedulerName)"
VOLCANO = config_with(admission={"schedulerName": "volcano"})


@pytest.fixture
def view() -> ClusterView:
    return view_of([gpu_node("a30")])


def gpu_pod(scheduler: str | None) -> dict[str, Any]:
    """A vGPU pod naming ``scheduler``, or no scheduler at all."""
    obj = pod(GPU)
    if scheduler is not None:
        obj["spec"]["schedulerName"] = scheduler
    return obj


def admitted(obj: dict[str, Any], view: ClusterView, config: GuardConfig | None = None) -> Any:
    return review_object(request_for(obj, username="alice"), view, config or default_config())


def test_the_warning_fits_kubectl() -> None:
    assert len(WARNED) <= WARNING_LIMIT and len(SET) <= WARNING_LIMIT


@pytest.mark.parametrize("name", ["default-scheduler", None])
def test_a_pod_left_to_default_scheduler_is_warned_with_the_fix(view: ClusterView, name: str | None) -> None:
    """``default-scheduler`` is what the webhook sees (the API server defaults the field before
    admission); no name at all is what ``review`` reads from a file."""
    result = admitted(gpu_pod(name), view)
    assert result.decision.allowed
    assert WARNED in result.warnings
    assert result.object["spec"].get("schedulerName") == name
    assert not [op for op in result.patch if op["path"] == "/spec/schedulerName"]


def test_a_reinvocation_repeats_the_same_words_and_changes_nothing(view: ClusterView) -> None:
    """Nothing changes, so nothing marks the pod as warned: the note comes again, word for word,
    and kube-apiserver keeps one copy of identical warnings per request (filters/warning.go
    ``recorder.AddWarning``), so kubectl prints it once."""
    first, warnings = normalise_pod(pod(GPU, schedulerName="default-scheduler"), view, default_config())
    again, repeated = normalise_pod(first, view, default_config())
    assert again == first and WARNED in warnings and [w for w in repeated if "schedulerName" in w] == [WARNED]


@pytest.mark.parametrize("name", ["default-scheduler", None])
def test_the_setting_gives_the_pod_volcano(view: ClusterView, name: str | None) -> None:
    result = admitted(gpu_pod(name), view, VOLCANO)
    assert result.object["spec"]["schedulerName"] == "volcano"
    assert SET in result.warnings and WARNED not in result.warnings
    op = "replace" if name else "add"
    assert {"op": op, "path": "/spec/schedulerName", "value": "volcano"} in result.patch
    # Idempotent: the stamped pod comes back unchanged and silent.
    work, warnings = normalise_pod(result.object, view, VOLCANO)
    assert work == result.object and warnings == []


@pytest.mark.parametrize("name", ["volcano", "hami-scheduler", "volcano-b"])
def test_a_scheduler_named_on_purpose_is_left_alone(view: ClusterView, name: str) -> None:
    for config in (default_config(), VOLCANO):
        result = admitted(pod(GPU, schedulerName=name), view, config)
        assert result.object["spec"]["schedulerName"] == name
        assert not [w for w in result.warnings if "schedulerName" in w]


def test_a_pod_with_node_name_is_not_scheduled_and_left_alone(view: ClusterView) -> None:
    """An allocation writer's pod created with spec.nodeName set: no scheduler binds it."""
    config = config_with(admission={"allocationWriters": ["alice"], "schedulerName": "volcano"})
    for cfg in (config, config_with(admission={"allocationWriters": ["alice"]})):
        result = admitted(pod(GPU, nodeName="a30"), view, cfg)
        assert result.decision.allowed
        assert "schedulerName" not in result.object["spec"]
        assert not [w for w in result.warnings if "schedulerName" in w]


def test_a_pod_without_vgpu_is_not_ours(view: ClusterView) -> None:
    result = admitted(pod(None), view, VOLCANO)
    assert "schedulerName" not in result.object["spec"] and result.warnings == ()


def test_with_routing_on_every_vgpu_pod_goes_to_our_scheduler_instead(view: ClusterView) -> None:
    config = config_with(scheduling={"routing": True}, admission={"schedulerName": "volcano"})
    result = admitted(pod(GPU), view, config)
    assert result.object["spec"]["schedulerName"] == "vgpu-guard"
    assert [w for w in result.warnings if "schedulerName" in w] == [
        "vgpu-guard: set spec.schedulerName=vgpu-guard (was default-scheduler; vGPU routing on)"
    ]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("Volcano", "'Volcano' is no scheduler name (a DNS-1123 subdomain"),
        ("volcano_x", "'volcano_x' is no scheduler name"),
        ("-volcano", "'-volcano' is no scheduler name"),
        ("default-scheduler", "default-scheduler is the name this setting replaces"),
        ("v" * 254, "at most 253 characters"),
    ],
)
def test_a_name_no_scheduler_could_have_is_refused_naming_the_field(value: str, says: str) -> None:
    with pytest.raises(ValidationError) as raised:
        GuardConfig.model_validate({"admission": {"schedulerName": value}})
    [error] = raised.value.errors()
    assert error["loc"] == ("admission", "schedulerName") and says in error["msg"]
    with pytest.raises(ConfigError, match=r"admission\.schedulerName: .*" + says[:12]):
        load_config(env={"VGPU_GUARD__ADMISSION__SCHEDULER_NAME": value})


def test_accepted_names() -> None:
    assert load_config(env={"VGPU_GUARD__ADMISSION__SCHEDULER_NAME": "volcano"}).admission.scheduler_name == (
        "volcano"
    )
    assert GuardConfig.model_validate(
        {"admission": {"schedulerName": "gpu.sched-2"}}
    ).admission.scheduler_name
    assert default_config().admission.scheduler_name == ""


def test_review_reports_it_and_exits_0(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """What the issue saw: ``review`` exited 0 with only the mode note. It still exits 0 (a warning
    is no violation), and now says what kube-scheduler would do to the pod."""
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod(GPU, name="trainer")))
    assert run(["review", "-f", str(tmp_path / "pod.yaml")]) == 0
    out = capsys.readouterr().out
    assert f"    warning: {WARNED}" in out.splitlines()
