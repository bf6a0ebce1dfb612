"""Rendered sbatch files: golden files, shellcheck, quoting that survives hostile values.

The golden files under tests/golden/stage/ are the reviewed text of every job for a fixed input.
This test compares against them; it rewrites them only when CLUSTERPROBE_UPDATE_GOLDEN=1 is set
(then review `git diff tests/golden`). Pyxis-mode scripts can only be checked this way (and by
shellcheck and `sbatch --test-only` in tests/integration): Enroot and Pyxis cannot run here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from clusterprobe import stage
from clusterprobe.config import load_variants
from clusterprobe.errors import StageError
from tests.conftest import ROOT
from tests.rig.staging import shellcheck

GOLDEN = ROOT / "tests" / "golden" / "stage"
UPDATE = os.environ.get("CLUSTERPROBE_UPDATE_GOLDEN") == "1"
CASES = [("efa", "pyxis"), ("pytorch", "pyxis"), ("cpu", "pyxis"), ("cpu", "host")]


def _manifest(variant: str) -> stage.SquashManifest:
    return stage.SquashManifest(
        path=Path(f"/apps/clusterprobe-{variant}.sqsh.json"), variant=variant,
        image=f"clusterprobe:{variant}-torch2.9.0-1a2b3c4d", image_id="sha256:" + "0123456789abcdef" * 4,
        sqsh=Path(f"/apps/clusterprobe-{variant}.sqsh"), backend="native", compression="zstd:3",
        size_bytes=404 * 2**20, created="2026-01-02T03:04:05Z")


def _options(runtime: str, **overrides: object) -> stage.StageOptions:
    values: dict[str, object] = {"out": "/apps/clusterprobe-jobs", "squash_dir": "/apps",
                                 "repository": "clusterprobe", "runtime": runtime, "partition": "gpu",
                                 "account": "ml-research"}
    if runtime == "pyxis":
        values["mounts"] = ["/fsx:/fsx", "/apps/datasets:/datasets:ro"]
    else:
        values.update(python="/fsx/envs/torch/bin/python", entrypoints="/fsx/clusterprobe/entrypoints")
    values.update(overrides)
    return stage.validate_options(**values)  # type: ignore[arg-type]


def _render(variant: str, runtime: str, job: str, **overrides: object) -> str:
    config = load_variants(ROOT / "images" / "variants.yaml", region="us-east-1")
    manifest = _manifest(variant) if runtime == "pyxis" else None
    return stage.render_job(job, config.get(variant), _options(runtime, **overrides), manifest)


@pytest.mark.parametrize("job", stage.JOBS)
@pytest.mark.parametrize(("variant", "runtime"), CASES)
def test_rendered_scripts_match_golden_files(variant: str, runtime: str, job: str) -> None:
    text = _render(variant, runtime, job)
    golden = GOLDEN / f"{variant}-{runtime}" / f"{job}.sbatch"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}: run with CLUSTERPROBE_UPDATE_GOLDEN=1 and review it"
    assert text == golden.read_text(), (
        f"{golden} differs from the rendered script; if the change is intended, rerun with "
        "CLUSTERPROBE_UPDATE_GOLDEN=1 and review `git diff tests/golden`")


def test_golden_files_are_shellcheck_clean() -> None:
    scripts = sorted(GOLDEN.glob("*/*.sbatch"))
    assert len(scripts) == len(CASES) * len(stage.JOBS)
    result = shellcheck(*scripts)
    assert result.returncode == 0, result.stdout


def test_sbatch_lines_come_in_a_stable_order_and_escape_hash() -> None:
    text = _render("efa", "pyxis", "ddp_check", out="/apps/run#1/jobs")
    options = [line.split("=")[0] for line in text.splitlines() if line.startswith("#SBATCH")]
    assert options == ["#SBATCH --job-name", "#SBATCH --partition", "#SBATCH --account", "#SBATCH --nodes",
                       "#SBATCH --ntasks-per-node", "#SBATCH --gpus-per-node", "#SBATCH --exclusive",
                       "#SBATCH --time", "#SBATCH --output"]
    # In #SBATCH lines an unescaped '#' starts a comment (sbatch's parser); in the shell it is quoted.
    assert "#SBATCH --output=/apps/run\\#1/jobs/efa/logs/ddp_check-%j.out" in text
    assert "STAGED_DIR='/apps/run#1/jobs/efa'" in text
    mounts = "/apps/run#1/jobs/efa:/apps/run#1/jobs/efa,/fsx:/fsx,/apps/datasets:/datasets:ro"
    assert f"'--container-mounts={mounts}'" in text


def test_pyxis_job_points_at_the_sqsh_and_keeps_job_env_over_image_env() -> None:
    text = _render("efa", "pyxis", "comms_bench")
    assert "  --container-image=/apps/clusterprobe-efa.sqsh \\" in text
    env_line = next(line for line in text.splitlines() if "--container-env=" in line)
    names = env_line.split("=", 1)[1].rstrip(" \\").split(",")
    config = load_variants(ROOT / "images" / "variants.yaml", region="us-east-1")
    assert sorted(names) == sorted(config.get("efa").job_env)
    assert {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"} <= set(names)
    assert "export FI_PROVIDER=efa" in text and "export FI_EFA_USE_DEVICE_RDMA=1" in text
    assert "--gpus-per-node=8" in text and "--nproc_per_node=8" in text and "--backend nccl" in text
    # provenance: the image in a comment, in the verdict line and in the job's JSON
    assert "#   image ID:    sha256:0123456789abcdef" in text
    assert "image_id=sha256:0123456789abcdef" in text
    assert '"image_id": "sha256:0123456789abcdef' in text


def test_cpu_job_hides_gpus_and_uses_gloo() -> None:
    for runtime in ("pyxis", "host"):
        text = _render("cpu", runtime, "ddp_check")
        assert "export NVIDIA_VISIBLE_DEVICES=void" in text
        assert "--backend gloo --device cpu" in text
        assert "--gpus-per-node" not in text
        assert "--nproc_per_node=2" in text


def test_host_runtime_runs_the_given_python_without_pyxis_flags() -> None:
    text = _render("cpu", "host", "comms_bench", python="/fsx/envs/torch/bin/python")
    assert "  /fsx/envs/torch/bin/python -m torch.distributed.run \\" in text
    assert "  /fsx/clusterprobe/entrypoints/comms_bench.py \\" in text
    assert "--container" not in text


def test_rendezvous_on_first_node_with_timeout_and_kill_on_bad_exit() -> None:
    text = _render("pytorch", "pyxis", "ddp_check", timeout=123)
    assert 'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in text
    assert "srun --ntasks-per-node=1 --kill-on-bad-exit=1 \\" in text
    assert '--rdzv_backend=c10d --rdzv_endpoint="$HEAD:$RDZV_PORT" --rdzv_id="$SLURM_JOB_ID"' in text
    assert "--rdzv_conf=join_timeout=123" in text and "--timeout 123" in text
    lines = text.rstrip().splitlines()
    assert lines[-3].startswith('echo "clusterprobe: job $JOB $verdict')
    assert lines[-2] == 'echo "clusterprobe: results $RESULT"'
    assert lines[-1] == 'exit "$rc"'


def test_hostile_job_env_values_reach_the_job_verbatim(tmp_path: Path) -> None:
    """Values from variants.yaml go through shlex.quote: bash reads back exactly what was written,
    and nothing in them runs."""
    marker = tmp_path / "pwned"
    hostile = {
        "A": f"$(touch {marker})",
        "B": f"`touch {marker}`; echo",
        "C": "it's \"quoted\" \\ and $HOME",
        "D": "two\nlines",
        "E": "^docker,lo,veth",
    }
    variants = tmp_path / "variants.yaml"
    body = "\n".join(f"      {k}: {json.dumps(v)}" for k, v in hostile.items())  # YAML reads JSON strings
    variants.write_text(f"variants:\n  hostile:\n    base_image: x\n    gpu: false\n    job_env:\n{body}\n")
    variant = load_variants(variants).get("hostile")
    text = stage.render_job("ddp_check", variant, _options("host"), None)
    # The script itself up to the launch, then the variables as the job's processes get them.
    prefix = text[: text.index("HEAD=$(scontrol")]
    script = prefix + "for n in A B C D E; do printf '%s\\0' \"${!n}\"; done\n"
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, timeout=10,
                         env={**os.environ, "SLURM_JOB_ID": "7"}).stdout
    assert out.decode().split("\0")[:-1] == list(hostile.values())
    assert not marker.exists()
    result = shellcheck(_write(tmp_path / "hostile.sbatch", text))
    assert result.returncode == 0, result.stdout


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_template_output_must_pass_a_quoting_filter() -> None:
    env = stage.template_env()
    with pytest.raises(StageError, match="without a quoting filter"):
        env.from_string("rm {{ path }}").render(path="/x; rm -rf /")
    assert env.from_string("rm {{ path | sh }}").render(path="/x; rm -rf /") == "rm '/x; rm -rf /'"
    with pytest.raises(StageError, match="comment"):
        env.from_string("# {{ text | comment }}").render(text="ok\nrm -rf /")
    with pytest.raises(StageError, match="#SBATCH"):
        env.from_string("#SBATCH {{ opt | sbatch }}").render(opt="--partition=x y")


def test_undefined_template_variable_is_an_error() -> None:
    with pytest.raises(Exception, match="undefined"):
        stage.template_env().from_string("{{ missing | sh }}").render()


def test_comms_sweep_defaults_follow_the_device_and_flags_override_them() -> None:
    gpu = _render("pytorch", "pyxis", "comms_bench")
    assert "-b 8 -e 1G -f 2" in gpu and "-n 20 -w 5" in gpu
    assert "--collective all_reduce,all_gather,reduce_scatter,all_to_all" in gpu
    cpu = _render("cpu", "host", "comms_bench", max_bytes="64K", iters=2, collectives=["broadcast"],
                  min_busbw="0.5")
    assert "-b 8 -e 64K -f 4" in cpu and "-n 2 -w 2" in cpu
    assert "--collective broadcast" in cpu and "--min-busbw 0.5" in cpu
    assert re.search(r"--min-busbw", gpu) is None
