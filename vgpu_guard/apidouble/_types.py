"""The resource types the double serves: built-ins, and custom resources registered by CRDs.

A ``TypeInfo`` says everything the store and the HTTP layer need about one REST resource: where
it lives (group, served versions, plural, scope), which subresources exist, what CREATE does to
``status``, which field-selector labels it supports and, for custom resources, the structural
schema of each served version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from vgpu_guard.apidouble._pods import pod_field
from vgpu_guard.apidouble._schema import StructuralSchema, schema_problems
from vgpu_guard.apidouble._status import Cause
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.resources import Resource

__all__ = ["BUILTIN_TYPES", "TypeInfo", "crd_problems", "default_crd", "type_from_crd"]

META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
StatusOnCreate = Literal["reset-pod", "drop", "keep"]


def _meta_field(obj: Obj, name: str) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get(name.split(".", 1)[1], "")) if name in META_FIELDS else ""


def _node_field(obj: Obj, name: str) -> str:
    if name == "spec.unschedulable":
        return "true" if (obj.get("spec") or {}).get("unschedulable") else "false"
    return _meta_field(obj, name)


def _dotted_field(obj: Obj, name: str) -> str:
    """Plain dotted lookup (events' involvedObject.name, reason, type, ...)."""
    cur: Any = obj
    for part in name.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


@dataclass(slots=True)
class TypeInfo:
    """One REST resource as served; ``key`` (group, plural) is where its objects are stored."""

    group: str
    versions: tuple[str, ...]  # served versions, preferred (storage) first
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()  # of any served version
    status_on_create: StatusOnCreate = "keep"
    field_labels: frozenset[str] = META_FIELDS
    field_getter: Callable[[Obj, str], str] = _meta_field
    schemas: dict[str, StructuralSchema] = field(default_factory=dict)
    crd_name: str | None = None
    categories: tuple[str, ...] = ()
    # events.k8s.io/v1 Events are the core v1 Events seen through another schema (one storage).
    stored_as: tuple[str, str] | None = None
    version_subresources: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        """Where the objects live (shared by two APIs for Events)."""
        return self.stored_as or (self.group, self.plural)

    @property
    def api_key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def resource(self, version: str | None = None) -> Resource:
        return Resource(self.group, version or self.versions[0], self.plural, self.kind, self.namespaced)

    def api_version(self, version: str | None = None) -> str:
        v = version or self.versions[0]
        return f"{self.group}/{v}" if self.group else v

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def subresources_in(self, version: str) -> frozenset[str]:
        """The subresources ``version`` serves (a CRD declares them per version)."""
        return self.version_subresources.get(version, self.subresources)


_POD_FIELDS = frozenset(
    {
        "metadata.name", "metadata.namespace", "spec.nodeName", "spec.schedulerName", "spec.restartPolicy",
        "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.nominatedNodeName",
        "status.podIP",
    }
)  # fmt: skip
_EVENT_FIELDS = frozenset(
    {
        "metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
        "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
        "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
        "source", "type",
    }
)  # fmt: skip
_NEW_EVENT_FIELDS = frozenset(
    {
        "metadata.name", "metadata.namespace", "regarding.kind", "regarding.namespace", "regarding.name",
        "regarding.uid", "reason", "reportingController", "type",
    }
)  # fmt: skip

_ADM = "admissionregistration.k8s.io"
_RBAC = "rbac.authorization.k8s.io"
BUILTIN_TYPES: tuple[TypeInfo, ...] = (
    TypeInfo("", ("v1",), "namespaces", "Namespace", False, "namespace", ("ns",), frozenset({"status"}),
             field_labels=META_FIELDS | {"status.phase"}, field_getter=_dotted_field),
    TypeInfo("", ("v1",), "nodes", "Node", False, "node", ("no",), frozenset({"status"}),
             field_labels=META_FIELDS | {"spec.unschedulable"}, field_getter=_node_field),
    TypeInfo("", ("v1",), "pods", "Pod", True, "pod", ("po",), frozenset({"status", "binding"}),
             "reset-pod", _POD_FIELDS, pod_field, categories=("all",)),
    TypeInfo("", ("v1",), "events", "Event", True, "event", ("ev",),
             field_labels=_EVENT_FIELDS, field_getter=_dotted_field),
    TypeInfo("", ("v1",), "secrets", "Secret", True, "secret",
             field_labels=META_FIELDS | {"type"}, field_getter=_dotted_field),
    TypeInfo("", ("v1",), "configmaps", "ConfigMap", True, "configmap", ("cm",)),
    TypeInfo("", ("v1",), "podtemplates", "PodTemplate", True, "podtemplate"),
    TypeInfo("", ("v1",), "serviceaccounts", "ServiceAccount", True, "serviceaccount", ("sa",)),
    # Stored as sent (no defaulting, validation or controller: no ReplicaSet or pod ever appears),
    # so manifests that carry a Deployment apply and meet the webhooks as on a cluster.
    TypeInfo("apps", ("v1",), "deployments", "Deployment", True, "deployment", ("deploy",),
             frozenset({"status"}), "drop", categories=("all",)),
    TypeInfo("events.k8s.io", ("v1",), "events", "Event", True, "event", ("ev",),
             field_labels=_NEW_EVENT_FIELDS, field_getter=_dotted_field, stored_as=("", "events")),
    TypeInfo("coordination.k8s.io", ("v1",), "leases", "Lease", True, "lease"),
    TypeInfo("scheduling.k8s.io", ("v1",), "priorityclasses", "PriorityClass", False, "priorityclass",
             ("pc",)),
    TypeInfo(_ADM, ("v1",), "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False,
             "mutatingwebhookconfiguration", categories=("api-extensions",)),
    TypeInfo(_ADM, ("v1",), "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False,
             "validatingwebhookconfiguration", categories=("api-extensions",)),
    TypeInfo("apiextensions.k8s.io", ("v1",), "customresourcedefinitions", "CustomResourceDefinition", False,
             "customresourcedefinition", ("crd", "crds"), frozenset({"status"}),
             categories=("api-extensions",)),
    TypeInfo(_RBAC, ("v1",), "roles", "Role", True, "role"),
    TypeInfo(_RBAC, ("v1",), "rolebindings", "RoleBinding", True, "rolebinding"),
    TypeInfo(_RBAC, ("v1",), "clusterroles", "ClusterRole", False, "clusterrole"),
    TypeInfo(_RBAC, ("v1",), "clusterrolebindings", "ClusterRoleBinding", False, "clusterrolebinding"),
)  # fmt: skip


def default_crd(crd: Obj) -> None:
    """apiextensions/v1 defaults (SetDefaults_CustomResourceDefinitionSpec), in place."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str) and names["kind"]:
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    if not isinstance(spec.get("conversion"), dict):
        spec["conversion"] = {"strategy": "None"}
    elif not spec["conversion"].get("strategy"):
        spec["conversion"]["strategy"] = "None"


def crd_problems(crd: Obj) -> list[Cause]:
    """The CRD checks of apiextensions validation that decide whether we can serve it at all."""
    causes: list[Cause] = []
    spec: Obj = crd["spec"] if isinstance(crd.get("spec"), dict) else {}
    names: Obj = spec["names"] if isinstance(spec.get("names"), dict) else {}
    group, plural = spec.get("group"), names.get("plural")

    def need(path: str, ok: bool, why: str = "Required value") -> None:
        if not ok:
            reason = "FieldValueRequired" if why.startswith("Required value") else "FieldValueInvalid"
            causes.append(Cause(reason, path, f"{path}: {why}"))

    need("spec.group", bool(group) and isinstance(group, str))
    if group and isinstance(group, str) and "." not in group:
        need("spec.group", False, f'Invalid value: "{group}": should be a domain with at least one dot')
    need("spec.names.plural", bool(plural) and isinstance(plural, str))
    need("spec.names.kind", bool(names.get("kind")))
    scope = spec.get("scope")
    need("spec.scope", bool(scope))
    if scope and scope not in ("Namespaced", "Cluster"):
        why = f'Unsupported value: "{scope}": supported values: "Cluster", "Namespaced"'
        causes.append(Cause("FieldValueNotSupported", "spec.scope", f"spec.scope: {why}"))
    name = (crd.get("metadata") or {}).get("name")
    if group and plural:
        need(
            "metadata.name",
            name == f"{plural}.{group}",
            f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
        )
    versions: list[Any] = spec["versions"] if isinstance(spec.get("versions"), list) else []
    need("spec.versions", bool(versions))
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    need(
        "spec.versions",
        len(storage) == 1 or not versions,
        "Invalid value: must have exactly one version marked as storage version",
    )
    schemas = [
        (v.get("schema") or {}).get("openAPIV3Schema") if isinstance(v, dict) else None for v in versions
    ]
    if schemas and all(isinstance(x, dict) for x in schemas) and all(x == schemas[0] for x in schemas):
        # One schema for all versions: the internal API holds it once, as spec.validation.
        causes += schema_problems(schemas[0], "spec.validation.openAPIV3Schema")
        return causes
    for i, schema in enumerate(schemas):
        at = f"spec.versions[{i}].schema.openAPIV3Schema"
        need(at, isinstance(schema, dict), "Required value: schemas are required")
        if isinstance(schema, dict):
            causes += schema_problems(schema, at)
    return causes


def type_from_crd(crd: Obj) -> TypeInfo:
    """The TypeInfo a valid CRD makes served (call ``crd_problems`` first)."""
    spec = crd["spec"]
    names = spec["names"]
    versions = [v for v in spec["versions"] if v.get("served", True)]
    versions.sort(key=lambda v: not v.get("storage"))
    subresources: set[str] = set()
    for v in versions:
        subresources.update((v.get("subresources") or {}).keys())
    return TypeInfo(
        group=spec["group"],
        versions=tuple(v["name"] for v in versions),
        plural=names["plural"],
        kind=names["kind"],
        namespaced=spec["scope"] == "Namespaced",
        singular=names.get("singular") or names["kind"].lower(),
        short_names=tuple(names.get("shortNames") or ()),
        subresources=frozenset(subresources),
        version_subresources={v["name"]: frozenset((v.get("subresources") or {}).keys()) for v in versions},
        status_on_create="drop" if "status" in subresources else "keep",
        schemas={v["name"]: StructuralSchema(v["schema"]["openAPIV3Schema"]) for v in versions},
        crd_name=crd["metadata"]["name"],
        categories=tuple(names.get("categories") or ()),
    )
