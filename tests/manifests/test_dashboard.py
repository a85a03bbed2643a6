"""The chart's Grafana dashboard: shipped as the sidecar expects, and every query names real series.

The processes run in-process here (the admission app answering reviews, an allocation controller
and a queue audit on the API double, a serving certificate loaded), so the exposition text is what
/metrics serves, and every metric and label in every panel and variable query must appear in it.
A renamed metric or label fails this test instead of leaving an empty panel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import default_config, gpu_node, pod, view_of
from tests.controller.allocation_testkit import Cluster, vgpu_pod
from tests.controller.allocation_testkit import gpu_node as controller_node
from tests.engine.test_queues import queue
from tests.manifests.chart import CHART, render_objects
from tests.webhook.conftest import admission_review
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.certs import ReloadableSSLContext
from vgpu_guard.controller.queue_audit import QueueAuditor
from vgpu_guard.kube.resources import PODS
from vgpu_guard.webhook.app import create_app
from vgpu_guard.webhook.views import StaticViewSource

DASHBOARD = CHART / "dashboards" / "vgpu-guard.json"

# --- a small PromQL reader: which metrics, selector labels and grouping labels a query uses -----

_TOKEN = re.compile(
    r"""(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      |(?P<var>\$\{?\w+\}?)
      |(?P<range>\[[^\]]*\])
      |(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
      |(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
      |(?P<op>=~|!~|!=|==|>=|<=|[{}(),=<>+\-*/%^])
      |(?P<space>\s+)""",
    re.VERBOSE,
)
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset"}
# Functions and aggregations the dashboard may call (Prometheus' names); anything else is a typo.
_FUNCTIONS = {
    "sum", "min", "max", "avg", "count", "topk", "bottomk", "quantile", "stddev", "count_values",
    "rate", "irate", "increase", "delta", "histogram_quantile", "vector", "time",
    "clamp_min", "clamp_max", "abs", "sort_desc", "max_over_time", "avg_over_time",
}  # fmt: skip


@dataclass
class Query:
    metrics: set[str] = field(default_factory=set)
    selectors: set[tuple[str, str]] = field(default_factory=set)  # (metric, label)
    grouping: set[str] = field(default_factory=set)
    unknown_functions: set[str] = field(default_factory=set)


def _tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot read PromQL at {expr[pos:]!r}")
        assert m.lastgroup is not None
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
        pos = m.end()
    return out


def parse_promql(expr: str) -> Query:
    """Names used by ``expr``: metric names, ``{label=...}`` per metric, ``by (...)``-style labels."""
    q = Query()
    # Grafana's variable query label_values(selector, label): the label is grouped by, as in by (...).
    variable = re.fullmatch(r"label_values\((.*),\s*(\w+)\s*\)", expr.strip())
    if variable:
        expr = f"count by ({variable[2]}) ({variable[1]})"
    tokens = _tokens(expr)
    i, last_metric = 0, ""
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "ident" and text in _GROUPING and following == "(":
            i += 2
            while tokens[i][1] != ")":
                if tokens[i][0] == "ident":
                    q.grouping.add(tokens[i][1])
                i += 1
        elif kind == "ident" and text in _KEYWORDS:
            pass
        elif kind == "ident" and (following == "(" or following in _GROUPING):
            # A call, or an aggregation written `sum by (node) (...)`.
            if text not in _FUNCTIONS:
                q.unknown_functions.add(text)
        elif kind == "ident" and text not in _GROUPING:
            q.metrics.add(text)
            last_metric = text
        elif text == "{":
            i += 1
            while tokens[i][1] != "}":
                if tokens[i][0] == "ident":
                    q.selectors.add((last_metric, tokens[i][1]))
                i += 1
        i += 1
    return q


def test_the_reader_finds_metrics_labels_and_typos() -> None:
    q = parse_promql(
        'histogram_quantile(0.99, sum by (le, resource) (rate(m_bucket{dry_run="false", x=~"$v"}[$__rate_interval])))'
        " / on (node) group_left sum(other) or vector(0)"
    )
    assert q.metrics == {"m_bucket", "other"}
    assert q.selectors == {("m_bucket", "dry_run"), ("m_bucket", "x")}
    assert q.grouping == {"le", "resource", "node"}
    assert q.unknown_functions == set()
    assert parse_promql("summ(a)").unknown_functions == {"summ"}
    assert parse_promql('label_values(a{x="1"}, node)') == Query({"a"}, {("a", "x")}, {"node"}, set())
    assert parse_promql("(a >= b) or (c >= 100) unless d").metrics == {"a", "b", "c", "d"}


# --- what the processes expose ---------------------------------------------------------------------


async def _webhook_exposition() -> str:
    registry = CollectorRegistry()
    views = StaticViewSource(view_of([gpu_node("a30")]))
    app = create_app(config=default_config(), views=views, registry=registry)
    async with TestClient(TestServer(app)) as client:
        for obj in (pod({"volcano.sh/vgpu-memory": "12Gi"}), pod({"volcano.sh/vgpu-memory": "2048"})):
            response = await client.post("/validate/pods", json=admission_review(obj))
            assert response.status == 200
        await client.post("/validate/pods", data=b"not json")
    return generate_latest(registry).decode()


async def _controller_exposition() -> str:
    cluster = Cluster(
        [
            controller_node("gpu-0", 2),
            controller_node("mig-0", 1, mode="mig", card_type="NVIDIA-A100-PCIE-40GB", memory=40960),
        ]
    )
    registry = CollectorRegistry()
    controller = cluster.replica(registry=registry)
    cluster.bound_with_assignment(
        "held", node="gpu-0", ids="GPU-gpu-0-0,NVIDIA,10240,0:GPU-gpu-0-9,NVIDIA,lots,0:", memory=10240
    )
    cluster.create_pod(vgpu_pod("web", memory=1024))
    cluster.create_pod(vgpu_pod("huge", memory=10**6))
    await cluster.converge(controller)
    cluster.store.delete(PODS, "web", namespace="default", grace_period_seconds=0)
    await cluster.converge(controller)
    auditor = QueueAuditor(MemoryClusterClient(cluster.store), registry=registry)
    view = view_of([gpu_node("a30"), queue("q", {"nvidia.com/gpu": 1})])
    assert await auditor.audit_once(view, default_config()) is not None
    return generate_latest(registry).decode()


def _certificate_exposition(tmp_path: Path) -> str:
    cert = trustme.CA().issue_cert("localhost")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    ReloadableSSLContext(source="dashboard-test").load_files(tmp_path / "tls.crt", tmp_path / "tls.key")
    return generate_latest(REGISTRY).decode()


@pytest.fixture
async def exposed(tmp_path: Path) -> dict[str, set[str]]:
    """Sample name -> label names, over everything the webhook and controller processes serve."""
    series: dict[str, set[str]] = {}
    texts = [await _webhook_exposition(), await _controller_exposition(), _certificate_exposition(tmp_path)]
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("vgpu_guard_"):
                    series.setdefault(sample.name, set()).update(sample.labels)
    return series


# --- the dashboard -------------------------------------------------------------------------------


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    out = [(f"panel {p['title']!r}", t["expr"]) for p in _panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            out.append((f"variable {variable['name']}", variable["query"]["query"]))
    return out


async def test_every_query_names_exposed_metrics_and_labels(exposed: dict[str, set[str]]) -> None:
    problems = []
    queries = _queries(_dashboard())
    assert len(queries) > 20
    for where, expr in queries:
        q = parse_promql(expr)
        assert q.metrics, f"{where}: no metric in {expr}"
        problems += [f"{where}: unknown function {f}" for f in sorted(q.unknown_functions)]
        problems += [f"{where}: {m} is not exposed" for m in sorted(q.metrics) if m not in exposed]
        problems += [
            f"{where}: {m} has no label {label}"
            for m, label in sorted(q.selectors)
            if m in exposed and label not in exposed[m]
        ]
        labels = set().union(*(exposed.get(m, set()) for m in q.metrics))
        problems += [
            f"{where}: no metric of the query has label {label}" for label in sorted(q.grouping - labels)
        ]
    assert problems == []


async def test_the_panels_the_operator_needs_are_there(exposed: dict[str, set[str]]) -> None:
    used = {m for _, expr in _queries(_dashboard()) for m in parse_promql(expr).metrics}
    assert {
        "vgpu_guard_gpu_memory_used_bytes",
        "vgpu_guard_gpu_memory_total_bytes",
        "vgpu_guard_gpu_cores_used_ratio",
        "vgpu_guard_gpu_mig_instances",
        "vgpu_guard_pending_pods_by_reason",
        "vgpu_guard_admission_requests_total",
        "vgpu_guard_admission_duration_seconds_bucket",
        "vgpu_guard_ledger_conflicts_total",
        "vgpu_guard_assignment_mismatches_total",
        "vgpu_guard_ledger_violations",
    } <= used
    # The series the panels rely on carry the values a pass produced (not just declared).
    assert exposed["vgpu_guard_pending_pods_by_reason"] == {"reason"}
    assert exposed["vgpu_guard_gpu_mig_instances"] == {"node", "gpu"}


def test_panels_are_described_unique_and_use_the_datasource_variable() -> None:
    dashboard = _dashboard()
    panels = list(_panels(dashboard))
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["description"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])
    assert dashboard["uid"] == "vgpu-guard"


def test_chart_ships_it_for_the_grafana_sidecar_only_when_enabled() -> None:
    assert not [r for r in render_objects({}) if r.obj["metadata"]["name"].endswith("-dashboard")]
    values = {"dashboard": {"enabled": True, "namespace": "monitoring", "labels": {"team": "gpu"},
                            "annotations": {"grafana_folder": "GPUs"}}}  # fmt: skip
    [configmap] = [
        r.obj for r in render_objects(values) if r.obj["metadata"]["name"] == "vgpu-guard-dashboard"
    ]
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["labels"]["team"] == "gpu"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    assert json.loads(configmap["data"]["vgpu-guard.json"]) == _dashboard()


# Grafana's per-second units: a panel of rate() queries must say its values are per second.
_PER_SECOND_UNITS = {"ops", "reqps", "cps", "eps", "mps", "rps", "wps", "iops", "Bps", "binBps"}


def _kind(expr: str) -> str:
    """What a query's values are: a quantile (of a rate), a per-second rate, a count per interval,
    or a level (a gauge, or arithmetic on gauges)."""
    if "histogram_quantile(" in expr:
        return "quantile"
    if re.search(r"\b(?:rate|irate)\(", expr):
        return "rate"
    if re.search(r"\bincrease\(", expr):
        return "increase"
    return "level"


def test_each_panel_shows_one_kind_of_value_and_rates_per_second() -> None:
    problems = []
    for panel in _panels(_dashboard()):
        kinds = {_kind(t["expr"]) for t in panel.get("targets", [])}
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if len(kinds) > 1:
            problems.append(f"{panel['title']!r} mixes {sorted(kinds)} on one axis")
        if "rate" in kinds and unit not in _PER_SECOND_UNITS:
            problems.append(f"{panel['title']!r} shows rates with unit {unit!r}")
    assert problems == []
