"""Configuration: the plugin's ConfigMap loads unchanged; bad values fail with their field path."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from vgpu_guard.configfile import ConfigError, load_config
from vgpu_guard.engine.config import Action

# Copied verbatim from seed 003 (the comment line above the object is the only addition), so the
# test runs on a clone with nothing beside it.
SEED_003 = Path(__file__).resolve().parents[1] / "fixtures" / "seed-003-device-configmap.yaml"


def _seed_003_configmap() -> str:
    """The volcano-vgpu-device-config ConfigMap exactly as seed 003 prints it."""
    return SEED_003.read_text(encoding="utf-8")


@pytest.fixture
def seed_configmap(tmp_path: Path) -> Path:
    path = tmp_path / "device-configmap.yaml"
    path.write_text(_seed_003_configmap(), encoding="utf-8")
    return path


def test_seed_003_configmap_loads_unchanged(seed_configmap: Path) -> None:
    config = load_config(device_config=seed_configmap, env={})
    nvidia = config.nvidia
    assert nvidia.resource_memory_name == "volcano.sh/vgpu-memory"
    assert nvidia.default_gpu_num == 1 and nvidia.device_split_count == 10 and nvidia.gpu_memory_factor == 1
    assert [e.models[0] for e in nvidia.known_mig_geometries] == ["A30", "A100-SXM4-40GB", "A100-SXM4-80GB"]
    a100 = nvidia.known_mig_geometries[1]
    assert [
        (g.group, [(x.name, x.memory, x.count) for x in g.geometries]) for g in a100.allowed_geometries
    ] == [
        ("group1", [("1g.5gb", 5120, 7)]),
        ("group2", [("2g.10gb", 10240, 3), ("1g.5gb", 5120, 1)]),
        ("group3", [("3g.20gb", 20480, 2)]),
        ("group4", [("7g.40gb", 40960, 1)]),
    ]


def test_seed_003_bare_device_config_yaml_loads(tmp_path: Path) -> None:
    configmap = yaml.safe_load(_seed_003_configmap())
    path = tmp_path / "device-config.yaml"
    path.write_text(configmap["data"]["device-config.yaml"], encoding="utf-8")
    assert load_config(device_config=path, env={}).nvidia.known_mig_geometries[0].models == ("A30",)


def test_scaling_factors_are_exact_decimals(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("deviceConfig:\n  nvidia:\n    deviceMemoryScaling: 1.8\n", encoding="utf-8")
    assert load_config(path, env={}).nvidia.device_memory_scaling == Decimal("1.8")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "admission:\n  defaultMode: gpu\n",
            "admission.defaultMode: Input should be 'auto', 'hami-core' or 'mig'",
        ),
        (
            "deviceConfig:\n  nvidia:\n    defaultCores: 150\n",
            "deviceConfig.nvidia.defaultCores: Input should be less than or equal to 100",
        ),
        (
            "admission:\n  rules:\n    no-such-rule: warn\n",
            "admission.rules: Value error, unknown rule id(s) no-such-rule",
        ),
        (
            "queues:\n  reserve:\n    cpu: lots\n",
            "queues.reserve: Value error, cpu: 'lots' is not a quantity",
        ),
        ("webhook:\n  prot: 1\n", "webhook.prot: Extra inputs are not permitted"),
        ("- a list\n", "expected a mapping at the top level, got list"),
    ],
)
def test_invalid_config_names_the_field(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert expected in str(info.value)
    assert str(path) in str(info.value)


def test_unreadable_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'missing.yaml'}: cannot read")):
        load_config(tmp_path / "missing.yaml", env={})
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1,\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken, env={})


def test_environment_overrides_files(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("admission:\n  defaultMode: hami-core\n", encoding="utf-8")
    config = load_config(
        path,
        env={
            "VGPU_GUARD__ADMISSION__DEFAULT_MODE": "mig",
            "VGPU_GUARD__SCHEDULING__ROUTING": "true",
            "OTHER": "x",
        },
    )
    assert config.admission.default_mode == "mig"
    assert config.scheduling.routing is True


@pytest.mark.parametrize(
    "variable",
    [
        "VGPU_GUARD__ADMISSION__DEFAULT_MODE",
        "VGPU_GUARD__ADMISSION__DEFAULTMODE",
        "VGPU_GUARD__admission__defaultMode",
        "VGPU_GUARD__Admission__Default_Mode",
    ],
)
def test_an_environment_field_is_found_whatever_its_spelling_without_a_config_file(variable: str) -> None:
    """Without a file naming the field, a lowercased name had become an unknown key."""
    assert load_config(env={variable: "mig"}).admission.default_mode == "mig"


def test_an_environment_override_deep_in_the_device_config_and_a_rule_map() -> None:
    config = load_config(
        env={
            "VGPU_GUARD__DEVICE_CONFIG__NVIDIA__DEFAULT_MEMORY": "2048",
            "VGPU_GUARD__ADMISSION__RULES__VGPU-MEMORY-UNIT": "warn",
        }
    )
    assert config.nvidia.default_memory == 2048
    assert config.admission.rules["vgpu-memory-unit"] is Action.WARN


def test_an_environment_variable_naming_no_field_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(env={"VGPU_GUARD__ADMISSION__DEFALT_MODE": "mig"})
    assert str(refused.value).startswith(
        "environment VGPU_GUARD__ADMISSION__DEFALT_MODE: admission has no field 'DEFALT_MODE' (fields: "
        "allocationWriterGroups, allocationWriters, defaultMode,"
    )
    with pytest.raises(ConfigError, match="VGPU_GUARD__NOPE: the configuration has no field 'NOPE'"):
        load_config(env={"VGPU_GUARD__NOPE": "1"})


def test_environment_errors_name_their_source() -> None:
    with pytest.raises(ConfigError, match=r"\+ environment: webhook.port"):
        load_config(env={"VGPU_GUARD__WEBHOOK__PORT": "99999"})


def test_device_config_file_relative_to_config(tmp_path: Path, seed_configmap: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"deviceConfigFile: {seed_configmap.name}\n", encoding="utf-8")
    assert len(load_config(path, env={}).nvidia.known_mig_geometries) == 3
