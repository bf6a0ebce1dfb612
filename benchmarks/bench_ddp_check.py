#!/usr/bin/env python3
"""What a whole ddp_check costs on CPU: wall time and peak RSS per rank. Figures printed, not asserted.

Runs `torchrun --standalone --nproc_per_node=2 entrypoints/ddp_check.py --epochs 1 --json ...` (the
image smoke test's command) --repeats times and prints medians: the wall time of the whole
command (start-up, rendezvous, checks, training, teardown), the script's own seconds, the training
throughput, and each rank's peak RSS as the script reports it.

    python benchmarks/bench_ddp_check.py [--repeats 5] [--epochs 1] [--nproc 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DDP_CHECK = ROOT / "entrypoints" / "ddp_check.py"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def run_once(args: argparse.Namespace, report: Path) -> tuple[float, dict[str, Any], float]:
    """(wall seconds of the command, the JSON report, the seconds the verdict line states)."""
    cmd = [TORCHRUN, "--standalone", f"--nproc_per_node={args.nproc}", str(DDP_CHECK),
           "--epochs", str(args.epochs), "--json", str(report)]  # fmt: skip
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""}
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    stated = re.search(r"^clusterprobe: ddp_check PASS .* seconds=([\d.]+)$", done.stdout, re.MULTILINE)
    return wall, json.loads(report.read_text()), float(stated.group(1)) if stated else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs (more: steadier medians)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()

    walls, stated, training, throughput = [], [], [], []
    rss: list[list[float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            wall, report, seconds = run_once(args, Path(tmp) / f"ddp{repeat}.json")
            walls.append(wall)
            stated.append(seconds)
            training.append(report["training"]["seconds"])
            throughput.append(report["training"]["samples_per_s_total"])
            rss.append([b / 2**20 for b in report["training"]["peak_rss_bytes_per_rank"]])
            print(f"# run {repeat + 1}/{args.repeats}: {wall:.2f} s", file=sys.stderr, flush=True)

    print(f"ddp_check, {args.nproc} CPU ranks (gloo), --epochs {args.epochs}; "
          f"median (min-max) of {args.repeats} runs")  # fmt: skip
    figure("wall time of the torchrun command", walls, "s")
    figure("script's own time (verdict line)", stated, "s")
    figure("training loop", training, "s")
    figure("training throughput, all ranks", throughput, "samples/s", digits=0)
    for rank in range(args.nproc):
        figure(f"peak RSS of rank {rank}", [run[rank] for run in rss], "MiB", digits=1)


def figure(label: str, values: list[float], unit: str, digits: int = 2) -> None:
    spread = f"({min(values):.{digits}f}-{max(values):.{digits}f})"
    print(f"  {label:<36} {statistics.median(values):9.{digits}f} {unit:<9} {spread}")


if __name__ == "__main__":
    main()
