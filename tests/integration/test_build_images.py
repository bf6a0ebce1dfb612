"""`invoke build` on the real Docker engine: the cpu variant on the locally built torch base."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from clusterprobe import engine
from tests.conftest import run_invoke

pytestmark = pytest.mark.docker


def test_built_image_is_labelled_tagged_and_runnable(cpu_image, docker_client, local_base) -> None:
    image = docker_client.images.get(cpu_image.image_id)
    assert cpu_image.tag in image.tags and "clusterprobe:cpu" in image.tags
    name, tag = cpu_image.tag.split(":")
    assert name == "clusterprobe" and tag.startswith("cpu-torch2.13.0-")
    labels = engine.image_labels(image)
    assert labels["io.clusterprobe.variant"] == "cpu"
    assert labels["org.opencontainers.image.base.name"] == local_base
    assert labels["io.clusterprobe.version.torch"] == "2.13.0+cpu"
    assert tag.endswith(labels["org.opencontainers.image.revision"])
    config = image.attrs["Config"]
    assert config["Cmd"] == ["python", "/opt/clusterprobe/versions.py"]
    # No job-time settings baked in: the image Env is the base's, untouched.
    assert config["Env"] == docker_client.images.get(local_base).attrs["Config"]["Env"]
    # Only our entrypoints on top of the base.
    assert cpu_image.size_bytes - cpu_image.base_size_bytes < 5_000_000
    listing = docker_client.containers.run(cpu_image.image_id, ["ls", "/opt/clusterprobe"], entrypoint=[""],
                                           remove=True).decode().split()
    assert {"ddp_check.py", "comms_bench.py", "versions.py"} <= set(listing)
    assert cpu_image.versions["torch"] == "2.13.0+cpu"


def test_unchanged_rebuild_rebuilds_nothing(cpu_image, local_base) -> None:
    result = run_invoke("build", "--variant", "cpu", "--base-image", local_base, "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["image"] == cpu_image.tag
    assert row["id"] == cpu_image.image_id.removeprefix("sha256:")[:12]
    assert row["layers_rebuilt"] == 0
    assert row["smoke"] == "cached"
    assert "Using cache" in result.stderr


def _build(inputs: Path, *extra: str, repository: str = "cptest"):  # type: ignore[no-untyped-def]
    return run_invoke("build", "--variants-file", str(inputs / "images" / "variants.yaml"), "--variant", "cpu",
                      "--repository", repository, "--json", *extra)


def test_touching_an_entrypoint_rebuilds_only_its_layer(image_inputs: Path) -> None:
    first = _build(image_inputs, "--no-smoke")
    assert first.returncode == 0, first.stderr
    script = image_inputs / "entrypoints" / "versions.py"
    # Unique per run: the engine's layer cache outlives test sessions, and a content built in an
    # earlier run would be a cache hit.
    script.write_text(script.read_text() + f"\n# edited {uuid.uuid4()}\n")
    second = _build(image_inputs, "--no-smoke")
    assert second.returncode == 0, second.stderr
    (row,) = json.loads(second.stdout)
    assert row["layers_rebuilt"] == 1
    copy_steps = [line for line in second.stderr.splitlines() if "COPY entrypoints/" in line]
    assert copy_steps, second.stderr
    assert row["image"].endswith("-nogit")  # not a git checkout: no revision to claim


def test_failing_smoke_test_fails_and_keeps_previous_alias(image_inputs: Path, docker_client) -> None:
    good = _build(image_inputs, "--no-smoke", repository="cptest-smoke")
    assert good.returncode == 0, good.stderr
    before = docker_client.images.get("cptest-smoke:cpu").id
    (image_inputs / "entrypoints" / "ddp_check.py").write_text("import sys\nsys.exit(3)\n")
    bad = _build(image_inputs, repository="cptest-smoke")
    assert bad.returncode == 7, bad.stderr
    assert "smoke test 'ddp_check' failed (exit" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert docker_client.images.get("cptest-smoke:cpu").id == before


def test_build_failure_names_step_and_log(image_inputs: Path) -> None:
    dockerfile = image_inputs / "images" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace(
        "COPY entrypoints/", "RUN echo about-to-fail && false\nCOPY entrypoints/"))
    result = _build(image_inputs, repository="cptest-fail")
    assert result.returncode == 6, result.stderr
    message = result.stderr.split("error:", 1)[1]
    assert "failed at step" in message and "RUN echo about-to-fail && false" in message
    assert "about-to-fail" in message.split("last lines of its log:", 1)[1]


def test_base_image_that_cannot_be_found(image_inputs: Path) -> None:
    result = _build(image_inputs, "--base-image", "registry.invalid/nope/torch:1", repository="cptest-nobase")
    assert result.returncode == 5, result.stderr
    assert "base image registry.invalid/nope/torch:1 is not on this engine and could not be pulled" in result.stderr
    assert "fix:" in result.stderr


def test_base_without_torch_is_refused(image_inputs: Path, local_base: str) -> None:
    rootfs = local_base.rsplit(":", 1)[0] + "-rootfs:bookworm"  # python3 only, no torch
    result = _build(image_inputs, "--base-image", rootfs, repository="cptest-notorch")
    assert result.returncode == 7, result.stderr
    assert "python + torch must be on PATH" in result.stderr


def test_engine_unreachable(tmp_path: Path) -> None:
    result = run_invoke("build", "--variant", "cpu", env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert result.returncode == 4
    assert "cannot reach the Docker engine" in result.stderr and "Traceback" not in result.stderr
