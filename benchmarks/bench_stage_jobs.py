#!/usr/bin/env python3
"""stage-jobs figures.

1. `invoke stage-jobs` as a user runs it (host runtime, cpu variant): whole command, seconds;
2. in-process: render all variants' jobs (Pyxis, placeholder .sqsh manifests) and write them, first
   stage and re-stage (the folder swap that keeps logs/), milliseconds;
3. with --slurm: a staged comms_bench job on the real single-node Slurm of the test rig, from sbatch
   to its verdict, against the same torchrun command run bare (no Slurm, no wrapper), alternating so
   that a busy machine slows both alike: the ratio is what the staged job costs on top (Slurm's
   scheduling and polling included).
Medians over --repeat runs, and the minimum (interference only ever adds time). Figures are
printed, never asserted.

    .venv/bin/python benchmarks/bench_stage_jobs.py [--repeat 5] [--slurm]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from clusterprobe import stage  # noqa: E402
from clusterprobe.config import load_variants  # noqa: E402
from clusterprobe.output import render_table  # noqa: E402
from tests.rig.staging import placeholder_squash  # noqa: E402

SWEEP = ("--max-bytes", "64K", "--iters", "2", "--timeout", "60")


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def row(name: str, samples: list[float], unit: str, scale: float = 1.0) -> dict[str, object]:
    return {"what": name, "median": statistics.median(samples) * scale, "min": min(samples) * scale,
            "unit": unit, "runs": len(samples)}


def invoke_stage(out: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "invoke", "stage-jobs", "--out", str(out), "--runtime", "host",
                    "--variant", "cpu", *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def staging_rows(work: Path, repeat: int) -> list[dict[str, object]]:
    config = load_variants(ROOT / "images" / "variants.yaml", region="us-east-1")
    variants = list(config.variants.values())
    for variant in variants:
        placeholder_squash(work / "sq", variant.name)
    cli = [timed(lambda: invoke_stage(work / "cli")) for _ in range(repeat)]
    options = stage.validate_options(out=work / "jobs", squash_dir=work / "sq", repository="clusterprobe")

    def render() -> list[stage.VariantStage]:
        return stage.plan_stage(variants, options, stage.read_manifests(variants, options))

    renders = [timed(render) for _ in range(repeat)]
    plans = render()
    first, again = [], []
    for i in range(repeat):
        options_i = stage.validate_options(out=work / f"jobs{i}", squash_dir=work / "sq", repository="clusterprobe")
        plans_i = stage.plan_stage(variants, options_i, stage.read_manifests(variants, options_i))
        first.append(timed(lambda p=plans_i: [stage.write_stage(v) for v in p]))  # type: ignore[misc]
        again.append(timed(lambda p=plans_i: [stage.write_stage(v) for v in p]))  # type: ignore[misc]
    n = len(plans) * len(stage.JOBS)
    return [row("invoke stage-jobs (cpu, host), whole command", cli, "s"),
            row(f"render {n} jobs of {len(plans)} variants", renders, "ms", 1000),
            row(f"write {len(plans)} folders, first time", first, "ms", 1000),
            row(f"write {len(plans)} folders again (swap, logs kept)", again, "ms", 1000)]


def slurm_rows(work: Path, repeat: int) -> list[dict[str, object]]:
    from tests.rig.slurm import start_local_slurm

    cluster = start_local_slurm()
    try:
        result = subprocess.run([sys.executable, "-m", "invoke", "stage-jobs", "--out", str(work / "slurm"),
                                 "--runtime", "host", "--variant", "cpu", "--nodes", "1", "--json", *SWEEP],
                                cwd=ROOT, check=True, capture_output=True, text=True)
        import json

        script = next(Path(r["script"]) for r in json.loads(result.stdout) if r["job"] == "comms_bench")
        bare = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                str(ROOT / "entrypoints" / "comms_bench.py"), "-b", "8", "-e", "64K", "-f", "4", "-n", "2",
                "-w", "2", "-c", "1", "--collective", "all_reduce,all_gather", "--backend", "gloo",
                "--device", "cpu", "--timeout", "60", "--json", str(work / "bare.jsonl")]

        def staged() -> None:
            info = cluster.wait(cluster.sbatch(script), timeout=300)
            if info.state != "COMPLETED":
                raise SystemExit(f"staged job ended {info.state} {info.exit_code}")

        def direct() -> None:
            subprocess.run(bare, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        staged_s, bare_s = [], []
        for _ in range(repeat):
            staged_s.append(timed(staged))
            bare_s.append(timed(direct))
    finally:
        cluster.stop()
    ratios = [s / b for s, b in zip(staged_s, bare_s, strict=True)]
    print(f"# bare command: {shlex.join(bare)}", file=sys.stderr)
    return [row("comms_bench staged job, sbatch to verdict", staged_s, "s"),
            row("comms_bench bare torchrun, same flags", bare_s, "s"),
            row("staged / bare", ratios, "ratio")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--slurm", action="store_true", help="also time a staged job on the rig's Slurm")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-stage-") as tmp:
        rows = staging_rows(Path(tmp), args.repeat)
        if args.slurm:
            rows += slurm_rows(Path(tmp), args.repeat)
    print(render_table(rows, ["what", "median", "min", "unit", "runs"]))


if __name__ == "__main__":
    main()
