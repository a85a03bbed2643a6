"""kube-apiserver's built-in admission plugins that the double runs before any webhook.

NamespaceLifecycle (no objects in missing or terminating namespaces), ServiceAccount (the pod's
account must exist; its token volume is mounted) and Priority (priorityClassName resolved to
``spec.priority``). They read other objects (namespaces, accounts, PriorityClasses), so they sit
beside the object table rather than in the pure pod rules of ``_pods``.
"""

from __future__ import annotations

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._pods import mount_service_account
from vgpu_guard.apidouble._status import Cause
from vgpu_guard.apidouble._table import ObjectTable
from vgpu_guard.apidouble._types import TypeInfo
from vgpu_guard.apidouble._values import Obj, meta_of

__all__ = ["BuiltinAdmission"]


def _pod_name(pod: Obj) -> str:
    return str(meta_of(pod).get("name") or meta_of(pod).get("generateName") or "")


class BuiltinAdmission:
    """The built-in plugins, reading the objects they need from one ``ObjectTable``."""

    def __init__(self, table: ObjectTable):
        self._table = table

    def namespace_lifecycle(self, ns: str, info: TypeInfo, name: str, *, plural: str = "") -> None:
        """NamespaceLifecycle admission: no objects in missing or terminating namespaces.

        ``plural``: the resource the request names when it is not ``info``'s (``bindings``)."""
        space = self._table.objects[("", "namespaces")].get(("", ns))
        if space is None:
            raise st.not_found("", "namespaces", ns)
        if (space.get("metadata") or {}).get("deletionTimestamp"):
            plural = plural or info.plural
            message = (
                f'{st.qualified(info.group, plural)} "{name}" is forbidden: unable to create new '
                f"content in namespace {ns} because it is being terminated"
            )
            # lifecycle/admission.go adds the cause clients look for (NamespaceTerminatingCause).
            cause = Cause("NamespaceTerminating", "metadata.namespace", f"namespace {ns} is being terminated")
            status = st.make_status(
                403, "Forbidden", message, name=name, group=info.group, kind=plural, causes=[cause]
            )
            raise st.raise_status(status)

    def service_account(self, ns: str, pod: Obj) -> None:
        """The ServiceAccount admission plugin: a pod names an account (``default`` unless set)
        that must exist in its namespace."""
        spec = pod.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        if not spec.get("serviceAccountName"):
            spec["serviceAccountName"] = spec["serviceAccount"] = "default"
        account = spec["serviceAccountName"]
        found = self._table.objects[("", "serviceaccounts")].get((ns, account))
        if found is None:
            name = _pod_name(pod)
            raise st.forbidden(
                f'pods "{name}" is forbidden: error looking up service account {ns}/{account}: '
                f'serviceaccount "{account}" not found',
                group="",
                plural="pods",
                name=name,
            )
        mount_service_account(pod, found, lambda: self._table.random_name(5))

    def priority(self, pod: Obj) -> None:
        """The Priority admission plugin: priorityClassName -> spec.priority (or global default)."""
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        pc = self._priority_class(pod, spec)
        value = int(pc.get("value", 0)) if pc is not None else 0
        policy = (pc or {}).get("preemptionPolicy") or "PreemptLowerPriority"
        # Any priority or preemptionPolicy the client sent must equal the computed one, with or
        # without a class name (admitPod: "must not be provided in pod spec").
        name = meta_of(pod).get("name") or meta_of(pod).get("generateName") or ""
        for key, what, computed in (
            ("priority", "integer value of priority", value),
            ("preemptionPolicy", "string value of PreemptionPolicy", policy),
        ):
            if spec.get(key) is not None and spec[key] != computed:
                raise st.forbidden(
                    f'pods "{name}" is forbidden: the {what} ({spec[key]}) must not be provided in pod '
                    f"spec; priority admission controller computed {computed} from the given "
                    "PriorityClass name",
                    plural="pods",
                    name=name,
                )
        spec["priority"] = value
        spec["preemptionPolicy"] = policy

    def _priority_class(self, pod: Obj, spec: Obj) -> Obj | None:
        """The class the pod names (403 when missing), else the global default, if any."""
        classes = self._table.objects[("scheduling.k8s.io", "priorityclasses")]
        wanted = spec.get("priorityClassName")
        if wanted:
            pc = classes.get(("", wanted))
            if pc is None:
                name = meta_of(pod).get("name") or meta_of(pod).get("generateName") or ""
                raise st.forbidden(
                    f'pods "{name}" is forbidden: no PriorityClass with name {wanted} was found',
                    plural="pods",
                    name=name,
                )
            return pc
        pc = next((c for c in classes.values() if c.get("globalDefault")), None)
        if pc is not None:
            spec["priorityClassName"] = pc["metadata"]["name"]
        return pc
