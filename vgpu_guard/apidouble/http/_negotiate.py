"""Content negotiation: which of the answers a client's ``Accept`` allows the double can give.

kubectl asks for more than the double serves: protobuf from typed clients
(``application/vnd.kubernetes.protobuf, */*``), Tables from ``kubectl get``
(``application/json;as=Table;v=v1;g=meta.k8s.io, ..., application/json``). The API server walks
the clauses by preference (quality, then specificity: goautoneg) and serves the first it can
(apiserver/pkg/endpoints/handlers/negotiation); so does the double, skipping what it does not
serve, so a client that names a JSON alternative gets JSON. When no clause is servable the answer
is 406 NotAcceptable naming what was asked and what is served, never a hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from vgpu_guard.apidouble import _status as st
from vgpu_guard.kube.errors import KubeError

__all__ = ["Output", "negotiate", "not_acceptable"]

PROTOBUF = "application/vnd.kubernetes.protobuf"
_META = "meta.k8s.io"
# The 1.20 server's words for an Accept it cannot meet (negotiation.NewNotAcceptableError), with
# the double's list: it does not serve protobuf, so it does not claim it.
ACCEPTED_TEXT = "only the following media types are accepted: application/json, application/yaml"


@dataclass(frozen=True, slots=True)
class Output:
    """What to answer: JSON, YAML, or a meta.k8s.io Table (``table_version`` v1 or v1beta1)."""

    format: Literal["json", "yaml", "table"] = "json"
    table_version: str = "v1"


@dataclass(frozen=True, slots=True)
class _Clause:
    type: str
    subtype: str
    q: float
    params: dict[str, str] = field(default_factory=dict)

    @property
    def specificity(self) -> int:
        return (self.type != "*") + (self.subtype != "*")


def _clauses(accept: str) -> list[_Clause]:
    """goautoneg.ParseAccept: by quality, then specificity; malformed entries are skipped."""
    out: list[_Clause] = []
    for raw in accept.split(","):
        parts = [p.strip() for p in raw.split(";")]
        media, _, sub = parts[0].partition("/")
        if not media or not sub:
            continue
        params: dict[str, str] = {}
        q = 1.0
        for part in parts[1:]:
            key, _, value = part.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
            elif key.strip():
                params[key.strip()] = value.strip()
        out.append(_Clause(media.lower(), sub.lower(), q, params))
    return sorted(out, key=lambda c: (-c.q, -c.specificity))


def negotiate(accept: str | None, *, table: bool) -> Output | None:
    """The first clause the double serves; None when none is (``table``: Tables can be served)."""
    for clause in _clauses(accept or "*/*"):
        if clause.q <= 0:
            continue
        pair = (clause.type, clause.subtype)
        as_kind = clause.params.get("as")
        if pair in (("application", "yaml"),) and as_kind is None:
            return Output("yaml")
        if pair not in (("*", "*"), ("application", "*"), ("application", "json")):
            continue
        if as_kind is None:
            return Output("json")
        version = clause.params.get("v")
        if table and as_kind == "Table" and clause.params.get("g") == _META and version in ("v1", "v1beta1"):
            return Output("table", version)
    return None


def not_acceptable(accept: str | None, what: str) -> KubeError:
    """406 for an Accept with nothing the double serves, naming what was asked."""
    if accept and PROTOBUF in accept:
        message = f"the API double does not serve {PROTOBUF} (asked for {what}); {ACCEPTED_TEXT}"
    elif accept and "as=" in accept:
        message = f"the API double does not serve {accept} for {what}; {ACCEPTED_TEXT}"
    else:
        message = ACCEPTED_TEXT
    return st.raise_status(st.make_status(406, "NotAcceptable", message))
