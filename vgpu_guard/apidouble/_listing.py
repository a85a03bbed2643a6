"""LIST the way kube-apiserver 1.20 serves it from etcd (storage/etcd3/store.go) and its watch cache.

- Continue tokens are etcd3's: base64 (raw URL alphabet) of ``{"v":"meta.k8s.io/v1","rv":N,
  "start":"KEY\\u0000"}`` where KEY is the last key served, relative to the list's key prefix
  (``name`` in a namespace, ``namespace/name`` across namespaces). A token that does not decode is a
  400 with etcd3's wording; ``rv`` -1 continues at the newest state.
- Which requests a snapshot serves (``ListPlan``): a continue token (its ``rv``), ``Exact``, and the
  legacy ``resourceVersion=N`` with a ``limit`` read the state at N; everything else reads the
  newest state. ``resourceVersion=0`` (and any other non-exact read without a limit) comes from the
  watch cache, which ignores ``limit``.
- ``ListOptions`` are validated as metainternalversion validation does (422).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._gotext import (
    GoJSONError,
    b64_raw_url_decode,
    go_json_loads,
    go_path_clean,
    json_kind,
    parse_uint_error,
)
from vgpu_guard.apidouble._status import Cause, field_error

__all__ = ["ListPlan", "decode_continue", "encode_continue", "list_key", "plan_list"]

TOKEN_VERSION = "meta.k8s.io/v1"
EXPIRED_LIST = "The resourceVersion for the provided list is too old."
EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - "
    "objects that were created, modified, or deleted between the time the first chunk was returned and "
    "now may show up in the list."
)


def list_key(namespace: str, name: str, *, across_namespaces: bool) -> str:
    """An object's etcd key relative to the list's prefix (what continue tokens name)."""
    return f"{namespace}/{name}" if across_namespaces else name


def encode_continue(rv: int, last_key: str) -> str:
    """etcd3's ``encodeContinue``: the next page starts right after ``last_key``."""
    token = {"v": TOKEN_VERSION, "rv": rv, "start": last_key + "\x00"}
    raw = json.dumps(token, separators=(",", ":"), ensure_ascii=False)
    raw = raw.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")  # Go's HTML escaping
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _invalid_token(why: str) -> Exception:
    return st.bad_request(f"invalid continue token: continue key is not valid: {why}")


_TOKEN_FIELDS = {"v": "string", "rv": "int64", "start": "string"}


def decode_continue(token: str) -> tuple[str, int]:
    """etcd3's ``decodeContinue``: (start key, resourceVersion), or a 400 with its wording."""
    try:
        data = b64_raw_url_decode(token)
    except ValueError as e:
        raise _invalid_token(str(e)) from e
    try:
        parsed = go_json_loads(data)
    except GoJSONError as e:
        raise _invalid_token(str(e)) from e
    fields: dict[str, Any] = {"v": "", "rv": 0, "start": ""}
    if isinstance(parsed, dict):
        for key, value in parsed.items():
            field = next((f for f in _TOKEN_FIELDS if f == key.lower()), None)  # Go matches keys loosely
            if field is None or value is None:
                continue
            want = _TOKEN_FIELDS[field]
            if want == "string" and not isinstance(value, str):
                raise _invalid_token(_go_type_error(value, f"continueToken.{field}", "string"))
            if want == "int64" and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise _invalid_token(_go_type_error(value, f"continueToken.{field}", "int64"))
            if want == "int64" and (not float(value).is_integer() or not -(2**63) <= value < 2**63):
                raise _invalid_token(_go_type_error(value, "continueToken.rv", "int64", number=True))
            fields[field] = int(value) if want == "int64" else value
    elif parsed is not None:
        raise _invalid_token(
            f"json: cannot unmarshal {json_kind(parsed)} into Go value of type etcd3.continueToken"
        )
    if fields["v"] != TOKEN_VERSION:
        raise _invalid_token(f'server does not recognize this encoded version "{fields["v"]}"')
    if fields["rv"] == 0:
        raise _invalid_token(f"incorrect encoded start resourceVersion (version {TOKEN_VERSION})")
    start = str(fields["start"])
    if not start:
        raise _invalid_token(f"encoded start key empty (version {TOKEN_VERSION})")
    key = start if start.startswith("/") else "/" + start
    if go_path_clean(key) != key:
        raise _invalid_token(start)
    return key[1:], int(fields["rv"])


def _go_type_error(value: Any, field: str, go_type: str, *, number: bool = False) -> str:
    what = f"number {value}" if number else json_kind(value)
    return f"json: cannot unmarshal {what} into Go struct field {field} of type {go_type}"


@dataclass(frozen=True, slots=True)
class ListPlan:
    """How one LIST is served: at which state, from where, and which page."""

    at: int | None  # the snapshot's resourceVersion; None: the newest state
    minimum: int | None  # "not older than": a newer resourceVersion than the store's is a 504
    limit: int  # 0: no limit
    start: str | None  # continue from after this key (relative to the list's prefix)
    from_continue: bool  # the snapshot came from a continue token (its expiry says so)
    continue_latest: bool  # a token with rv -1: continue at the newest state


def _options_invalid(causes: list[Cause]) -> Exception:
    return st.invalid("meta.k8s.io", "ListOptions", "", causes)


def plan_list(
    *,
    resource_version: str | None,
    resource_version_match: str | None,
    limit: int | None,
    continue_token: str | None,
) -> ListPlan:
    """Validate the options (ValidateListOptions, 422) and decide how the list is served."""
    rv, match, token = resource_version or "", resource_version_match or "", continue_token or ""
    if match:
        causes = match_causes(rv, match, token, watch=False)
        if causes:
            raise _options_invalid(causes)
    return _plan(rv, match, token, limit)


def validate_watch_options(resource_version: str | None, resource_version_match: str | None) -> None:
    """ValidateListOptions for a watch: 1.20 forbids resourceVersionMatch there (422), which is what
    a 1.27+ client's streaming list (``sendInitialEvents=true&resourceVersionMatch=NotOlderThan``)
    meets, so it falls back to LIST then WATCH; ``sendInitialEvents`` itself is unknown to 1.20 and
    ignored."""
    if resource_version_match:
        causes = match_causes(resource_version or "", resource_version_match, "", watch=True)
        if causes:
            raise _options_invalid(causes)


def match_causes(rv: str, match: str, token: str, *, watch: bool) -> list[Cause]:
    """The ValidateListOptions causes for ``resourceVersionMatch``, in the API server's order."""
    path, causes = "resourceVersionMatch", list[Cause]()
    if watch:
        causes.append(field_error("Forbidden", path, "resourceVersionMatch is forbidden for watch"))
    if not rv:
        why = "resourceVersionMatch is forbidden unless resourceVersion is provided"
        causes.append(field_error("Forbidden", path, why))
    if token:
        why = "resourceVersionMatch is forbidden when continue is provided"
        causes.append(field_error("Forbidden", path, why))
    if match not in ("Exact", "NotOlderThan"):
        why = f'"{match}": supported values: "Exact", "NotOlderThan", ""'
        causes.append(field_error("NotSupported", path, why))
    if match == "Exact" and rv == "0":
        why = 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
        causes.append(field_error("Forbidden", path, why))
    return causes


def _plan(rv: str, match: str, token: str, limit: int | None) -> ListPlan:
    page = limit if limit is not None and limit > 0 else 0
    if rv and not token and not (page and rv != "0") and match != "Exact":
        # The watch cache (cacher.go GetToList): no pages, at least as new as rv.
        problem = parse_uint_error(rv)
        if problem is not None:
            raise st.internal(f'resourceVersion: Invalid value: "{rv}": {problem}')
        return ListPlan(None, int(rv) or None, 0, None, False, False)
    at: int | None = None
    minimum: int | None = None
    if rv:
        problem = parse_uint_error(rv)
        if problem is not None:
            raise st.bad_request(
                f'invalid resource version: resourceVersion: Invalid value: "{rv}": {problem}'
            )
    if token:
        start, token_rv = decode_continue(token)
        if rv and rv != "0":
            raise st.bad_request("specifying resource version is not allowed when using continue")
        if token_rv > 0:
            return ListPlan(token_rv, None, page, start, True, False)
        return ListPlan(None, None, page, start, True, True)
    if rv:
        wanted = int(rv)
        if match == "Exact" or (match == "" and page and wanted > 0):
            at = wanted
        elif match == "NotOlderThan":
            minimum = wanted or None
    return ListPlan(at, minimum, page, None, False, False)


def state_at(
    current: dict[Any, Any],
    events: list[tuple[int, str, Any, Any]],
    at: int,
    key_of: Any,
) -> dict[Any, Any]:
    """The objects as they stood at resourceVersion ``at``: ``current`` with every later event of
    ``events`` (rv, type, object, previous object; oldest first) undone."""
    state = dict(current)
    for rv, etype, obj, prev in reversed(events):
        if rv <= at:
            break
        key = key_of(obj)
        if etype == "ADDED":
            state.pop(key, None)
        else:
            state[key] = prev
    return state


def too_large(wanted: int, current: int) -> Exception:
    """storage.NewTooLargeResourceVersionError: a not-older-than read the store cannot serve yet."""
    status = st.make_status(
        504, "Timeout", f"Timeout: Too large resource version: {wanted}, current: {current}"
    )
    status["details"] = {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    }
    return st.raise_status(status)


def future_revision() -> Exception:
    """etcd's answer to a read at a revision it has not reached (a plain error: 500, no reason)."""
    return st.internal("etcdserver: mvcc: required revision is a future revision")


def expired_continue(next_token: str) -> Exception:
    """etcd3's handleCompactedErrorForPaging: 410 with a token that continues at the newest state."""
    status = st.make_status(410, "Expired", EXPIRED_CONTINUE)
    status["metadata"] = {"continue": next_token}
    return st.raise_status(status)
