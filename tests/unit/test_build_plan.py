"""The build plan, computed without Docker: what would be built, from what, with which labels."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest

from clusterprobe import build
from clusterprobe.config import load_variants
from clusterprobe.errors import ConfigError
from tests.conftest import ROOT, run_invoke


@pytest.fixture
def config():  # type: ignore[no-untyped-def]
    return load_variants(ROOT / "images" / "variants.yaml", region="us-west-2")


def test_plan_for_each_variant(config) -> None:  # type: ignore[no-untyped-def]
    specs = build.plan_builds(config, [], repository="clusterprobe", build_args={"EXTRA": "1"})
    assert [s.variant.name for s in specs] == ["efa", "pytorch", "cpu"]
    efa = specs[0]
    assert efa.build_args["BASE_IMAGE"].startswith("763104351884.dkr.ecr.us-west-2.amazonaws.com/")
    assert efa.build_args["EXTRA"] == "1"
    assert efa.dockerfile == "images/Dockerfile"
    assert efa.context_dir == ROOT
    arcnames = [name for name, _ in efa.context_files]
    assert "images/Dockerfile" in arcnames and "entrypoints/versions.py" in arcnames
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in arcnames)
    assert all(n == "images/Dockerfile" or n.startswith("entrypoints/") for n in arcnames)
    labels = efa.static_labels()
    assert labels["io.clusterprobe.variant"] == "efa"
    assert labels["org.opencontainers.image.base.name"] == efa.base_image
    assert labels["org.opencontainers.image.revision"] == efa.revision
    assert efa.alias_tag == "clusterprobe:efa"


def test_base_image_overrides(config) -> None:  # type: ignore[no-untyped-def]
    one = build.parse_base_overrides(["mirror.local/torch:1"], ["cpu"], config)
    assert one == {"cpu": "mirror.local/torch:1"}
    many = build.parse_base_overrides(["efa=mirror/dlc:1", "cpu=mirror/cpu:1"], ["efa", "cpu"], config)
    (efa, cpu) = build.plan_builds(config, ["efa", "cpu"], repository="cp", base_images=many)
    assert efa.base_image == "mirror/dlc:1" and cpu.build_args["BASE_IMAGE"] == "mirror/cpu:1"
    with pytest.raises(ConfigError, match="ambiguous with 3 variants"):
        build.parse_base_overrides(["x/y:1"], [], config)
    with pytest.raises(ConfigError, match="did you mean 'efa'"):
        build.parse_base_overrides(["efx=x/y:1"], [], config)
    with pytest.raises(ConfigError, match="not a valid image reference"):
        build.plan_builds(config, ["cpu"], repository="cp", base_images={"cpu": "bad ref"})


def test_context_tar_is_deterministic(config, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (spec,) = build.plan_builds(config, ["cpu"], repository="cp")
    first = build.context_tar(spec)
    # Touching files (new mtimes) must not change the bytes: the layer cache depends on it.
    for _, path in spec.context_files:
        path.touch()
    assert build.context_tar(spec) == first
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {m.mtime for m in members} == {0} and {m.uid for m in members} == {0}


def test_dockerfile_outside_context_rejected(tmp_path: Path) -> None:
    (tmp_path / "ctx" / "entrypoints").mkdir(parents=True)
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    (tmp_path / "ctx" / "v.yaml").write_text(
        "variants:\n  cpu:\n    base_image: a/b:1\n    gpu: false\n    dockerfile: ../Dockerfile\n"
        "    entrypoints: entrypoints\n"
    )
    config = load_variants(tmp_path / "ctx" / "v.yaml")
    with pytest.raises(ConfigError, match="must lie inside the build context"):
        build.plan_builds(config, ["cpu"], repository="cp")


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        ({"torch": "2.13.0+cpu"}, "cpu-torch2.13.0-abc12345"),
        ({"torch": "2.9.0+cu130", "cuda": "13.0", "nccl": "2.27.7", "aws_ofi_nccl": "1.16.2"},
         "cpu-torch2.9.0-cu13.0-nccl2.27.7-ofi1.16.2-abc12345"),
        ({"torch": "2.9.0", "cuda": "12.8", "nccl": "2.27.3", "aws_ofi_nccl": "present"},
         "cpu-torch2.9.0-cu12.8-nccl2.27.3-abc12345"),
    ],
)
def test_version_tag(versions: dict[str, str], expected: str) -> None:
    assert build.version_tag("cpu", versions, "abc12345") == expected


def test_build_dry_run_prints_the_commands() -> None:
    result = run_invoke("build", "--variant", "cpu", "--base-image", "example.invalid/torch:1", "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "docker pull example.invalid/torch:1" in out
    assert "docker build --file images/Dockerfile --build-arg BASE_IMAGE=example.invalid/torch:1" in out
    assert "python /opt/clusterprobe/versions.py" in out
    assert "docker tag clusterprobe:cpu-candidate clusterprobe:cpu" in out


def test_build_bad_input_exits_with_message() -> None:
    result = run_invoke("build", "--variant", "cpuu", "--dry-run")
    assert result.returncode == 2
    assert "did you mean 'cpu'" in result.stderr and "Traceback" not in result.stderr
    result = run_invoke("build", "--variant", "cpu", "--build-arg", "oops", "--dry-run")
    assert result.returncode == 2 and "'oops' is not NAME=VALUE" in result.stderr


def test_variants_file_errors_through_cli(tmp_path: Path) -> None:
    bad = tmp_path / "variants.yaml"
    shutil.copy(ROOT / "images" / "variants.yaml", bad)
    bad.write_text(bad.read_text().replace("  cpu:\n", "  cpu:\n    colour: blue\n"))
    result = run_invoke("build", "--variants-file", str(bad), "--variant", "cpu", "--dry-run")
    assert result.returncode == 2
    assert "unknown field 'colour'" in result.stderr and f"{bad}:" in result.stderr
