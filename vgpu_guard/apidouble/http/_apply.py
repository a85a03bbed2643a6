"""Server-side apply (``application/apply-patch+yaml``), as far as Helm v4 needs it.

Helm v4 installs and upgrades with server-side apply by default: it PATCHes each object with its
whole desired configuration, ``fieldManager=helm`` (or the SDK's name) and ``force=true``. The
double serves that subset of the apply semantics (KEP-555):

- an object that does not exist is created from the configuration (201);
- an existing one gets every field of the configuration set, and loses the fields the same
  manager applied last time but no longer names (so ``helm upgrade`` removes what the chart
  dropped); fields other writers set are kept;
- lists are atomic (the configuration's list replaces the live one), maps merge by key.

Not served: managedFields (nothing is recorded in the object), conflicts between managers (every
apply acts as ``force=true``), list merge keys (``x-kubernetes-list-type: map``), apply to a
subresource. The double remembers each manager's last configuration per object uid, in memory.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import yaml

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._status import Cause
from vgpu_guard.apidouble.frontend import Frontend, Written
from vgpu_guard.apidouble.identity import ADMIN, UserInfo
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import Resource

__all__ = ["AppliedConfigs", "server_side_apply"]

_SERVER_META = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")


@dataclass(slots=True)
class AppliedConfigs:
    """Each manager's last applied configuration, by (object uid, manager)."""

    configs: dict[tuple[str, str], Obj] = field(default_factory=dict)


def _drop_stale(live: Obj, previous: Obj, config: Obj) -> None:
    """Remove from ``live`` what ``previous`` set and ``config`` no longer names."""
    for key, old in previous.items():
        if key not in config:
            live.pop(key, None)
        elif isinstance(old, dict) and isinstance(config[key], dict) and isinstance(live.get(key), dict):
            _drop_stale(live[key], old, config[key])


def _merge(live: Obj, config: Obj) -> None:
    for key, value in config.items():
        if isinstance(value, dict) and isinstance(live.get(key), dict):
            _merge(live[key], value)
        else:
            live[key] = copy.deepcopy(value)


def _decode(raw: bytes, kind: str) -> Obj:
    try:
        config = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise st.bad_request(f"error decoding YAML: {e}") from e
    if not isinstance(config, dict):
        raise st.bad_request(f"the apply configuration must be a {kind} object")
    if config.get("kind") != kind:
        raise st.bad_request(f'the apply configuration\'s kind "{config.get("kind") or ""}" is not "{kind}"')
    return config


async def server_side_apply(
    fe: Frontend,
    res: Resource,
    name: str,
    raw: bytes,
    *,
    namespace: str | None,
    field_manager: str | None,
    user: UserInfo,
    dry_run: bool,
    memory: AppliedConfigs,
) -> tuple[Written, bool]:
    """Apply ``raw`` (YAML or JSON) to object ``name``; (the write, whether it created the object)."""
    fe.authorize(user, "patch", res, namespace=namespace, name=name)
    if not field_manager:
        why = "fieldManager: Required value: is required for apply patch"
        raise st.invalid(
            "meta.k8s.io", "PatchOptions", "", [Cause("FieldValueRequired", "fieldManager", why)]
        )
    config = _decode(raw, res.kind)
    meta = config.setdefault("metadata", {})
    if not isinstance(meta, dict) or meta.get("name", name) != name:
        raise st.bad_request(f"the apply configuration's metadata.name does not match the URL's \"{name}\"")
    meta["name"] = name
    try:
        live = fe.get(res, name, namespace=namespace, user=ADMIN)
    except KubeError as e:
        if e.code != 404:
            raise
        out = await fe.create(res, copy.deepcopy(config), namespace=namespace, user=user, dry_run=dry_run)
        if not dry_run:
            memory.configs[(out.object["metadata"].get("uid", ""), field_manager)] = config
        return out, True
    uid = live["metadata"].get("uid", "")
    previous = memory.configs.get((uid, field_manager), {})
    for key in _SERVER_META:
        (config.get("metadata") or {}).pop(key, None)
    merged = copy.deepcopy(live)
    _drop_stale(merged, previous, config)
    _merge(merged, config)
    merged["metadata"]["resourceVersion"] = live["metadata"].get("resourceVersion")
    out = await fe.update(res, merged, name=name, namespace=namespace, user=user, dry_run=dry_run)
    if not dry_run:
        memory.configs[(uid, field_manager)] = config
    return out, False
