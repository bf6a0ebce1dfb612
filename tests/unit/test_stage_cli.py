"""`invoke stage-jobs` as a user runs it: exit codes, nothing staged on bad input, dry-run, output.

No Slurm here (tests/integration/test_slurm_*.py submit for real). The .sqsh files are placeholders
with the manifest `invoke squash` writes (tests/rig/staging.py): stage-jobs never reads their content.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, run_invoke
from tests.rig.staging import placeholder_squash, shellcheck


def test_injection_attempt_is_rejected_and_nothing_is_staged(tmp_path: Path) -> None:
    out = tmp_path / "jobs"
    result = run_invoke("stage-jobs", "--out", str(out), "--runtime", "host", "--partition", "x; rm -rf /")
    assert result.returncode == 2, result.stderr
    assert "--partition 'x; rm -rf /' is not valid" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_missing_squash_output_is_refused_with_the_fix(tmp_path: Path) -> None:
    placeholder_squash(tmp_path / "sq", "cpu")  # cpu squashed, efa not
    out = tmp_path / "jobs"
    result = run_invoke("stage-jobs", "--out", str(out), "--squash-dir", str(tmp_path / "sq"),
                        "--variant", "cpu", "--variant", "efa")
    assert result.returncode == 10, result.stderr
    assert "variant 'efa' has not been squashed" in result.stderr
    assert f"invoke squash --variant efa --out {tmp_path / 'sq'}" in result.stderr
    assert not out.exists()  # all checked before anything is written: cpu was not staged either


def test_pyxis_stage_points_at_the_absolute_sqsh(tmp_path: Path) -> None:
    for variant in ("cpu", "efa"):
        placeholder_squash(tmp_path / "sq", variant)
    # relative --out and --squash-dir are taken from where invoke runs
    result = run_invoke("--search-root", str(ROOT), "stage-jobs", "--out", "jobs", "--squash-dir", "sq",
                        "--variant", "cpu", "--variant", "efa", "--mount", "/fsx:/fsx", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(r["variant"], r["job"], r["job_id"]) for r in rows] == [
        ("cpu", "ddp_check", None), ("cpu", "comms_bench", None),
        ("efa", "ddp_check", None), ("efa", "comms_bench", None)]
    scripts = [Path(r["script"]) for r in rows]
    assert all(p.is_absolute() and p.exists() for p in scripts)
    efa = (tmp_path / "jobs" / "efa" / "ddp_check.sbatch").read_text()
    assert f"--container-image={tmp_path}/sq/clusterprobe-efa.sqsh " in efa
    assert "export FI_PROVIDER=efa" in efa
    assert shellcheck(*scripts).returncode == 0


def test_dry_run_prints_files_and_sbatch_commands_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "jobs"
    result = run_invoke("stage-jobs", "--out", str(out), "--runtime", "host", "--variant", "cpu",
                        "--submit", "--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"# write {out}/cpu/ddp_check.sbatch (mode 0755, " in lines[0]
    assert f"# mkdir -p {out}/cpu/logs" in lines
    assert lines[-2:] == [f"+ sbatch --parsable {out}/cpu/ddp_check.sbatch",
                          f"+ sbatch --parsable {out}/cpu/comms_bench.sbatch"]
    assert not out.exists()


def test_table_for_people(tmp_path: Path) -> None:
    result = run_invoke("stage-jobs", "--out", str(tmp_path / "jobs"), "--runtime", "host", "--variant", "cpu")
    assert result.returncode == 0, result.stderr
    header, _rule, *rows = result.stdout.splitlines()
    assert header.split() == ["variant", "job", "job_id", "script"]
    assert rows[0].split() == ["cpu", "ddp_check", "-", str(tmp_path / "jobs" / "cpu" / "ddp_check.sbatch")]


def test_help_describes_every_flag() -> None:
    result = run_invoke("--help", "stage-jobs")
    assert result.returncode == 0
    for flag in ("--out", "--variant", "--nodes", "--gpus-per-node", "--procs-per-node", "--partition",
                 "--account", "--time", "--mount", "--runtime", "--submit", "--dry-run", "--squash-dir",
                 "--python", "--entrypoints", "--json", "--[no-]exclusive", "--min-busbw", "--collective"):
        line = next((ln for ln in result.stdout.splitlines() if ln.strip().startswith(flag)), None)
        assert line is not None, flag
        assert len(line.split()) > 1, f"{flag} has no help text"
