"""Loading the configuration: YAML file, the plugin's device config, environment overrides.

Why here and not in the engine: reading files and the environment is I/O; the engine only
validates the resulting mapping (``GuardConfig``).

Environment: ``VGPU_GUARD__<SECTION>__<FIELD>=value`` (any case, with or without underscores between
words; the value is read as a YAML scalar), e.g. ``VGPU_GUARD__ADMISSION__DEFAULT_MODE=mig``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from vgpu_guard.engine.config import GuardConfig

__all__ = ["ConfigError", "format_validation_error", "load_config", "load_device_config_text"]

ENV_PREFIX = "VGPU_GUARD__"
DEFAULT_DEVICE_CONFIG = Path(__file__).parent / "data" / "device-config.yaml"


class ConfigError(Exception):
    """Raised when the configuration cannot be read or is invalid; the message names file and field."""


def format_validation_error(error: ValidationError, *, source: str) -> str:
    """One line per problem: ``source: field.path: what is wrong``."""
    lines = []
    for item in error.errors():
        path = ".".join(str(p) for p in item["loc"]) or "(top level)"
        lines.append(f"{source}: {path}: {item['msg']}")
    return "\n".join(lines)


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e


def load_device_config_text(data: Any, *, source: str) -> dict[str, Any]:
    """Accept the plugin's device config as its ConfigMap or as the bare ``device-config.yaml``."""
    if isinstance(data, Mapping) and data.get("kind") == "ConfigMap":
        payload = (data.get("data") or {}).get("device-config.yaml")
        if not isinstance(payload, str):
            raise ConfigError(f"{source}: ConfigMap has no data.device-config.yaml")
        try:
            data = yaml.safe_load(payload)
        except yaml.YAMLError as e:
            raise ConfigError(f"{source}: data.device-config.yaml is not valid YAML: {e}") from e
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping with an 'nvidia:' key")
    return dict(data)


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """The ``VGPU_GUARD__...`` variables as a config tree, each part spelt as the field it names.

    An environment variable's name has no case of its own to trust (``DEFAULTMODE``,
    ``DEFAULT_MODE`` and ``defaultMode`` all mean ``defaultMode``), so each part is matched to the
    configuration's fields ignoring case and underscores; one that names no field is refused here,
    naming the variable, instead of as an unexplained extra key of the merged tree."""
    tree: dict[str, Any] = {}
    for key, raw in sorted(env.items()):
        if not key.startswith(ENV_PREFIX):
            continue
        parts = _field_names(key, [p for p in key[len(ENV_PREFIX) :].split("__") if p])
        if not parts:
            continue
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        try:
            node[parts[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError:
            node[parts[-1]] = raw
    return tree


def _squash(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def _field_names(variable: str, parts: list[str]) -> list[str]:
    """``parts`` as the configuration's field aliases, down to a field that is not a section (a
    map's keys, such as rule ids, are taken lowercased as they are)."""
    out: list[str] = []
    model: type[BaseModel] | None = GuardConfig
    for part in parts:
        if model is None:
            out.append(part.lower())
            continue
        fields = {_squash(name): (name, info) for name, info in model.model_fields.items()}
        found = fields.get(_squash(part))
        if found is None:
            where = ".".join(out) or "the configuration"
            known = ", ".join(sorted(info.alias or name for name, info in model.model_fields.items()))
            raise ConfigError(f"environment {variable}: {where} has no field {part!r} (fields: {known})")
        name, info = found
        out.append(info.alias or name)
        annotation = info.annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return out


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        # Match an existing key whatever its case style (defaultMode vs default_mode).
        existing = next((k for k in out if _squash(k) == _squash(key)), key)
        if isinstance(value, Mapping) and isinstance(out.get(existing), Mapping):
            out[existing] = _merge(dict(out[existing]), value)
        else:
            out[existing] = value
    return out


def load_config(
    path: str | Path | None = None,
    *,
    device_config: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> GuardConfig:
    """Read, merge and validate; every error is a ``ConfigError`` naming the source and field."""
    data: dict[str, Any] = {}
    source = "built-in defaults"
    if path is not None:
        source = str(path)
        loaded = _read_yaml(Path(path))
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: expected a mapping at the top level, got {type(loaded).__name__}")
        data = dict(loaded)
        device_file = data.pop("deviceConfigFile", None)
        if device_file and device_config is None:
            device_config = Path(path).parent / str(device_file)
    if device_config is not None:
        data["deviceConfig"] = load_device_config_text(
            _read_yaml(Path(device_config)), source=str(device_config)
        )
        source += f" + {device_config}"
    if "deviceConfig" not in data and "device_config" not in data:
        # No device config given: the plugin's shipped default (the one seed 003 shows).
        data["deviceConfig"] = load_device_config_text(
            yaml.safe_load(DEFAULT_DEVICE_CONFIG.read_text("utf-8")), source=str(DEFAULT_DEVICE_CONFIG)
        )
    overrides = _env_overrides(os.environ if env is None else env)
    if overrides:
        data = _merge(data, overrides)
        source += " + environment"
    try:
        return GuardConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source=source)) from e
