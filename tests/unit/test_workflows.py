"""The GitHub workflows, checked offline (GitHub cannot be reached from here): the GitHub workflow
schema (check-jsonschema's vendored copy), shellcheck on every `run:` step, ci.yml running exactly
.ci/run, and publish.yml running nothing but invoke tasks. tests/integration/test_publish_workflow.py
runs publish.yml's steps themselves against a real registry."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterprobe.config import load_variants
from tests.conftest import ROOT
from tests.rig import workflows
from tests.rig.workflows import Step

CHECK_JSONSCHEMA = str(Path(sys.executable).parent / "check-jsonschema")


def _validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHECK_JSONSCHEMA, "--builtin-schema", "vendor.github-workflows", *map(str, paths)],
                          capture_output=True, text=True, check=False, timeout=120)


def _shellcheck(script: Path) -> subprocess.CompletedProcess[str]:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is not installed (tools/bootstrap.sh installs it)"
    return subprocess.run([shellcheck, "--shell=bash", "--severity=style", str(script)],
                          capture_output=True, text=True, check=False, timeout=60)


def test_both_workflows_exist() -> None:
    names = {p.name for p in workflows.workflow_files()}
    assert {"ci.yml", "publish.yml"} <= names


@pytest.mark.parametrize("path", workflows.workflow_files(), ids=lambda p: p.name)
def test_run_steps_fail_on_any_failed_command(path: Path) -> None:
    """Unspecified, GitHub runs `bash -e` without pipefail: `invoke build | tee` would pass on failure."""
    data = workflows.load(path.name)
    assert data["defaults"]["run"]["shell"] == "bash"
    for job in data["jobs"].values():
        for step in job.get("steps", []):
            assert step.get("shell", "bash") == "bash", step


def test_workflows_validate_against_the_github_workflow_schema() -> None:
    result = _validate(*workflows.workflow_files())
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path: Path) -> None:
    """The validator really validates: a misspelt key in a copy of publish.yml fails it."""
    broken = tmp_path / "publish.yml"
    text = (workflows.WORKFLOWS / "publish.yml").read_text()
    assert "    runs-on: ubuntu-24.04\n" in text
    broken.write_text(text.replace("    runs-on: ubuntu-24.04\n", "    run-on: ubuntu-24.04\n"))
    result = _validate(broken)
    assert result.returncode != 0
    assert "run-on" in result.stdout + result.stderr or "runs-on" in result.stdout + result.stderr


@pytest.mark.parametrize("step", workflows.run_steps(), ids=Step.label)
def test_run_step_passes_shellcheck(step: Step, tmp_path: Path) -> None:
    script = tmp_path / "step.sh"
    script.write_text(workflows.as_shell_script(step))
    result = _shellcheck(script)
    assert result.returncode == 0, f"{step.label()}:\n{result.stdout}{result.stderr}"


def test_shellcheck_finds_what_it_should(tmp_path: Path) -> None:
    """The check above is live: an unquoted expansion in a run: step is reported."""
    script = tmp_path / "bad.sh"
    script.write_text("#!/usr/bin/env bash\n.venv/bin/invoke build --variant $VARIANT\n")
    result = _shellcheck(script)
    assert result.returncode != 0 and "SC2086" in result.stdout


@pytest.mark.parametrize("step", workflows.run_steps(), ids=Step.label)
def test_run_step_has_no_expressions_or_secrets(step: Step) -> None:
    """`${{ }}` in a script is template injection; secrets go to actions' `with:`, never to shell."""
    assert step.run is not None
    assert "${{" not in step.run, f"{step.label()}: pass values through env:, not ${{{{ }}}} in run:"
    step_env = " ".join(str(v) for v in (step.raw.get("env") or {}).values())
    for text in (step.run, step_env):
        assert "secrets." not in text
        for word in ("--password ", "--password=", " -p ", "TOKEN", "SECRET"):
            assert word not in text, f"{step.label()}: {word!r} in a run: step"


def test_ci_runs_exactly_what_ci_run_runs() -> None:
    data = workflows.load("ci.yml")
    assert set(data["on"]) == {"push", "pull_request"}
    run_steps = [s for s in workflows.steps("ci.yml") if s.run is not None]
    assert len(run_steps) == 1, "ci.yml must run .ci/run and nothing beside it"
    (line,) = workflows.command_lines(run_steps[0].run or "")
    # Root, like the machines .ci/run is written for (apt, debootstrap, the Slurm daemons).
    assert line.removeprefix("sudo -E ") == "bash .ci/run"
    ci_run = workflows.command_lines((ROOT / ".ci" / "run").read_text())
    assert "bash tools/bootstrap.sh" in ci_run
    assert ".venv/bin/ruff check ." in ci_run
    assert ".venv/bin/mypy" in ci_run
    assert ".venv/bin/python -m pytest -q" in ci_run
    checkout = [s for s in workflows.steps("ci.yml") if (s.uses or "").startswith("actions/checkout@")]
    assert len(checkout) == 1 and checkout[0].raw["with"]["fetch-depth"] == 0


def test_publish_triggers_and_permissions() -> None:
    data = workflows.load("publish.yml")
    assert data["on"]["push"]["tags"] == ["v*"]
    assert "workflow_dispatch" in data["on"]
    assert data["permissions"] == {"contents": "read"}
    job = data["jobs"]["publish"]
    assert job["permissions"]["id-token"] == "write"
    assert job["strategy"]["fail-fast"] is False


def test_publish_matrix_lists_every_variant() -> None:
    variants = load_variants(ROOT / "images" / "variants.yaml", region="us-east-1")
    job = workflows.load("publish.yml")["jobs"]["publish"]
    assert job["strategy"]["matrix"]["variant"] == list(variants.variants)
    assert job["env"]["VARIANT"] == "${{ matrix.variant }}"


def test_publish_credentials_come_from_oidc_and_github_token() -> None:
    by_id = {s.id: s for s in workflows.steps("publish.yml", "publish")}
    aws = by_id["aws"]
    assert (aws.uses or "").startswith("aws-actions/configure-aws-credentials@")
    assert set(aws.raw["with"]) == {"role-to-assume", "aws-region", "role-session-name"}
    assert "vars.AWS_ROLE_ARN" in aws.raw["with"]["role-to-assume"]
    ghcr = by_id["ghcr-login"]
    assert (ghcr.uses or "").startswith("docker/login-action@")
    assert ghcr.raw["with"]["password"] == "${{ secrets.GITHUB_TOKEN }}"
    assert "ghcr.io/" in ghcr.condition and "ghcr.io/" in by_id["ecr-login"].condition
    checkout = by_id["checkout"]
    assert (checkout.uses or "").startswith("actions/checkout@") and checkout.raw["with"]["fetch-depth"] == 0


# The only shell publish.yml may contain: invoke tasks, bootstrap, and writing the build/push
# tables into the job summary (a Markdown code block) by redirection.
PUBLISH_SHELL = {
    "bash tools/bootstrap.sh",
    "{",
    'echo "### $VARIANT"',
    "echo '```'",
    '} | tee -a "$GITHUB_STEP_SUMMARY"',
}


def test_publish_runs_only_invoke_tasks() -> None:
    invoked = []
    for step in workflows.steps("publish.yml"):
        for line in workflows.command_lines(step.run or ""):
            command = line.removeprefix("sudo -E ")
            if command.startswith(".venv/bin/invoke "):
                invoked.append(command.split()[1])
            else:
                assert line in PUBLISH_SHELL, f"{step.label()}: {line!r} is logic the invoke tasks don't have"
    assert invoked == ["disk", "local-base", "login", "build"]


def test_publish_pushes_only_after_the_smoke_test() -> None:
    by_id = {s.id: s for s in workflows.steps("publish.yml", "publish")}
    text = (workflows.WORKFLOWS / "publish.yml").read_text()
    assert "--no-smoke" not in text
    assert '.venv/bin/invoke build --variant "$VARIANT" --push' in (by_id["publish"].run or "")
    assert "--tag" not in (by_id["publish"].run or ""), "tags come from the versions probed in the image"
    ids = [s.id for s in workflows.steps("publish.yml", "publish")]
    assert ids.index("disk") < ids.index("local-base") < ids.index("publish")
    assert ids.index("aws") < ids.index("ecr-login") < ids.index("publish")
