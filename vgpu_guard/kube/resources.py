"""The API resources vgpu-guard reads or writes, named once.

Why a table of our own instead of the client's typed APIs: every shell (controller, webhook caches,
simulate, the e2e suite) addresses objects the same way, as plain dicts under a
group/version/plural, so the production adapter, the in-memory adapter and the API double agree on
one vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BINDINGS",
    "CRDS",
    "EVENTS",
    "GANG_PLACEMENTS",
    "HYPERNODES",
    "LEASES",
    "LEDGERS",
    "MUTATING_WEBHOOKS",
    "NAMESPACES",
    "NODES",
    "PERSISTENT_VOLUMES",
    "PERSISTENT_VOLUME_CLAIMS",
    "PODGROUPS",
    "PODS",
    "QUEUES",
    "SECRETS",
    "SERVICE_ACCOUNTS",
    "VALIDATING_WEBHOOKS",
    "Resource",
]


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource: where it lives and whether names are per namespace."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The REST path, as kube-apiserver serves it."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
PERSISTENT_VOLUME_CLAIMS = Resource(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True
)
PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
# The legacy door to pods/binding: POST /api/v1/namespaces/NS/bindings with a Binding names its pod
# in metadata.name (create only; kube-apiserver's LegacyBindingREST, pkg/registry/core/pod/storage/
# storage.go). Admission and RBAC see resource "bindings", not pods/binding: ``create(BINDINGS, ...)``.
BINDINGS = Resource("", "v1", "bindings", "Binding", namespaced=True)
SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)
VALIDATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
QUEUES = Resource("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False)
PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", namespaced=True)
HYPERNODES = Resource("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", namespaced=False)
# Ours: one ledger object per node (see docs/design/ledger.md) and one placement per gang.
LEDGERS = Resource("vgpu-guard.io", "v1alpha1", "gpuledgers", "GPULedger", namespaced=False)
GANG_PLACEMENTS = Resource("vgpu-guard.io", "v1alpha1", "gangplacements", "GangPlacement", namespaced=True)
