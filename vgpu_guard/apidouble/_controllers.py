"""The controllers a cluster runs that the double's store stands in for, done at once.

kube-controller-manager's serviceaccounts controller (every namespace gets ``default``), its
root-ca-cert-publisher (``kube-root-ca.crt``), the namespace controller (a deleted namespace is
emptied) and apiextensions' CRD controllers (a CRD is served and Established; its objects go
with it). A real cluster does these a moment later; tests that wait for them (as users' tooling
retries) pass on both.
"""

from __future__ import annotations

from collections.abc import Callable

from vgpu_guard.apidouble._decoding import CRDS
from vgpu_guard.apidouble._table import ObjectTable
from vgpu_guard.apidouble._types import TypeInfo, type_from_crd
from vgpu_guard.apidouble._values import Obj, deep_copy, format_time
from vgpu_guard.kube.resources import Resource

__all__ = ["ROOT_CA_CONFIG_MAP", "Controllers"]

ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
Create = Callable[..., Obj]  # the store's create(resource, body, namespace=...): the whole write path


class Controllers:
    """What the controllers do after a write, on one ``ObjectTable``; new objects go through
    ``create`` (the store's own write path, so watchers and admission see them as on a cluster)."""

    def __init__(self, table: ObjectTable, create: Create):
        self._table = table
        self._create = create
        self._root_ca_pem: str | None = None

    def _resource(self, plural: str) -> Resource:
        return self._table.types[("", plural)].resource()

    # -- namespaces -----------------------------------------------------------------------------
    def namespace_created(self, ns: str) -> None:
        """A new namespace gets its ``default`` ServiceAccount and the root CA ConfigMap."""
        self._create(self._resource("serviceaccounts"), {"metadata": {"name": "default"}}, namespace=ns)
        self._publish_root_ca_in(ns)

    def publish_root_ca(self, ca_pem: str) -> None:
        """kube-controller-manager's root-ca-cert-publisher: ``kube-root-ca.crt`` (key ``ca.crt``) in
        every namespace, now and in each new one. Only a double served over HTTPS has a CA to publish."""
        self._root_ca_pem = ca_pem
        for _, name in list(self._table.objects[("", "namespaces")]):
            self._publish_root_ca_in(name)

    def _publish_root_ca_in(self, ns: str) -> None:
        if self._root_ca_pem is None or (ns, ROOT_CA_CONFIG_MAP) in self._table.objects[("", "configmaps")]:
            return
        body = {"metadata": {"name": ROOT_CA_CONFIG_MAP}, "data": {"ca.crt": self._root_ca_pem}}
        self._create(self._resource("configmaps"), body, namespace=ns)

    def empty_namespace(self, ns: str) -> None:
        """The namespace controller's work, done at once: everything in it goes."""
        table = self._table
        seen: set[tuple[str, str]] = set()
        for info in list(table.types.values()):
            if not info.namespaced or info.key in seen:
                continue
            seen.add(info.key)
            for okey, obj in sorted(table.objects[info.key].items()):
                if okey[0] == ns:
                    table.remove(info, obj, obj)

    # -- CRDs -----------------------------------------------------------------------------------
    def crd_changed(self, crd: Obj, warnings: list[str]) -> None:
        """Serve (or re-serve) the CRD's resource and mark it Established, as its controller does."""
        table = self._table
        info = type_from_crd(crd)
        old = table.types.get(info.api_key)
        table.register(info)
        cel = sum(s.cel_rules for s in info.schemas.values())
        if cel:
            warnings.append(
                f"the API double does not evaluate x-kubernetes-validations: {cel} CEL rule(s) of "
                f"{crd['metadata']['name']} are ignored"
            )
        if old is not None:
            self._redecode(info)
        status = crd.get("status") or {}
        if any(c.get("type") == "Established" for c in status.get("conditions") or []):
            return
        now = format_time(table.clock())
        cond = [
            {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": now}
            for t, r, m in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ]
        updated = deep_copy(crd)
        updated["status"] = {
            "conditions": cond,
            "acceptedNames": deep_copy(crd["spec"]["names"]),
            "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
        }
        table.put(table.types[CRDS], "MODIFIED", updated, crd)

    def _redecode(self, info: TypeInfo) -> None:
        """A changed schema shows on read: kube-apiserver decodes what it reads from etcd with the
        CRD's current schema, pruning what it no longer declares and defaulting what it does
        (customresource_handler.go, the storage codec's ``schemaCoercingDecoder``), so stored
        objects read pruned and defaulted, with no write and no watch event."""
        schema = info.schemas.get(info.versions[0])
        if schema is None:
            return
        objects = self._table.objects[info.key]
        for key, obj in list(objects.items()):
            fresh = deep_copy(obj)
            schema.prune(fresh)
            schema.apply_defaults(fresh)
            if fresh != obj:
                objects[key] = fresh

    def crd_deleted(self, crd: Obj) -> None:
        """The CRD's objects go (watchers see each DELETED), its watches end, its type goes."""
        table = self._table
        spec = crd.get("spec") or {}
        key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        info = table.types.get(key)
        if info is None or info.crd_name is None:
            return
        for _, obj in sorted(table.objects[info.key].items()):
            table.remove(info, obj, obj)
        for w in list(table.watchers[info.key]):
            w.close()
        table.unregister(info)
