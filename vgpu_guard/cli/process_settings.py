"""Per-process settings of ``serve``: who we are in the cluster, read from the environment.

The Helm chart passes these as ``VGPU_GUARD_*`` variables (single underscore, so they never clash
with the ``VGPU_GUARD__SECTION__FIELD`` config overrides); flags override them for local runs.
They describe the deployment (names of our Secret, Service, Lease and webhook configurations),
not policy, which is why they are not in the config file. A bad value fails at start naming the
variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = ["ProcessSettings", "SettingsError", "parse_go_duration"]

_GO_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|m|s|ms))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


class SettingsError(ValueError):
    """Raised when an environment variable of the process interface is invalid."""


def parse_go_duration(text: str) -> timedelta:
    """Go's ``time.ParseDuration`` subset Helm users write: ``87600h``, ``1h30m``, ``90s``."""
    text = text.strip()
    if not _GO_DURATION.match(text):
        raise ValueError(f"{text!r} is not a duration like 8760h, 90m or 1h30m")
    return timedelta(seconds=sum(float(n) * _UNIT[u] for n, u in _PART.findall(text)))


def _names(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


class ProcessSettings(BaseModel):
    """The process interface the chart documents (README "Process interface")."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    namespace: str = Field(default="vgpu-guard", alias="POD_NAMESPACE")
    pod_name: str = Field(default_factory=lambda: os.uname().nodename, alias="POD_NAME")
    cert_mode: Literal["builtin", "files"] = Field(default="files", alias="VGPU_GUARD_CERT_MODE")
    tls_secret: str = Field(default="vgpu-guard-tls", alias="VGPU_GUARD_TLS_SECRET")
    webhook_service: str = Field(default="vgpu-guard-webhook", alias="VGPU_GUARD_WEBHOOK_SERVICE")
    cluster_domain: str = Field(default="cluster.local", alias="VGPU_GUARD_CLUSTER_DOMAIN")
    cert_extra_dns: tuple[str, ...] = Field(default=(), alias="VGPU_GUARD_CERT_EXTRA_DNS")
    ca_validity: timedelta = Field(default=timedelta(days=3650), alias="VGPU_GUARD_CA_VALIDITY")
    serving_validity: timedelta = Field(default=timedelta(days=365), alias="VGPU_GUARD_SERVING_VALIDITY")
    serving_renew_before: timedelta = Field(
        default=timedelta(days=90), alias="VGPU_GUARD_SERVING_RENEW_BEFORE"
    )
    ca_renew_before: timedelta = Field(default=timedelta(days=365), alias="VGPU_GUARD_CA_RENEW_BEFORE")
    cert_check_interval: timedelta = Field(
        default=timedelta(hours=12), alias="VGPU_GUARD_CERT_CHECK_INTERVAL"
    )
    lease_name: str = Field(default="vgpu-guard-controller", alias="VGPU_GUARD_LEASE_NAME")
    lease_duration_seconds: int = Field(default=15, ge=1, alias="VGPU_GUARD_LEASE_DURATION_SECONDS")
    lease_renew_deadline_seconds: int = Field(
        default=10, ge=1, alias="VGPU_GUARD_LEASE_RENEW_DEADLINE_SECONDS"
    )
    lease_retry_period_seconds: int = Field(default=2, ge=1, alias="VGPU_GUARD_LEASE_RETRY_PERIOD_SECONDS")
    # The controller's client rate limit, as kube-scheduler's --kube-api-qps/--kube-api-burst
    # (defaults equal): a token bucket over every request it sends; qps 0 is unlimited. Events
    # have a bucket of their own (kube-scheduler's event client), the Lease is never throttled.
    kube_api_qps: float = Field(default=50, ge=0, alias="VGPU_GUARD_KUBE_API_QPS")
    kube_api_burst: int = Field(default=100, ge=1, alias="VGPU_GUARD_KUBE_API_BURST")
    events_qps: float = Field(default=50, ge=0, alias="VGPU_GUARD_EVENTS_QPS")
    events_burst: int = Field(default=100, ge=1, alias="VGPU_GUARD_EVENTS_BURST")
    # Ledger writes, bindings and status reports one allocation pass keeps in flight at once.
    write_concurrency: int = Field(default=16, ge=1, le=1024, alias="VGPU_GUARD_WRITE_CONCURRENCY")
    mutating_webhook_configurations: tuple[str, ...] = Field(
        default=(), alias="VGPU_GUARD_MUTATING_WEBHOOK_CONFIGURATIONS"
    )
    validating_webhook_configurations: tuple[str, ...] = Field(
        default=(), alias="VGPU_GUARD_VALIDATING_WEBHOOK_CONFIGURATIONS"
    )

    @field_validator(
        "cert_extra_dns",
        "mutating_webhook_configurations",
        "validating_webhook_configurations",
        mode="before",
    )
    @classmethod
    def _comma_list(cls, value: object) -> object:
        return _names(value) if isinstance(value, str) else value

    @field_validator(
        "ca_validity",
        "serving_validity",
        "serving_renew_before",
        "ca_renew_before",
        "cert_check_interval",
        mode="before",
    )
    @classmethod
    def _duration(cls, value: object) -> object:
        return parse_go_duration(value) if isinstance(value, str) else value

    @classmethod
    def from_environment(cls, env: Mapping[str, str], **overrides: object) -> ProcessSettings:
        """Read the environment; ``overrides`` (from flags, by field name) win when not None."""
        data: dict[str, object] = {k: v for k, v in env.items() if k in _ALIASES and v != ""}
        for name, value in overrides.items():
            if value is not None:
                data[cls.model_fields[name].alias or name] = value
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            lines = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()]
            raise SettingsError("; ".join(lines)) from e


_ALIASES = {field.alias for field in ProcessSettings.model_fields.values() if field.alias}
