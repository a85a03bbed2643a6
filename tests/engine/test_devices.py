"""Node registrations exactly as the plugin writes them; malformed ones are reported, never fatal."""

from __future__ import annotations

import pytest

from tests.builders import A30, A100_40, default_config, gpu_node, view_of
from vgpu_guard.engine.cluster import node_info
from vgpu_guard.engine.devices import parse_registration

MIG_MODELS = ["A30", "A100-SXM4-40GB"]


def test_six_field_records() -> None:
    raw = "GPU-8f1c,10,24576,NVIDIA-NVIDIA A30,true,hami-core:GPU-77ab,10,24576,NVIDIA-NVIDIA A30,false,hami-core:"
    reg = parse_registration(raw, mig_models=MIG_MODELS)
    assert reg.error is None
    assert [(d.uuid, d.index, d.split_count, d.memory, d.type, d.healthy, d.mode) for d in reg.devices] == [
        ("GPU-8f1c", 0, 10, 24576, A30, True, "hami-core"),
        ("GPU-77ab", 1, 10, 24576, A30, False, "hami-core"),
    ]
    assert reg.mode == "hami-core"


def test_legacy_five_field_records_are_hami_core() -> None:
    reg = parse_registration("GPU-1,10,16384,NVIDIA-Tesla T4,true:", mig_models=MIG_MODELS)
    assert reg.error is None and reg.devices[0].mode == "hami-core"


def test_mig_record_of_unknown_model_is_served_as_hami_core() -> None:
    reg = parse_registration("GPU-1,7,16384,NVIDIA-Tesla T4,true,mig:", mig_models=MIG_MODELS)
    assert reg.devices[0].mode == "hami-core"
    reg = parse_registration(f"GPU-1,7,40960,{A100_40},true,mig:", mig_models=MIG_MODELS)
    assert reg.devices[0].mode == "mig"


def test_node_mode_is_the_last_records() -> None:
    raw = f"GPU-1,10,24576,{A30},true,hami-core:GPU-2,4,24576,{A30},true,mig:"
    assert parse_registration(raw, mig_models=MIG_MODELS).mode == "mig"


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (
            "GPU-1,10,24576:",
            "record 1 ('GPU-1,10,24576') has 3 fields, expected UUID,count,devmem,type,health[,mode]",
        ),
        (
            "GPU-1,ten,24576,T,true,hami-core:",
            "record 1 ('GPU-1,ten,24576,T,true,hami-core') has split count 'ten'",
        ),
        ("GPU-1,10,24Gi,T,true,hami-core:", "has device memory '24Gi', expected an integer (MiB)"),
        # str.isdigit() accepts these and int() then raises (or reads digits no plugin writes).
        (
            "GPU-1,\u00b2,24576,T,true,hami-core:",
            "has split count '\u00b2', expected an integer from 1 to 1024",
        ),
        ("GPU-1,10,\u0663,T,true,hami-core:", "has device memory '\u0663', expected an integer (MiB)"),
        ("GPU-1,10," + "9" * 5000 + ",T,true,hami-core:", "has device memory '9999"),
        (",10,24576,T,true,hami-core:", "has an empty UUID"),
        ("", "annotation volcano.sh/node-vgpu-register is missing or empty"),
        (":::", "holds no records"),
        (None, "is missing or empty"),
        (12, "is missing or empty"),
    ],
)
def test_malformed_registrations_are_reported(raw: object, error: str) -> None:
    reg = parse_registration(raw, mig_models=MIG_MODELS)
    assert reg.devices == ()
    assert reg.error is not None and error in reg.error


def test_malformed_node_is_skipped_for_gpus_but_kept() -> None:
    view = view_of([gpu_node("good"), gpu_node("bad", registration="GPU-1,10:")])
    assert [n.name for n in view.gpu_nodes] == ["good"]
    assert view.nodes["bad"].gpu_problem is not None
    assert view.nodes["bad"].allocatable["cpu"] == 64


def test_registration_without_allocatable_is_not_vgpu_capable() -> None:
    node = gpu_node("n")
    del node["status"]["allocatable"]["volcano.sh/vgpu-cores"]
    info = node_info(node, default_config())
    assert info.gpu_problem == "registered GPUs but allocatable has no volcano.sh/vgpu-cores"
    assert not info.vgpu_capable


def test_bad_allocatable_quantity_is_reported_not_fatal() -> None:
    node = gpu_node("n")
    node["status"]["allocatable"]["cpu"] = "many"
    info = node_info(node, default_config())
    assert "cpu" not in info.allocatable
    assert info.problems == (
        "status.allocatable[cpu]: 'many' is not a quantity (expected e.g. 12, 500m, 64Gi, 1e3)",
    )


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"metadata": "x"},
        {"metadata": {"name": "n"}, "status": []},
        {"metadata": {"name": "n", "annotations": {"volcano.sh/node-vgpu-register": 5}}},
    ],
)
def test_garbage_nodes_never_raise(obj: dict[str, object]) -> None:
    node_info(obj, default_config())
