"""The configuration model: ours, plus the device plugin's ConfigMap in its exact schema.

Why the plugin's schema verbatim: platform teams already maintain ``volcano-vgpu-device-config``
(key ``device-config.yaml``); the chart mounts that very ConfigMap so our webhook rounds MIG
requests with the same geometries the scheduler uses. Field names and types follow the plugin
(camelCase, ``nvidia:`` root). Capacities stay integers; scaling factors are exact decimals.

Loading (files, environment) lives in ``vgpu_guard.configfile``; this module only validates.
"""

from __future__ import annotations

import re
from decimal import Decimal
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from vgpu_guard.engine.quantity import QuantityError, parse_quantity
from vgpu_guard.engine.rule_catalog import RULES

__all__ = [
    "DEFAULT_SCHEDULER",
    "Action",
    "AdmissionSettings",
    "ArbiterSettings",
    "DeviceConfig",
    "GuardConfig",
    "MigGeometry",
    "MigGeometryGroup",
    "MigModelGeometries",
    "NvidiaConfig",
    "QueueSettings",
    "SchedulingSettings",
    "TopologySettings",
    "WebhookSettings",
]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, validate_default=True
    )


# --- the plugin's schema (volcano-vgpu-device-plugin, device-config.yaml) ---------------------------


class MigGeometry(_Model):
    """One MIG instance template: ``name`` (e.g. 1g.10gb), ``memory`` MiB, how many fit on a card."""

    name: str = Field(min_length=1)
    memory: int = Field(gt=0)
    count: int = Field(gt=0)


class MigGeometryGroup(_Model):
    """A layout a card can be partitioned into; a card uses one group at a time."""

    group: str = Field(min_length=1)
    geometries: tuple[MigGeometry, ...] = Field(min_length=1)


class MigModelGeometries(_Model):
    """The geometry groups of the GPU models whose type contains one of ``models``."""

    models: tuple[str, ...] = Field(min_length=1)
    allowed_geometries: tuple[MigGeometryGroup, ...] = Field(min_length=1)


class NvidiaConfig(_Model):
    """The ``nvidia:`` block of the plugin's device config, field for field."""

    resource_count_name: str = "volcano.sh/vgpu-number"
    resource_memory_name: str = "volcano.sh/vgpu-memory"
    resource_memory_percentage_name: str = "volcano.sh/vgpu-memory-percentage"
    resource_core_name: str = "volcano.sh/vgpu-cores"
    overwrite_env: bool = False
    default_memory: int = Field(default=0, ge=0)
    default_cores: int = Field(default=0, ge=0, le=100)
    default_gpu_num: int = Field(default=1, ge=1, alias="defaultGPUNum")
    device_split_count: int = Field(default=10, ge=1)
    device_memory_scaling: Decimal = Field(default=Decimal(1), gt=0)
    device_core_scaling: Decimal = Field(default=Decimal(1), gt=0)
    gpu_memory_factor: int = Field(default=1, ge=1, le=1024, alias="gpuMemoryFactor")
    known_mig_geometries: tuple[MigModelGeometries, ...] = ()

    @field_validator("device_memory_scaling", "device_core_scaling", mode="before")
    @classmethod
    def _exact_decimal(cls, value: Any) -> Any:
        # YAML gives 1.8 as a float; go through its shortest repr so Decimal("1.8") is exact.
        if isinstance(value, float):
            return Decimal(repr(value))
        return value


class DeviceConfig(_Model):
    """The plugin's whole ``device-config.yaml``; unknown vendor blocks are not ours to judge."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    nvidia: NvidiaConfig = NvidiaConfig()


# --- ours --------------------------------------------------------------------------------------------


class Action(StrEnum):
    """What a rule does when it fires (Gatekeeper's enforcementAction, Kyverno's failureAction)."""

    ENFORCE = "enforce"
    WARN = "warn"
    AUDIT = "audit"


ModeChoice = Literal["auto", "hami-core", "mig"]
# kube-scheduler's name, which the API server gives a pod that names no scheduler (SetDefaults_PodSpec).
DEFAULT_SCHEDULER = "default-scheduler"
# A scheduler name as schedulers are named (volcano, hami-scheduler, vgpu-guard): a DNS-1123 subdomain.
# The API server does not check spec.schedulerName, so a typo would leave pods to a scheduler nobody runs.
_DNS_SUBDOMAIN_OR_EMPTY = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?"


class AdmissionSettings(_Model):
    """Pod admission: defaults, mode choice, and per-rule actions."""

    default_mode: ModeChoice = "auto"
    # The plugin matches kubelet Allocate calls to pods by request size; with vGPU in several
    # containers it cannot tell them apart. Deny by default; "warn" admits with a warning. It is
    # the action of rule vgpu-multi-container by another name (``setting_actions``), so the rule
    # always runs and only what it does changes; an ``admission.rules`` entry wins.
    multi_container: Literal["deny", "warn"] = "deny"
    # Users allowed to set allocation annotations on CREATE (our controller writes them on the
    # Binding, which is not a pod CREATE; this is for migrations and break-glass tooling).
    trusted_users: tuple[str, ...] = ()
    # Identities that may set, change or remove allocation annotations on any operation (pod
    # UPDATE, pods/binding, pods/status) and create vGPU pods with spec.nodeName already set: the
    # allocators and the device plugin. The chart adds our controller's ServiceAccount. Defaults:
    # the plugin's DaemonSet account (volcano-vgpu-device-plugin.yml) and Volcano's scheduler
    # (its deviceshare plugin patches the annotations when pods are not routed to us).
    allocation_writers: tuple[str, ...] = (
        "system:serviceaccount:kube-system:volcano-device-plugin",
        "system:serviceaccount:volcano-system:volcano-scheduler",
    )
    # Groups whose members are allocation writers. system:masters bypasses authorization and can
    # delete our webhooks outright, so refusing it protects nothing and would block break-glass repair.
    allocation_writer_groups: tuple[str, ...] = ("system:masters",)
    # Namespaces an administrator exempts from every pod and workload rule except the allocation
    # checks (Gatekeeper's exempt namespaces). The chart also keeps them from the mutating and
    # workload webhooks. A namespace label is not an exemption: whoever can label it could forge.
    exempt_namespaces: tuple[str, ...] = ()
    # The scheduler given to a vGPU pod that names none or ``default-scheduler`` while Volcano
    # schedules vGPU pods (``scheduling.routing`` off), e.g. ``volcano``; empty: such a pod is only
    # warned. kube-scheduler would bind it with no GPU assignment and the device plugin's Allocate
    # would fail on the node. HAMi's webhook sets its own scheduler the same way (pkg/scheduler/
    # webhook.go ``Handle``: an empty name always, ``default-scheduler`` when
    # forceOverwriteDefaultScheduler, its chart's default; any other name is left alone). With
    # routing on, every vGPU pod gets ``scheduling.schedulerName`` instead and this is not used.
    scheduler_name: str = Field(default="", max_length=253)
    # Whether node groups can grow (cluster-autoscaler, Karpenter): capacity-dependent pod rules
    # then default to warn, since a larger node may join. auto: scaling when a node carries a
    # Karpenter label, else fixed (see engine/rules/fleet.py for why these signals).
    fleet_scaling: Literal["auto", "scaling", "fixed"] = "auto"
    rules: dict[str, Action] = Field(default_factory=dict)

    @property
    def setting_actions(self) -> dict[str, Action]:
        """Rule actions chosen by a named setting rather than by ``rules`` (which wins over them).

        Why a mapping, not a check inside the rule: a setting that skips its rule is a rule
        turned off, and ``warn`` must warn (issue 38: ``multiContainer: warn`` was silent).
        """
        return {"vgpu-multi-container": Action.WARN if self.multi_container == "warn" else Action.ENFORCE}

    @field_validator("scheduler_name")
    @classmethod
    def _a_scheduler_name(cls, value: str) -> str:
        if not re.fullmatch(_DNS_SUBDOMAIN_OR_EMPTY, value):
            raise ValueError(
                f"{value!r} is no scheduler name (a DNS-1123 subdomain: lowercase letters, digits, "
                "'-' and '.'), e.g. volcano"
            )
        if value == DEFAULT_SCHEDULER:
            raise ValueError(
                f"{DEFAULT_SCHEDULER} is the name this setting replaces (kube-scheduler binds no GPU "
                "assignment); name Volcano's scheduler (volcano), or leave it empty to only warn"
            )
        return value

    @field_validator("rules")
    @classmethod
    def _known_rules(cls, value: dict[str, Action]) -> dict[str, Action]:
        unknown = sorted(set(value) - set(RULES))
        if unknown:
            raise ValueError(f"unknown rule id(s) {', '.join(unknown)}; known: {', '.join(sorted(RULES))}")
        return value


class SchedulingSettings(_Model):
    """Routing of vGPU pods to our allocator, and how it packs."""

    routing: bool = False
    scheduler_name: str = Field(default="vgpu-guard", min_length=1)
    policy: Literal["binpack", "spread"] = "binpack"
    # Seconds a pod may stay in bind-phase=allocating before the node is released for the next.
    allocating_timeout_seconds: int = Field(default=120, ge=5)


class ArbiterSettings(_Model):
    """The ledger arbiter: a GPU assignment written by an allocation writer is reserved at admission."""

    # Seconds an assignment reserved at admission is held for a pod that is still not bound to
    # that node (its write was refused after admission, or Volcano 1.10-1.15 discarded it). Longer
    # than kube-apiserver's request timeout (60 s) plus clock skew: an admitted write either lands
    # within its request or never, so a release after this cannot cross it (docs/design/ledger.md).
    unbound_release_seconds: int = Field(default=90, ge=65, le=86_400)
    # Seconds one admission request waits for its node's ledger write (conflicts and the writes
    # queued before it included); past it the write is refused with 503 and Volcano retries. Below
    # the webhook entries' timeoutSeconds (3 s before 1.28, 5 s after), so we answer first.
    write_timeout_seconds: float = Field(default=2, gt=0, le=25)


class QueueSettings(_Model):
    """Queue guarantee checks against cluster capacity."""

    warn_fraction: Decimal = Field(default=Decimal("0.9"), gt=0, le=1)
    # Only nodes with all these labels form the Volcano-managed pool (empty: every node).
    node_selector: dict[str, str] = Field(default_factory=dict)
    # Per-resource amounts held back from capacity (system daemons, headroom): quantities.
    reserve: dict[str, str | int] = Field(default_factory=dict)
    # The Volcano release whose queue webhook rules to mirror ("latest" or e.g. "1.14"): from
    # 1.14 every resource in spec.guarantee.resource needs a spec.deserved entry at least as large.
    # Default: the release of the Volcano CRDs we bundle (v1.13.3), so an upgrade of vgpu-guard
    # never denies a queue the fleet's Volcano accepts; fleets on 1.14+ set "latest".
    volcano_version: str = Field(default="1.13", pattern=r"^(latest|v?\d+\.\d+(\.\d+)?)$")

    @property
    def volcano_release(self) -> tuple[int, int] | None:
        """(major, minor) of ``volcano_version``; None for latest."""
        if self.volcano_version == "latest":
            return None
        major, minor = self.volcano_version.lstrip("v").split(".")[:2]
        return int(major), int(minor)

    @field_validator("warn_fraction", mode="before")
    @classmethod
    def _exact_fraction(cls, value: Any) -> Any:
        return Decimal(repr(value)) if isinstance(value, float) else value

    @field_validator("reserve")
    @classmethod
    def _quantities(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for key, raw in value.items():
            try:
                if parse_quantity(raw).value < 0:
                    raise ValueError(f"{key}: reserve must not be negative")
            except QuantityError as e:
                raise ValueError(f"{key}: {e}") from e
        return value


class TopologySettings(_Model):
    """InfiniBand cluster pinning for gangs."""

    # Node label whose value names the node's IB cluster; empty disables IB pinning.
    ib_cluster_label: str = ""
    # Read Volcano HyperNodes of this tier as IB clusters (None: labels only).
    hyper_node_tier: int | None = Field(default=None, ge=1)
    # When no cluster can hold a gang: deny the pod, or admit it unpinned with a warning.
    on_no_fit: Literal["deny", "unpinned"] = "deny"


class WebhookSettings(_Model):
    """The HTTPS admission server."""

    host: str = "0.0.0.0"
    port: int = Field(default=9443, ge=1, le=65535)
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    tls_cert_file: str = "/etc/vgpu-guard/tls/tls.crt"
    tls_key_file: str = "/etc/vgpu-guard/tls/tls.key"
    # Seconds in-flight requests get to finish on shutdown (kept below terminationGracePeriod).
    shutdown_timeout_seconds: float = Field(default=10, gt=0, le=60)
    # Limits that keep one caller from slowing admission for everyone (issue 22). The API server
    # sends objects up to ~3 MiB (etcd's 1.5 MiB plus encoding); beyond 8 MiB is not a review.
    max_request_bytes: int = Field(default=8 * 2**20, ge=64 * 2**10, le=64 * 2**20)
    # Containers (including init and ephemeral, over every pod template) one reviewed object may
    # carry; a larger object is denied before any rule runs, so it cannot starve other reviews.
    max_containers: int = Field(default=500, ge=1, le=100_000)
    # Seconds from a request's first byte (or the TLS handshake's start) to its last header byte.
    header_timeout_seconds: float = Field(default=10, gt=0, le=300)
    # Seconds to receive a request's whole body once its headers are in.
    body_timeout_seconds: float = Field(default=10, gt=0, le=300)
    # Seconds an idle connection (no request in progress) is kept open.
    keep_alive_timeout_seconds: float = Field(default=30, gt=0, le=3600)
    # Open admission connections; one more is closed at once (counted in
    # vgpu_guard_admission_connections_refused_total). ~300 KB each when idle over TLS.
    max_connections: int = Field(default=512, ge=1, le=100_000)


class GuardConfig(_Model):
    """Everything vgpu-guard reads at start; invalid values fail with their field path."""

    device_config: DeviceConfig = DeviceConfig()
    admission: AdmissionSettings = AdmissionSettings()
    scheduling: SchedulingSettings = SchedulingSettings()
    arbiter: ArbiterSettings = ArbiterSettings()
    queues: QueueSettings = QueueSettings()
    topology: TopologySettings = TopologySettings()
    webhook: WebhookSettings = WebhookSettings()

    @model_validator(mode="after")
    def _mode_needs_geometries(self) -> GuardConfig:
        if self.admission.default_mode == "mig" and not self.device_config.nvidia.known_mig_geometries:
            raise ValueError(
                "admission.defaultMode is mig but deviceConfig.nvidia.knownMigGeometries is empty; "
                "add the plugin's geometries or choose auto/hami-core"
            )
        return self

    @property
    def nvidia(self) -> NvidiaConfig:
        return self.device_config.nvidia

    def action_for(self, rule: str) -> Action:
        """The configured action of a rule: its ``admission.rules`` entry, else the setting that
        names its action (``multiContainer``), else enforce."""
        admission = self.admission
        return admission.rules.get(rule) or admission.setting_actions.get(rule, Action.ENFORCE)
