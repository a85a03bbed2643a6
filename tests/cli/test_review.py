"""``vgpu-guard review``: the webhook's decisions on files, exit codes, output shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from vgpu_guard.cli.app import run

ROOT = Path(__file__).resolve().parents[2]
GUIDE_PODS = ROOT / "examples" / "mig" / "pods.yaml"
DENIALS = ROOT / "examples" / "denials" / "pods.yaml"


def review_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = run(["review", *args, "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_guides_pods_are_admitted_with_the_expected_changes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = review_json(capsys, "-f", str(GUIDE_PODS))
    assert code == 0
    assert out["cluster"] == (
        "built-in example cluster (the input brings no Nodes; --cluster FILE or --kubeconfig PATH for yours)"
    )
    by_name = {r["name"]: r for r in out["objects"]}
    assert [(r["kind"], r["name"], r["allowed"]) for r in out["objects"]] == [
        ("Pod", "guide-hami-pod", True),
        ("Pod", "guide-mig-pod", True),
        ("Pod", "guide-gpu-pod", True),
        ("Job", "guide-priority-high", True),
    ]
    # Volcano's guides: explicit hami-core requests are already complete: no change, no warning.
    assert by_name["guide-hami-pod"]["patch"] == [] and by_name["guide-hami-pod"]["warnings"] == []
    assert by_name["guide-gpu-pod"]["patch"] == [] and by_name["guide-gpu-pod"]["warnings"] == []
    # The MIG guide: "requesting 3 GB may land on a 5 GB MIG instance": we say so and ask for exactly that.
    mig = by_name["guide-mig-pod"]
    assert sorted(op["path"] for op in mig["patch"]) == [
        "/metadata/annotations/vgpu-guard.io~1mig-profile",
        "/spec/containers/0/resources/limits/volcano.sh~1vgpu-memory",
        "/spec/containers/0/resources/requests/volcano.sh~1vgpu-memory",
    ]
    assert mig["object"]["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"] == "5120"
    assert mig["object"]["metadata"]["annotations"]["vgpu-guard.io/mig-profile"] == "1g.5gb"


def test_denials_exit_1_with_messages(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = review_json(capsys, "-f", str(DENIALS))
    assert code == 1
    assert [r["allowed"] for r in out["objects"]] == [False, False, False]
    assert out["objects"][0]["code"] == 403
    assert out["objects"][0]["message"] == (
        "[vgpu-memory-unit] spec.containers[0].resources.limits[volcano.sh/vgpu-memory]: 12Gi has a unit suffix "
        "but vgpu-memory counts MiB (12Gi would mean 12884901888 MiB); write 12288"
    )
    assert out["objects"][2]["message"].startswith("[vgpu-cores-range] spec.template.spec.containers[0]")


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["review", "-f", str(GUIDE_PODS)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(
        "Reviewed 4 object(s) against built-in example cluster "
        "(the input brings no Nodes; --cluster FILE or --kubeconfig PATH for yours).\n"
    )
    assert "allowed Pod default/guide-mig-pod  [" in text
    assert "    warning: vgpu-guard: set annotation vgpu-guard.io/mig-profile=1g.5gb\n" in text
    assert text.endswith("4 allowed, 0 denied.\n")


def test_yaml_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["review", "-f", str(GUIDE_PODS), "-o", "yaml"]) == 0
    assert len(yaml.safe_load(capsys.readouterr().out)["objects"]) == 4


def test_cluster_file_is_used(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": "a30",
                    "annotations": {
                        "volcano.sh/node-vgpu-register": "GPU-1,10,24576,NVIDIA-NVIDIA A30,true,hami-core:"
                    },
                },
                "status": {
                    "allocatable": {
                        "volcano.sh/vgpu-number": "10",
                        "volcano.sh/vgpu-memory": "24576",
                        "volcano.sh/vgpu-cores": "100",
                    },
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    )
    code, out = review_json(capsys, "-f", str(GUIDE_PODS), "--cluster", str(cluster))
    assert code == 1 and out["cluster"] == f"cluster file {cluster}"
    mig = next(r for r in out["objects"] if r["name"] == "guide-mig-pod")
    assert mig["message"].startswith(
        "[vgpu-mode-unavailable] metadata.annotations[volcano.sh/vgpu-mode]: mig is offered by no node"
    )


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("a: [1,\n", "not valid YAML"),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\n- 1\n",
            "document 2: expected a Kubernetes object (a mapping), got list",
        ),
        ("a: 1\n---\nmetadata: {name: x}\n", "document 1: missing apiVersion or kind"),
        # As kubectl refuses them: an object no API server accepts is not reviewed.
        (
            "apiVersion: v1\nkind: Pod\n",
            "document 1: Pod needs metadata with a name (a mapping), got nothing",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: x\n",
            "document 1: Pod needs metadata with a name (a mapping), got str",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {labels: {}}\n",
            "document 1: Pod has no metadata.name (or generateName)",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: 5}\n",
            "document 1: Pod metadata.name must be text, got int",
        ),
    ],
)
def test_unreadable_input_exits_2_naming_file_and_document(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, error: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    assert run(["review", "-f", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}") and error in err


def test_missing_file_and_bad_config_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run(["review", "-f", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    config = tmp_path / "config.yaml"
    config.write_text("admission:\n  defaultMode: turbo\n")
    assert run(["review", "-f", str(GUIDE_PODS), "--config", str(config)]) == 2
    assert "admission.defaultMode" in capsys.readouterr().err


def test_list_objects_are_expanded(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all(GUIDE_PODS.read_text()))
    listing = tmp_path / "list.yaml"
    listing.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": docs}))
    code, out = review_json(capsys, "-f", str(listing))
    assert code == 0 and len(out["objects"]) == 4


SHARE = {"volcano.sh/vgpu-memory": 1000, "volcano.sh/vgpu-cores": 10}


def test_multi_container_warn_is_a_whole_warning_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 38: ``admission.multiContainer: warn`` warned nothing, and the warning that
    ``rules: {vgpu-multi-container: warn}`` gave was cut mid-word ("cannot te…")."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "two",
            "namespace": "default",
            "annotations": {"volcano.sh/vgpu-mode": "hami-core"},
        },
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {"name": n, "image": "i", "resources": {"limits": {"volcano.sh/vgpu-number": 1, **SHARE}}}
                for n in ("a", "b")
            ],
        },
    }
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    (tmp_path / "config.yaml").write_text("admission:\n  multiContainer: warn\n")
    code = run(["review", "-f", str(tmp_path / "pod.yaml"), "--config", str(tmp_path / "config.yaml")])
    assert code == 0
    assert capsys.readouterr().out.splitlines()[2:] == [
        f"allowed Pod default/two  [{tmp_path}/pod.yaml#1]",
        '    warning: vgpu-guard: "a" and "b" may share a GPU Volcano counts once: later pods there wait; '
        "use one vGPU container",
        "    warning: [vgpu-multi-container] spec.containers[1]: also requests vGPU (as does…; request vGPU "
        "in one container, or split the pod",
        "",
        "1 allowed, 0 denied.",
    ]
