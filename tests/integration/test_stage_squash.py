"""stage-jobs against what `invoke squash` really wrote: the real cpu image squashed by the native
backend (mksquashfs; Enroot cannot run here), its manifest read as written, the job checked by a real
Slurm's `sbatch --test-only`. Pyxis itself cannot run here to start the container."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_invoke
from tests.rig.slurm import PARTITION, LocalSlurm

pytestmark = [pytest.mark.docker, pytest.mark.slurm, pytest.mark.slow]


def test_stage_against_a_real_squash_output(cpu_image: Any, slurm_local: LocalSlurm, tmp_path: Path) -> None:
    squash_dir = tmp_path / "apps"
    squashed = run_invoke("squash", "--variant", "cpu", "--out", str(squash_dir), "--backend", "native",
                          "--compression", "lz4", "--json")
    assert squashed.returncode == 0, squashed.stderr
    (row,) = json.loads(squashed.stdout)
    staged = run_invoke("stage-jobs", "--out", str(tmp_path / "jobs"), "--squash-dir", str(squash_dir),
                        "--variant", "cpu", "--nodes", "1", "--partition", PARTITION, "--json",
                        env=slurm_local.env())
    assert staged.returncode == 0, staged.stderr
    for job in json.loads(staged.stdout):
        text = Path(job["script"]).read_text()
        assert f"  --container-image={row['sqsh']} \\" in text
        assert f"#   image ID:    {cpu_image.image_id}" in text
        assert f'"image_id": "{cpu_image.image_id}"' in text
        answer = slurm_local.test_only(job["script"])
        assert answer.returncode == 0, answer.stderr

    # The .sqsh changes behind the manifest's back: stage-jobs refuses to point jobs at it.
    with Path(row["sqsh"]).open("ab") as sqsh:
        sqsh.write(b"\0")
    refused = run_invoke("stage-jobs", "--out", str(tmp_path / "jobs2"), "--squash-dir", str(squash_dir),
                         "--variant", "cpu")
    assert refused.returncode == 10 and "disagree" in refused.stderr, refused.stderr
    assert not (tmp_path / "jobs2").exists()
