"""What ``vgpu-guard sandbox`` runs, and with which settings: ``--config``, the mode, Volcano's model.

- ``--config FILE`` is the file ``vgpu-guard serve`` reads, handed to the webhook and controller
  children as it is (so any setting, the mode included, can be tried against the sandbox); the
  sandbox adds only what it owns, as ``VGPU_GUARD__`` environment overrides: where the webhook
  listens and its TLS files.
- The mode: the file's ``scheduling.routing`` when it sets one; otherwise volcano mode when
  ``--volcano-model`` runs (Volcano schedules, the arbiter reserves its assignments, as the chart
  installs vgpu-guard) and routing mode when it does not (no Volcano would place anything, so
  vgpu-guard's controller places vGPU pods).
- ``--volcano-model`` runs vgpu_guard/volcano/ against the sandbox's API server, as Volcano's
  controllers would run beside it: Volcano Jobs get their PodGroup and pods, vGPU pods with
  ``schedulerName: volcano`` get Volcano's binds (``--volcano-version``'s writes). It uses the
  sandbox's admin kubeconfig (``system:masters``, an allocation writer, as Volcano's ServiceAccount is).

``banner`` is what the sandbox prints right after its first line: what runs and what does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from vgpu_guard.configfile import ConfigError, load_config
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.volcano.binder import VolcanoVersion, parse_version

__all__ = ["SandboxSettings", "SettingsError", "settings_from"]


class SettingsError(Exception):
    """A ``--config`` or ``--volcano-version`` the sandbox cannot use; the message says why."""


def _sets_routing(path: Path) -> bool:
    """Whether the file itself names ``scheduling.routing`` (in any of the spellings it accepts)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    scheduling = data.get("scheduling") if isinstance(data, dict) else None
    return isinstance(scheduling, dict) and "routing" in scheduling


@dataclass(frozen=True)
class SandboxSettings:
    """The sandbox's choices; ``config`` is the validated configuration the children will read."""

    config_file: Path | None
    config: GuardConfig
    routing: bool
    routing_in_file: bool
    routing_from: str  # why, for the mode line
    volcano: VolcanoVersion | None
    stale_cache: bool

    def child_env(self, *, host: str, port: int, cert: Path, key: str | Path) -> dict[str, str]:
        """The overrides the sandbox adds to the children's configuration (``VGPU_GUARD__``)."""
        env = {
            "VGPU_GUARD__WEBHOOK__HOST": host,
            "VGPU_GUARD__WEBHOOK__PORT": str(port),
            "VGPU_GUARD__WEBHOOK__TLS_CERT_FILE": str(cert),
            "VGPU_GUARD__WEBHOOK__TLS_KEY_FILE": str(key),
        }
        if not self.routing_in_file:
            env["VGPU_GUARD__SCHEDULING__ROUTING"] = "true" if self.routing else "false"
        return env

    def mode_line(self) -> str:
        if self.routing:
            return f"mode:       routing ({self.routing_from}): vgpu-guard's controller places vGPU pods"
        return (
            f"mode:       volcano ({self.routing_from}): Volcano schedules vGPU pods; vgpu-guard's "
            "arbiter reserves each GPU assignment it writes, or refuses it"
        )

    def banner(self, *, with_guard: bool) -> list[str]:
        """What runs and what does not, in two lines (and the mode when vgpu-guard runs)."""
        runs = ["kube-apiserver, kube-controller-manager, kube-scheduler, etcd"]
        if with_guard:
            runs.append("vgpu-guard's webhook and controller, a device-plugin stand-in (bind-phase=success)")
        if self.volcano is not None:
            stale = ", stale cache (#3616)" if self.stale_cache else ""
            runs.append(
                f"a model of Volcano {self.volcano.name} (job controller: PodGroups and pods of Volcano "
                f"Jobs; scheduler: enqueue, binds of vGPU pods{stale})"
            )
        runs.append("node heartbeats (Ready)")
        missing = ["kubelets (a bound pod keeps phase Pending)"]
        if self.volcano is None:
            missing.append(
                "Volcano (a Volcano Job gets no PodGroup or pods, a volcano pod is never bound; "
                "--volcano-model runs a model of it)"
            )
        else:
            missing.append("Volcano itself (its model places vGPU pods only, judges no cpu or memory)")
        if not with_guard:
            missing.append("vgpu-guard (--with-guard runs it)")
        lines = [f"runs:       {'; '.join(runs)}", f"not run:    {'; '.join(missing)}"]
        if with_guard:
            lines.append(self.mode_line())
        return lines


def settings_from(
    config_file: str | None, *, volcano_model: bool, volcano_version: str, stale_cache: bool
) -> SandboxSettings:
    """Validate the file as ``serve`` would (without the environment) and decide the mode."""
    path = Path(config_file).resolve() if config_file else None
    try:
        config = load_config(path, env={})
        version = parse_version(volcano_version) if volcano_model else None
    except (ConfigError, ValueError) as e:
        raise SettingsError(str(e)) from None
    in_file = path is not None and _sets_routing(path)
    if in_file:
        routing = config.scheduling.routing
        why = f"scheduling.routing {'on' if routing else 'off'}, from --config"
    elif volcano_model:
        routing, why = (
            False,
            "scheduling.routing off: the default with --volcano-model, as the chart installs it",
        )
    else:
        routing, why = True, "scheduling.routing on: the sandbox's default without --volcano-model"
    return SandboxSettings(path, config, routing, in_file, why, version, stale_cache)
