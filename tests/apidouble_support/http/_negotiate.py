"""Content negotiation, JSON only: whether a client's ``Accept`` admits the one answer the double gives.

kube-apiserver also serves protobuf, YAML and meta.k8s.io Tables; the double does not (the real
control plane every CI run starts proves kubectl's and Helm's fidelity). The API server walks the
``Accept`` clauses by preference and serves the first it can (apiserver/pkg/endpoints/handlers/
negotiation, goautoneg); so does the double, skipping what it does not serve: kubectl's Table list
(``application/json;as=Table;v=v1;g=meta.k8s.io, ..., application/json``) and a typed client's
``application/vnd.kubernetes.protobuf, */*`` get plain JSON. An ``Accept`` with no JSON clause gets
the API server's 406 in one of its two forms: go-restful's bare one when no clause names a type the
route produces (``text/html``), else the handler's (negotiation.NewNotAcceptableError), naming the
one type the double serves.
"""

from __future__ import annotations

from vgpu_guard.apidouble import _status as st
from vgpu_guard.kube.errors import KubeError

__all__ = ["NOT_ACCEPTABLE", "admits_json", "not_acceptable"]

# NewNotAcceptableError's words, with the double's list of what it serves.
NOT_ACCEPTABLE = "only the following media types are accepted: application/json"
_JSON_RANGES = (("*", "*"), ("application", "*"), ("application", "json"))
# What kube-apiserver's routes declare they produce (go-restful's Route.Produces): an Accept naming
# none of these, parameters aside, is refused by go-restful before any handler runs.
_ROUTE_PRODUCES = frozenset(
    {"*/*", "application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
)


def admits_json(accept: str | None) -> bool:
    """Whether a clause of ``accept`` (none: ``*/*``) with a positive quality is plain JSON: a
    JSON media range without ``as=`` (a Table or other conversion is JSON of another kind)."""
    for raw in (accept or "*/*").split(","):
        media, *params = (p.strip() for p in raw.split(";"))
        kind, _, sub = media.lower().partition("/")
        options = dict(p.partition("=")[::2] for p in params)
        if (kind, sub) in _JSON_RANGES and "as" not in options and _quality(options.get("q")) > 0:
            return True
    return False


def _quality(value: str | None) -> float:
    """goautoneg's ``q``: 1 when absent, 0 when it does not parse."""
    if value is None:
        return 1.0
    try:
        return float(value)
    except ValueError:
        return 0.0


def not_acceptable(accept: str | None) -> KubeError:
    """406 NotAcceptable in the API server's Status form, for an Accept with no JSON clause:
    go-restful's (``406: Not Acceptable``, empty details) when no clause is a type the route
    produces (Route.matchesAccept), else the handler's naming what the double serves."""
    named = {raw.split(";")[0].strip().lower() for raw in (accept or "").split(",")}
    if not named & _ROUTE_PRODUCES:
        return st.raise_status(st.make_status(406, "NotAcceptable", "406: Not Acceptable", name=""))
    return st.raise_status(st.make_status(406, "NotAcceptable", NOT_ACCEPTABLE))
