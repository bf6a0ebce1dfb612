"""variants.yaml validation: every problem names the file, the line and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterprobe.config import load_variants, parse_key_values
from clusterprobe.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "entrypoints").mkdir(exist_ok=True)
    path = tmp_path / "variants.yaml"
    path.write_text(text)
    return path


GOOD = """\
schema_version: 1
defaults:
  entrypoints: entrypoints
  job_env:
    NCCL_DEBUG: WARN
variants:
  cpu:
    base_image: local/torch:1
    gpu: false
  efa:
    base_image: 763104351884.dkr.ecr.{region}.amazonaws.com/pytorch-training:2.9.0-gpu
    gpu: true
    fabric: efa
    job_env:
      FI_PROVIDER: efa
      FI_EFA_USE_DEVICE_RDMA: 1
"""


def test_shipped_variants_file_is_valid() -> None:
    config = load_variants(ROOT / "images" / "variants.yaml", region="eu-west-1")
    assert {"efa", "pytorch", "cpu"} <= set(config.variants)
    efa = config.get("efa")
    assert efa.base_image.startswith("763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:")
    assert efa.job_env["FI_PROVIDER"] == "efa"
    assert efa.fabric == "efa" and efa.gpu
    assert not config.get("cpu").gpu
    assert config.get("cpu").dockerfile == ROOT / "images" / "Dockerfile"
    assert config.get("cpu").entrypoints == ROOT / "entrypoints"


def test_defaults_merge_and_region(tmp_path: Path) -> None:
    config = load_variants(write(tmp_path, GOOD), region="us-west-2")
    efa = config.get("efa")
    assert efa.base_image == "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.9.0-gpu"
    # maps merge key by key; numbers become strings
    assert efa.job_env == {"NCCL_DEBUG": "WARN", "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}
    assert config.get("cpu").job_env == {"NCCL_DEBUG": "WARN"}
    assert [v.name for v in config.select([])] == ["cpu", "efa"]
    assert [v.name for v in config.select(["efa", "cpu", "efa"])] == ["efa", "cpu"]


def test_unknown_variant_suggests(tmp_path: Path) -> None:
    config = load_variants(write(tmp_path, GOOD), region="us-east-1")
    with pytest.raises(ConfigError, match=r"unknown variant 'ef' .*did you mean 'efa'"):
        config.get("ef")


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "variants:\n  cpu:\n    base_image: [unclosed\n    gpu: false\n")
    with pytest.raises(ConfigError) as err:
        load_variants(path)
    assert f"{path}:" in str(err.value) and "malformed YAML" in str(err.value)


def test_unknown_field_names_line_and_suggests(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("    gpu: false\n", "    gpu: false\n    base_imgae: x\n"))
    with pytest.raises(ConfigError) as err:
        load_variants(path, region="us-east-1")
    assert f"{path}:10: unknown field 'base_imgae'" in str(err.value)
    assert "did you mean 'base_image'" in str(err.value)


def test_missing_required_field(tmp_path: Path) -> None:
    path = write(tmp_path, "variants:\n  cpu:\n    base_image: x/y:1\n")
    with pytest.raises(ConfigError, match="missing the required field 'gpu'"):
        load_variants(path)


def test_wrong_type(tmp_path: Path) -> None:
    path = write(tmp_path, "variants:\n  cpu:\n    base_image: x/y:1\n    gpu: 'yes'\n")
    with pytest.raises(ConfigError, match=r":4: variant 'cpu': 'gpu' must be a bool"):
        load_variants(path)


def test_duplicate_key(tmp_path: Path) -> None:
    path = write(tmp_path, "variants:\n  cpu:\n    base_image: a/b:1\n    gpu: false\n  cpu:\n    gpu: true\n")
    with pytest.raises(ConfigError, match=r":5: duplicate key 'cpu' \(first at line 2\)"):
        load_variants(path)


def test_region_required_for_placeholder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a region"):
        load_variants(write(tmp_path, GOOD), region=None)


def test_bad_env_name_and_fabric(tmp_path: Path) -> None:
    path = write(tmp_path, "variants:\n  cpu:\n    base_image: a/b:1\n    gpu: false\n    job_env:\n      1BAD: x\n")
    with pytest.raises(ConfigError, match=r"'1BAD' in variant 'cpu'\.job_env is not a valid variable name"):
        load_variants(path)
    path = write(tmp_path, "variants:\n  cpu:\n    base_image: a/b:1\n    gpu: false\n    fabric: efaa\n")
    with pytest.raises(ConfigError, match="fabric 'efaa' is unknown: did you mean 'efa'"):
        load_variants(path)


def test_missing_file_and_empty_variants(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_variants(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="missing or empty 'variants'"):
        load_variants(write(tmp_path, "schema_version: 1\n"))


def test_parse_key_values() -> None:
    assert parse_key_values(["A=1", "B=x=y"], "--build-arg") == {"A": "1", "B": "x=y"}
    with pytest.raises(ConfigError, match="'novalue' is not NAME=VALUE"):
        parse_key_values(["novalue"], "--build-arg")
