"""ECR login through the token API, push to a real registry, digest read back over the v2 API."""

from __future__ import annotations

import json
import os
import stat
import threading
import uuid
from pathlib import Path

import pytest

from clusterprobe import engine, push
from clusterprobe.registry import RegistryClient
from clusterprobe.runner import Runner
from tests.conftest import run_invoke

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def _docker_auths() -> dict[str, object]:
    config = Path(os.environ["DOCKER_CONFIG"]) / "config.json"
    return json.loads(config.read_text()).get("auths", {}) if config.exists() else {}


def test_login_with_ecr_token_then_push_and_skip_unchanged(cpu_image, registry, aws_env, ecr_emulator):
    login = run_invoke("login", "--registry", registry.host, "--region", "us-east-1", env=aws_env)
    assert login.returncode == 0, login.stderr
    assert registry.host in _docker_auths()
    # The token never shows, neither in what we print nor in the command line we echo.
    assert registry.password not in login.stdout + login.stderr
    assert "--password-stdin" in login.stdout + login.stderr

    first = run_invoke("push", "--variant", "cpu", "--registry", registry.host, "--json", env=aws_env)
    assert first.returncode == 0, first.stderr
    (row,) = json.loads(first.stdout)
    assert row["status"] == "pushed"
    assert row["pushed"] == f"{registry.host}/{cpu_image.tag}"
    assert row["digest"].startswith("sha256:")

    client = RegistryClient(registry.host, credentials=(registry.username, registry.password))
    repo, tag = cpu_image.tag.split(":")
    manifest = client.manifest(repo, tag)
    assert manifest is not None
    assert manifest.digest == row["digest"]
    assert manifest.config_digest == cpu_image.image_id  # the registry holds exactly our image
    assert "clusterprobe" in registry.catalog()

    again = run_invoke("push", "--variant", "cpu", "--registry", registry.host, "--json", env=aws_env)
    assert again.returncode == 0, again.stderr
    (row2,) = json.loads(again.stdout)
    assert row2["status"] == "unchanged, skipped"
    assert row2["digest"] == row["digest"]


def test_push_without_login_says_to_log_in(cpu_image, registry, tmp_path):
    result = run_invoke("push", "--variant", "cpu", "--registry", registry.host,
                        env={"DOCKER_CONFIG": str(tmp_path)})
    assert result.returncode == 9, result.stderr
    assert f"invoke login --registry {registry.host}" in result.stderr
    assert "Traceback" not in result.stderr


def test_push_retries_while_registry_restarts(cpu_image, registry, aws_env, docker_client):
    assert run_invoke("login", "--registry", registry.host, "--region", "us-east-1", env=aws_env).returncode == 0
    docker_client.api.reload_config()
    specs = push.plan_pushes(docker_client, ["cpu"], repository="clusterprobe", registry=registry.host,
                             extra_tags=["retry-test"])
    (spec,) = [s for s in specs if s.target.tag == "retry-test"]  # a new tag: nothing to skip
    registry.stop()
    restarter = threading.Timer(3.0, registry.start)
    restarter.start()
    lines: list[str] = []
    try:
        result = push.execute_push(docker_client, Runner(echo=lines.append), spec, retries=5, backoff=2.0)
    finally:
        restarter.join()
    assert result is not None and not result.skipped
    assert result.attempts > 1, lines
    assert any("retrying" in line for line in lines)


def test_login_writes_enroot_credentials_without_secret(registry, aws_env, tmp_path):
    creds = tmp_path / "enroot" / ".credentials"
    creds.parent.mkdir()
    creds.write_text("machine nvcr.io login $oauthtoken password keep-me\n"
                     f"machine {registry.host} login AWS password stale\n")
    result = run_invoke("login", "--registry", registry.host, "--region", "us-east-1",
                        "--enroot-credentials", str(creds), env=aws_env)
    assert result.returncode == 0, result.stderr
    lines = creds.read_text().splitlines()
    assert lines == [
        "machine nvcr.io login $oauthtoken password keep-me",
        f"machine {registry.host} login AWS password $(aws ecr get-login-password --region us-east-1)",
    ]
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600

    stored = run_invoke("login", "--registry", registry.host, "--region", "us-east-1",
                        "--enroot-credentials", str(creds), "--enroot-store-token", env=aws_env)
    assert stored.returncode == 0, stored.stderr
    assert f"machine {registry.host} login AWS password {registry.password}" in creds.read_text()
    assert registry.password not in stored.stdout + stored.stderr


def test_login_without_aws_credentials_fails_clearly(registry, tmp_path):
    env = {"AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
           "AWS_EC2_METADATA_DISABLED": "true"}
    result = run_invoke("login", "--registry", registry.host, "--region", "us-east-1", env=env,
                        unset=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"))
    assert result.returncode == 8
    assert "no AWS credentials found" in result.stderr
    assert "Traceback" not in result.stderr


def test_registry_client_reports_missing_tag(registry):
    client = RegistryClient(registry.host, credentials=(registry.username, registry.password))
    assert client.manifest("clusterprobe", "no-such-tag") is None


def test_engine_sees_pushed_digest(cpu_image, registry, aws_env, docker_client):
    assert run_invoke("login", "--registry", registry.host, "--region", "us-east-1", env=aws_env).returncode == 0
    result = run_invoke("push", "--variant", "cpu", "--registry", registry.host, "--json", env=aws_env)
    assert result.returncode == 0, result.stderr
    image = engine.get_image(docker_client, cpu_image.tag)
    assert image is not None
    # docker records the digest it pushed; it must be the one we report.
    (row,) = json.loads(result.stdout)
    assert f"{registry.host}/clusterprobe@{row['digest']}" in image.attrs.get("RepoDigests", [])


def test_rebuild_with_same_inputs_is_not_pushed_again(image_inputs, registry, aws_env, docker_client):
    """A fresh CI runner rebuilds: new timestamps, new image ID, same inputs. The tag already
    holds an equivalent image, so it is skipped (immutable ECR tags would refuse an overwrite)."""
    variants = str(image_inputs / "images" / "variants.yaml")
    build = ("build", "--variants-file", variants, "--variant", "cpu", "--repository", "cptest-inputs", "--no-smoke")
    push_args = ("push", "--variant", "cpu", "--repository", "cptest-inputs", "--registry", registry.host, "--json")
    assert run_invoke("login", "--registry", registry.host, "--region", "us-east-1", env=aws_env).returncode == 0
    assert run_invoke(*build).returncode == 0
    first_id = docker_client.images.get("cptest-inputs:cpu").id
    first = run_invoke(*push_args, env=aws_env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)[0]["status"] == "pushed"

    rebuilt = run_invoke(*build, "--no-cache")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert docker_client.images.get("cptest-inputs:cpu").id != first_id  # really a different image
    second = run_invoke(*push_args, env=aws_env)
    assert second.returncode == 0, second.stderr
    (row,) = json.loads(second.stdout)
    assert row["status"] == "same inputs, skipped"
    assert row["digest"] == json.loads(first.stdout)[0]["digest"]

    script = image_inputs / "entrypoints" / "versions.py"
    script.write_text(script.read_text() + f"\n# changed input {uuid.uuid4()}\n")
    assert run_invoke(*build).returncode == 0
    third = run_invoke(*push_args, env=aws_env)
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)[0]["status"] == "pushed"
