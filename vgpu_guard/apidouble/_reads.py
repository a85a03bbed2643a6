"""GET, LIST and WATCH on the double's object table, as kube-apiserver 1.20 serves them.

Reads never change the table (except that Events past their TTL go first, as etcd's lease expiry
would have removed them); each read hands out copies made by the table's ``present``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._gotext import parse_uint_error
from vgpu_guard.apidouble._listing import (
    EXPIRED_LIST,
    ListPlan,
    encode_continue,
    expired_continue,
    future_revision,
    list_key,
    plan_list,
    state_at,
    too_large,
)
from vgpu_guard.apidouble._selectors import FieldSelector, LabelSelector, SelectorError, UnsupportedFieldLabel
from vgpu_guard.apidouble._table import ObjectTable, key_of
from vgpu_guard.apidouble._types import META_FIELDS, TypeInfo
from vgpu_guard.apidouble._values import Obj
from vgpu_guard.apidouble._watches import Watch
from vgpu_guard.kube.client import ObjectList
from vgpu_guard.kube.resources import Resource

__all__ = ["Reads", "parse_selectors"]

_TYPE_KEYS = ("apiVersion", "kind")
_Objects = dict[tuple[str, str], Obj]
_Keys = list[tuple[str, tuple[str, str]]]


@dataclass(frozen=True, slots=True)
class _ListQuery:
    """What one LIST filters by and how it reads: the pieces every page step needs."""

    info: TypeInfo
    version: str
    labels: LabelSelector
    fields: FieldSelector
    across: bool  # a namespaced resource listed across namespaces (keys sort by namespace too)
    at_present: bool  # the current objects (not a snapshot at an older resourceVersion)


class Reads:
    """GET, LIST and WATCH over one ``ObjectTable``."""

    def __init__(self, table: ObjectTable):
        self._table = table

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        table = self._table
        table.expire_events()
        info = table.type_of(resource)
        return table.present(info, table.stored(info, namespace, name), resource.version, current=True)

    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        limit: int | None,
        continue_token: str | None,
        resource_version: str | None,
        resource_version_match: str | None,
    ) -> ObjectList:
        """LIST as kube-apiserver 1.20 serves it (``_listing``): in etcd key order, a snapshot for
        continue tokens and exact reads, pages filled the way etcd3's store fills them."""
        table = self._table
        table.expire_events()
        info = table.type_of(resource)
        labels, fields = parse_selectors(info, label_selector, field_selector)
        plan = plan_list(
            resource_version=resource_version,
            resource_version_match=resource_version_match,
            limit=limit,
            continue_token=continue_token,
        )
        if plan.minimum is not None and plan.minimum > table.rv:
            raise too_large(plan.minimum, table.rv)
        across = info.namespaced and not namespace
        objects, list_rv = table.objects[info.key], table.rv
        if plan.at is not None:
            objects = self._snapshot(info, plan.at, plan.from_continue, plan.start, across)
            list_rv = plan.at
        keys = _ordered_keys(objects, namespace if info.namespaced and namespace else None, across, plan)
        query = _ListQuery(info, resource.version, labels, fields, across, at_present=plan.at is None)
        return self._page(query, objects, keys, plan, list_rv)

    def _page(
        self, q: _ListQuery, objects: _Objects, keys: _Keys, plan: ListPlan, list_rv: int
    ) -> ObjectList:
        """Fill one page from ``keys`` (already in etcd order, from the continue point on)."""
        items: list[Obj] = []
        token, remaining = "", None
        for i, (_, key) in enumerate(keys):
            if plan.limit and len(items) >= plan.limit:
                # etcd3's store: a full page hands out a token while any key follows, matching
                # or not; it counts what is left only when no selector filters.
                last = items[-1]["metadata"]
                token = encode_continue(
                    list_rv,
                    list_key(last.get("namespace", ""), last["name"], across_namespaces=q.across),
                )
                if not q.labels and not q.fields:
                    remaining = len(keys) - i
                break
            item = self._item(q, objects[key])
            if item is not None:
                items.append(item)
        return ObjectList(
            items=items, resource_version=str(list_rv), continue_token=token, remaining_item_count=remaining
        )

    def _item(self, q: _ListQuery, stored: Obj) -> Obj | None:
        """The client's copy of ``stored`` if it passes the selectors, else None."""
        info = q.info
        if q.labels and not q.labels.matches(stored["metadata"].get("labels")):
            return None
        # A LIST at an older resourceVersion hands out that time's objects, not the current ones.
        copy = functools.partial(self._table.present, info, stored, q.version, current=q.at_present)
        view = stored if info.stored_as is None else copy()
        if q.fields and not q.fields.matches(view, info.field_getter):
            return None
        item = copy() if view is stored else view  # an Event's view is its own fresh copy
        if info.crd_name is None:
            # kube-apiserver's built-in LISTs name the type once, on the list, not on each item.
            for type_key in _TYPE_KEYS:
                item.pop(type_key, None)
        return item

    def _snapshot(
        self, info: TypeInfo, at: int, from_continue: bool, start: str | None, across: bool
    ) -> _Objects:
        """The objects of ``info`` at resourceVersion ``at`` (the watch window stands in for etcd's
        history: older than the window is compacted, newer than the store is the future)."""
        table = self._table
        if at > table.rv:
            raise future_revision()
        hist = table.history[info.key]
        if at < hist.evicted_upto:
            if from_continue:
                raise expired_continue(encode_continue(-1, (start or "\x00")[:-1]))
            raise st.expired(EXPIRED_LIST)
        return state_at(table.objects[info.key], list(hist.events), at, lambda obj: key_of(info, obj))

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str | None,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
    ) -> Watch:
        """Start a watch. ``""``/``"0"``/None: synthetic ADDED of the current state, then changes;
        ``N``: every change after N, or ``Expired`` when N has left the window."""
        table = self._table
        table.expire_events()
        info = table.type_of(resource)
        labels, fields = parse_selectors(info, label_selector, field_selector)
        w = Watch(
            table,
            info,
            version=resource.version,
            namespace=namespace if info.namespaced and namespace else None,
            labels=labels,
            fields=fields,
        )
        hist = table.history[info.key]
        if not resource_version or resource_version == "0":
            for key in sorted(table.objects[info.key]):
                w.offer("ADDED", table.objects[info.key][key], None)
            w.since = hist.last_rv
        else:
            since = w.since = _parse_rv(resource_version)
            if since < hist.evicted_upto:
                oldest = hist.events[0][0] if hist.events else table.rv + 1
                raise st.expired(f"too old resource version: {since} ({oldest - 1})")
            for rv, etype, obj, prev in hist.events:
                if rv > since:
                    w.offer(etype, obj, prev, current=False)
        table.watchers[info.key].add(w)
        return w


def _ordered_keys(objects: _Objects, namespace: str | None, across: bool, plan: ListPlan) -> _Keys:
    """The keys in etcd's order (by their etcd key text), from the continue point on."""
    keys = sorted(
        (list_key(k[0], k[1], across_namespaces=across), k)
        for k in objects
        if namespace is None or k[0] == namespace
    )
    if plan.start is not None:
        keys = [(text, k) for text, k in keys if text >= plan.start]
    return keys


def parse_selectors(
    info: TypeInfo, label_selector: str | None, field_selector: str | None
) -> tuple[LabelSelector, FieldSelector]:
    """Both selectors parsed, or a 400 in the words the API server uses for that kind."""
    try:
        return (
            LabelSelector.parse(label_selector),
            FieldSelector.parse(field_selector, supported=info.field_labels),
        )
    except UnsupportedFieldLabel as e:
        if info.field_labels == META_FIELDS and info.crd_name is None:
            # runtime.DefaultMetaV1FieldSelectorConversion: kinds without their own field labels.
            why = f'"{e.label}" is not a known field selector: only "metadata.name", "metadata.namespace"'
            raise st.bad_request(why) from e
        raise st.bad_request(str(e)) from e
    except SelectorError as e:
        raise st.bad_request(str(e)) from e


def _parse_rv(text: str) -> int:
    """The watch cache's ParseResourceVersion: an error it returns as is (500, no reason)."""
    problem = parse_uint_error(text)
    if problem is not None:
        raise st.internal(f'resourceVersion: Invalid value: "{text}": {problem}')
    return int(text)
