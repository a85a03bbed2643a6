"""The optional NetworkPolicy (issue 22): only the API server reaches the admission port."""

from __future__ import annotations

import pytest
import yaml

from tests.manifests.chart import render_objects
from tests.manifests.conftest import SCENARIOS, of_kind, one
from vgpu_guard.engine.config import GuardConfig

API_SERVER = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]


def test_no_network_policy_by_default() -> None:
    assert of_kind(render_objects({}), "NetworkPolicy") == []


def test_the_admission_port_admits_only_the_api_server_peers() -> None:
    objects = render_objects({"webhook": {"networkPolicy": {"enabled": True, "apiServerPeers": API_SERVER}}})
    policy = one(objects, "NetworkPolicy")
    deployment = one(objects, "Deployment", "vgpu-guard-webhook")
    assert policy["metadata"]["name"] == "vgpu-guard-webhook"
    assert policy["spec"]["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    https, metrics = policy["spec"]["ingress"]
    assert https == {"ports": [{"port": "https", "protocol": "TCP"}], "from": API_SERVER}
    # Probes and Prometheus: any source unless metricsPeers narrows it.
    assert metrics == {"ports": [{"port": "metrics", "protocol": "TCP"}]}
    ports = {p["name"] for c in deployment["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    assert {"https", "metrics"} <= ports


def test_metrics_peers_narrow_the_metrics_port() -> None:
    values = SCENARIOS["network-policy"]
    policy = one(render_objects(values), "NetworkPolicy")
    assert policy["spec"]["ingress"][1]["from"] == values["webhook"]["networkPolicy"]["metricsPeers"]


def test_enabled_without_api_server_peers_fails_the_render_with_the_way_out() -> None:
    with pytest.raises(Exception, match=r"webhook.networkPolicy.apiServerPeers: the API server's addresses"):
        render_objects({"webhook": {"networkPolicy": {"enabled": True}}})


def test_limits_values_reach_the_config() -> None:
    objects = render_objects(SCENARIOS["network-policy"])
    config_map = one(objects, "ConfigMap", "vgpu-guard-config")
    settings = GuardConfig.model_validate(yaml.safe_load(config_map["data"]["config.yaml"])).webhook
    assert settings.max_connections == 64 and settings.header_timeout_seconds == 5
    assert settings.max_request_bytes == 8388608 and settings.max_containers == 500
    assert settings.body_timeout_seconds == 10 and settings.keep_alive_timeout_seconds == 30
