"""Numbers from outside are bounded before they reach a sum we write (issue 36).

Eleven devices of 999999999999999999 MiB each passed the digit check; their sum overflowed the
GPULedger's int64 summary, kube-apiserver refused every write of that node's ledger, and every
controller pass failed. Now a value no GPU can have is unreadable where it is found, and whatever
decodes encodes into a ledger the CRD schema accepts.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import default_config, gpu_node, pod, view_of
from vgpu_guard.apidouble.store import Store
from vgpu_guard.engine.assignment import adopted_allocation, decode_assignment_entries
from vgpu_guard.engine.devices import parse_registration
from vgpu_guard.engine.ledger import LedgerError, NodeLedger, decode_ledger, encode_ledger
from vgpu_guard.engine.ledger_summary import ledger_summary
from vgpu_guard.engine.pod_request import pod_request
from vgpu_guard.engine.untrusted import MAX_GPU_MEMORY_MIB
from vgpu_guard.kube.resources import CRDS, LEDGERS

NVIDIA = default_config().nvidia
HUGE = "999999999999999999"
INT64 = 2**63 - 1
EDGES = st.sampled_from(
    [0, 1, 100, 101, MAX_GPU_MEMORY_MIB, MAX_GPU_MEMORY_MIB + 1, 10**18 - 1, 2**31, 2**32, INT64]
)


def test_a_device_claiming_more_than_any_gpu_has_is_named_and_not_held() -> None:
    decoded = decode_assignment_entries(f"GPU-a,NVIDIA,{HUGE},0:GPU-b,NVIDIA,1024,0:;")
    assert decoded.invalid == [
        f"container 1: device 'GPU-a,NVIDIA,{HUGE},0' claims {HUGE} MiB, more than any GPU has (at most 16777216)"
    ]
    assert [d.uuid for d in decoded.containers[0]] == ["GPU-b"]


def test_eleven_forged_devices_hold_nothing_and_the_summary_stays_small() -> None:
    obj = pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 1024}, name="forged")
    obj["metadata"]["uid"] = "u"
    wanted = pod_request(obj, NVIDIA)
    assert wanted is not None
    raw = "".join(f"GPU-gpu-b-0,NVIDIA,{HUGE},0:" for _ in range(11))
    node = view_of([gpu_node("gpu-b", count=1)]).nodes["gpu-b"]
    adoption = adopted_allocation(wanted, raw, queue="q", node=node, nvidia=NVIDIA)
    assert len(adoption.invalid) == 11 and adoption.allocation.containers == ()


def test_a_registration_past_the_bounds_is_the_nodes_gpu_problem() -> None:
    registration = parse_registration(f"GPU-0,10,{HUGE},NVIDIA A10,true,hami-core:")
    assert registration.devices == ()
    assert registration.error == (
        f"record 1 ('GPU-0,10,{HUGE},NVIDIA A10,true,hami-core') has device memory '{HUGE}', expected an "
        "integer (MiB) of at most 16777216"
    )
    split = parse_registration("GPU-0,100000,24576,NVIDIA A10,true,hami-core:")
    assert split.error is not None and "expected an integer from 1 to 1024" in split.error


def ledger_object(memory: int, cores: int, reserved: int) -> dict[str, Any]:
    entry = {
        "podUID": "u",
        "namespace": "default",
        "name": "p",
        "reservedAt": reserved,
        "containers": [{"index": 0, "devices": [{"uuid": "GPU-0", "memoryMiB": memory, "cores": cores}]}],
    }
    return {
        "apiVersion": "vgpu-guard.io/v1alpha1",
        "kind": "GPULedger",
        "metadata": {"name": "n"},
        "spec": {"nodeName": "n", "allocations": [entry]},
    }


@pytest.mark.parametrize(
    ("memory", "cores", "reserved", "field"),
    [
        (INT64, 0, 0, "memoryMiB: 9223372036854775807 is outside 0..16777216"),
        (-1, 0, 0, "memoryMiB: -1 is outside 0..16777216"),
        (1, 101, 0, "cores: 101 is outside 0..100"),
        (1, 0, INT64, "reservedAt: 9223372036854775807 is outside 0..9999999999"),
    ],
)
def test_a_ledger_entry_past_the_bounds_does_not_decode_and_names_the_field(
    memory: int, cores: int, reserved: int, field: str
) -> None:
    with pytest.raises(LedgerError) as error:
        decode_ledger(ledger_object(memory, cores, reserved))
    assert str(error.value).endswith(field)


def _store() -> Store:
    store = Store()
    text = resources.files("vgpu_guard").joinpath("data/crds/gpuledgers.vgpu-guard.io.yaml").read_text()
    store.create(CRDS, yaml.safe_load(text))
    return store


STORE = _store()


@settings(max_examples=200, deadline=None)
@given(memory=EDGES, cores=EDGES, reserved=EDGES, copies=st.integers(1, 64))
def test_whatever_decodes_encodes_into_a_ledger_the_crd_schema_accepts(
    memory: int, cores: int, reserved: int, copies: int
) -> None:
    """decode -> (many entries on one card) -> encode with the summary -> the CRD's schema."""
    try:
        one = decode_ledger(ledger_object(memory, cores, reserved))
    except LedgerError:
        return  # unreadable: named, never summed
    [entry] = one.allocations.values()
    entries = {
        f"u{i}": type(entry)(f"u{i}", "default", f"p{i}", "", entry.containers, entry.reserved_at)
        for i in range(copies)
    }
    ledger = NodeLedger("n", entries)
    node = view_of([gpu_node("n", count=1)]).nodes["n"]
    body = encode_ledger(ledger, ledger_summary(ledger, node, 1))
    body["metadata"]["name"] = f"n-{memory}-{cores}-{reserved}-{copies}"
    body["spec"]["nodeName"] = body["metadata"]["name"]
    STORE.create(LEDGERS, body)  # raises Invalid when the schema refuses it
    STORE.delete(LEDGERS, body["metadata"]["name"])
