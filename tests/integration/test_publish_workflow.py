"""publish.yml's own steps, run with bash as a GitHub runner runs them, against the real local
registry and the real Docker engine: disk check, login, build (smoke test first) and push of the
cpu variant, the pushed digest in the job summary equal to the registry's, and a re-run that
skips the unchanged tag.

Stand-ins, for what cannot run here: the ECR API emulator (moto) replaces AWS and the
aws-actions/configure-aws-credentials step (its environment variables point boto3 at the
emulator); the registry on loopback replaces ECR itself. The steps are read from publish.yml,
so this test breaks when the workflow changes; the only edits made to them are listed in
`_local_script` and each is checked to apply."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from clusterprobe import engine
from clusterprobe.build import version_tag
from clusterprobe.config import load_variants
from clusterprobe.registry import RegistryClient
from tests.conftest import LOCAL_BASE_TAG, ROOT
from tests.rig import workflows
from tests.rig.workflows import Step

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]

STEP_ORDER = ["checkout", "bootstrap", "disk", "local-base", "aws", "ghcr-login", "ecr-login", "publish"]
REPOSITORY = "ci/clusterprobe"  # a namespaced repository (vars.IMAGE_REPOSITORY), new to the registry
PUSH_ROW = re.compile(r"^(?P<variant>\S+)\s+(?P<pushed>\S+)\s+(?P<digest>sha256:[0-9a-f]{64})\s+"
                      r"(?P<status>.+?)\s+(?P<attempts>\d+)$")


def _local_script(step: Step) -> str:
    """The step's script with the edits this machine needs, each asserted to apply."""
    script = step.run or ""
    if step.id == "local-base":
        assert step.condition == "matrix.variant == 'cpu'"
        assert script.startswith("sudo -E ")
        script = script.removeprefix("sudo -E ")  # the tests run as root, and there is no sudo here
    if step.id == "ecr-login":
        assert script.strip() == ".venv/bin/invoke login"
        # An ECR host name says its region; the loopback registry's does not.
        script = script.rstrip() + " --region us-east-1\n"
    return script


def _run_step(step: Step, env: dict[str, str], checkout: Path) -> subprocess.CompletedProcess[str]:
    script = checkout.parent / f"{step.id}.sh"
    script.write_text(_local_script(step))
    return subprocess.run([*workflows.GITHUB_BASH, str(script)], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=1800, check=False)


def _push_rows(summary: str, registry_host: str) -> list[dict[str, str]]:
    rows = []
    for line in summary.splitlines():
        match = PUSH_ROW.match(line.strip())
        if match and match["pushed"].startswith(f"{registry_host}/"):
            rows.append(match.groupdict())
    return rows


@pytest.fixture
def runner_env(registry, aws_env, tmp_path: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The job's environment: publish.yml's env: block with this machine's values."""
    job_env = workflows.load("publish.yml")["jobs"]["publish"]["env"]
    local = {
        "VARIANT": "cpu",
        "INVOKE_CLUSTERPROBE_REGISTRY": registry.host,
        "INVOKE_CLUSTERPROBE_REPOSITORY": REPOSITORY,
        "INVOKE_CLUSTERPROBE_REGION": "us-east-1",
        "PIP_EXTRA_INDEX_URL": job_env["PIP_EXTRA_INDEX_URL"],
    }
    assert set(job_env) == set(local), "publish.yml's env: changed; give this test the new values"
    # RUNNER_ENVIRONMENT passes through: on a GitHub-hosted runner (ci.yml) the disk step may
    # free space as in publish.yml; anywhere else it is refused, and there is room here anyway.
    return {**os.environ, **aws_env, **local, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "CI": "true"}


def test_publish_steps_push_cpu_and_rerun_skips(cpu_image, registry, runner_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """From a snapshot of this checkout, as actions/checkout leaves one on a runner."""
    checkout = tmp_path / "checkout"
    commit = workflows.snapshot_checkout(checkout)
    config = load_variants(ROOT / "images" / "variants.yaml", region="us-east-1")
    assert config.get("cpu").base_image == LOCAL_BASE_TAG  # so the workflow needs no --base-image
    steps = workflows.steps("publish.yml", "publish")
    assert [s.id for s in steps] == STEP_ORDER
    by_id = {s.id: s for s in steps}
    assert by_id["bootstrap"].run == "bash tools/bootstrap.sh"  # this machine is bootstrapped already
    assert "ghcr.io/" in by_id["ghcr-login"].condition  # not taken: the target is not on ghcr.io

    outputs = []
    for step_id in ("disk", "local-base", "ecr-login", "publish"):
        result = _run_step(by_id[step_id], runner_env, checkout)
        outputs.append(result.stdout + result.stderr)
        assert result.returncode == 0, f"step {step_id}:\n{result.stdout}\n{result.stderr}"
    disk_row = outputs[0].splitlines()[2].split()
    assert disk_row[0] == engine.connect().info()["DockerRootDir"] and disk_row[-1] == "enough"

    summary_file = Path(runner_env["GITHUB_STEP_SUMMARY"])
    summary = summary_file.read_text()
    assert summary.startswith("### cpu\n```\n") and summary.endswith("```\n")
    (row,) = _push_rows(summary, registry.host)
    tag = row["pushed"].rsplit(":", 1)[1]
    assert row["variant"] == "cpu" and row["status"] == "pushed"
    # The tag comes from the versions probed inside the image (as the fixture's build probed
    # them) and the snapshot's commit, the last one touching images/ and entrypoints/.
    assert tag == version_tag("cpu", cpu_image.versions, commit[:8])
    assert tag.startswith(f"cpu-torch{cpu_image.versions['torch'].split('+')[0]}-")
    assert row["pushed"] == f"{registry.host}/{REPOSITORY}:{tag}"

    remote = RegistryClient(registry.host, credentials=(registry.username, registry.password))
    manifest = remote.manifest(REPOSITORY, tag)
    assert manifest is not None and manifest.digest == row["digest"]
    local = engine.get_image(engine.connect(), f"{REPOSITORY}:cpu")
    assert local is not None and manifest.config_digest == local.id

    rerun = _run_step(by_id["publish"], runner_env, checkout)
    assert rerun.returncode == 0, rerun.stderr
    first, again = _push_rows(summary_file.read_text(), registry.host)
    assert first == row
    assert again["status"] == "unchanged, skipped" and again["digest"] == row["digest"]
    assert remote.tags(REPOSITORY) == [tag]

    for text in [*outputs, rerun.stdout + rerun.stderr, summary_file.read_text()]:
        assert registry.password not in text


def test_publish_commands_plan_the_gpu_variants(runner_env: dict[str, str], tmp_path: Path) -> None:
    """publish.yml's login and build lines, for efa and pytorch, as dry runs against an ECR
    registry name: the flags parse, efa logs in to the DLC registry for its base, and the push
    goes to the user's ECR repository after the smoke test."""
    by_id = {s.id: s for s in workflows.steps("publish.yml", "publish")}
    ecr_host = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
    for variant in ("efa", "pytorch"):
        env = {**runner_env, "VARIANT": variant, "INVOKE_CLUSTERPROBE_REGISTRY": ecr_host,
               "INVOKE_CLUSTERPROBE_REPOSITORY": "clusterprobe", "INVOKE_CLUSTERPROBE_REGION": "us-west-2"}
        lines = [line for step_id in ("ecr-login", "publish")
                 for line in workflows.command_lines(by_id[step_id].run or "")
                 if line.startswith(".venv/bin/invoke ")]
        script = tmp_path / f"dry-{variant}.sh"
        script.write_text("".join(f"{line} --dry-run\n" for line in lines))
        result = subprocess.run([*workflows.GITHUB_BASH, str(script)], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=300, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        plan = result.stdout
        login = "docker login --username AWS --password-stdin"
        assert f"aws ecr get-login-password --region us-west-2 | {login} {ecr_host}" in plan
        if variant == "efa":
            assert f"{login} 763104351884.dkr.ecr.us-west-2.amazonaws.com" in plan
        smoke_at = plan.index("docker run")
        push_at = plan.index(f"docker push {ecr_host}/clusterprobe:{variant}-torch")
        assert smoke_at < push_at


def test_summary_rows_parse_like_the_push_table() -> None:
    """The parser above reads what `invoke push` prints (checked on a rendered table, not a literal)."""
    from clusterprobe.commands import PUSH_COLUMNS
    from clusterprobe.output import render_table

    digest = "sha256:" + "ab" * 32
    table = render_table([{"variant": "cpu", "pushed": "h:1/r:cpu-x", "digest": digest,
                           "status": "unchanged, skipped", "attempts": 1}], PUSH_COLUMNS)
    assert _push_rows(table, "h:1") == [{"variant": "cpu", "pushed": "h:1/r:cpu-x", "digest": digest,
                                          "status": "unchanged, skipped", "attempts": "1"}]
