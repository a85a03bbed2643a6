"""Pod and node specifics of the double that run without a real API server.

The expected values are what kube-apiserver 1.20.2 answered to the differential probes in
tests/contract/test_pods.py (which need the real control plane); these keep the double honest on
machines where that cannot run.
"""

from __future__ import annotations

import pytest

from vgpu_guard.apidouble._pods import QuantityError, canonical_quantity, decode_defaults
from vgpu_guard.apidouble.store import Store
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import NODES, PODS

from .objects import pod

FORMAT_WRONG = "quantities must match the regular expression"


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        ("32000m", "32"), ("0.5", "500m"), ("1e3", "1e3"), ("1.5e3", "1500"), ("1000m", "1"),
        ("1.500k", "1.500k"), ("10E3", "10E3"), ("0.0000000001", "1m"), ("1024Mi", "1Gi"),
        ("3000", "3k"), ("12Gi", "12Gi"), ("1.5Gi", "1536Mi"), ("0.5Ki", "512"), ("1.5Mi", "1536Ki"),
        ("1025Mi", "1025Mi"), (3000, "3k"), (0.5, "500m"),
    ],
)  # fmt: skip
def test_resource_quantities_are_stored_as_the_api_server_serialises_them(
    written: object, stored: str
) -> None:
    # quantity.go ParseQuantity/CanonicalizeBytes and defaults.go SetDefaults_ResourceList (milli round-up).
    body = pod("p", resources={"requests": {"cpu": written}})
    decode_defaults(("", "pods"), body)
    assert body["spec"]["containers"][0]["resources"]["requests"]["cpu"] == stored


@pytest.mark.parametrize(("text", "error"), [("1.5x", FORMAT_WRONG), ("1K", "suffix"), ("1e", "suffix")])
def test_unparsable_quantities_name_apimachinery_errors(text: str, error: str) -> None:
    with pytest.raises(QuantityError, match=error):
        canonical_quantity(text)


def test_an_unparsable_quantity_is_a_bad_request(store: Store) -> None:
    with pytest.raises(KubeError) as err:
        store.create(PODS, pod("p", resources={"requests": {"cpu": "1.5x"}}))
    assert err.value.code == 400 and err.value.message.startswith(
        'Pod in version "v1" cannot be handled as a Pod: ' + FORMAT_WRONG
    )


def test_pod_create_mounts_the_token_and_adds_default_tolerations(store: Store) -> None:
    # plugin/pkg/admission/serviceaccount (1.22+ projected volume), defaulttolerationseconds.
    made = store.create(PODS, pod("p"))
    spec = made["spec"]
    (volume,) = spec["volumes"]
    assert volume["name"].startswith("kube-api-access-") and "projected" in volume
    assert spec["containers"][0]["volumeMounts"] == [
        {
            "name": volume["name"],
            "readOnly": True,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        }
    ]
    assert [(t["key"], t["tolerationSeconds"]) for t in spec["tolerations"]] == [
        ("node.kubernetes.io/not-ready", 300),
        ("node.kubernetes.io/unreachable", 300),
    ]
    assert (spec["serviceAccount"], spec["preemptionPolicy"]) == ("default", "PreemptLowerPriority")


def test_node_allocatable_defaults_to_canonical_capacity(store: Store) -> None:
    made = store.create(NODES, {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "32000m"}}})
    assert made["status"]["capacity"] == made["status"]["allocatable"] == {"cpu": "32"}
