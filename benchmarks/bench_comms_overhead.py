#!/usr/bin/env python3
"""How much does comms_bench's harness add to the time it reports? Figures printed, not asserted.

all_reduce from 8 B to 1 MiB on 2 CPU ranks (gloo). For each size, in the same torchrun job and
alternating, so that a busy machine slows both alike:
  ours: comms_bench's own `Bench.measure`, the code that produces each reported row (buffers,
        warmups, barrier, timed loop, slowest rank's mean);
  bare: `for _ in range(n): dist.all_reduce(t)` timed the same way (warmups, barrier, a
        monotonic clock around n calls, the slowest rank's mean).
The table shows the medians and the minima over --repeats pairs, and their ratios (on a shared
machine the minimum is the steadier estimate: interference only ever adds time). A last line
times the two loops around a no-op instead of all_reduce: the harness's own cost per call.
Goal: ours / bare within 5%.

    python benchmarks/bench_comms_overhead.py [--repeats 9] [--iters 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINTS = ROOT / "entrypoints"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def worker(args: argparse.Namespace) -> None:
    """Runs under torchrun on every rank; rank 0 writes {size: {"ours": [...], "bare": [...]}}."""
    sys.path.insert(0, str(ENTRYPOINTS))
    import _probe_runtime as rt
    import comms_bench as cb
    import torch
    import torch.distributed as dist

    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= args.nproc:
        os.sched_setaffinity(0, {int(os.environ["LOCAL_RANK"])})  # one core per rank: less migration noise
    flags = ["-b", str(args.begin), "-e", str(args.end), "-f", str(args.factor), "-n", str(args.iters),
             "-w", str(args.warmup), "-c", "0", "--collective", "all_reduce"]  # fmt: skip
    bench_args = cb.parse_args(flags)
    ctx = rt.start_probe("comms_bench", "gloo", "cpu", 120.0)
    bench = cb.Bench(ctx, bench_args, [ctx.host] * ctx.world_size)
    all_reduce = cb.COLLECTIVES["all_reduce"]

    def bare(size: int) -> float:
        tensor = torch.zeros(max(1, size // 4), dtype=torch.float32)
        for _ in range(args.warmup):
            dist.all_reduce(tensor)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor)
        mean = torch.tensor([(time.perf_counter() - start) / args.iters], dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        return float(mean)

    def ours(size: int) -> float:
        return float(bench.measure(all_reduce, size)["time_us"]) * 1e-6

    times: dict[int, dict[str, list[float]]] = {}
    for size in bench_args.sizes:
        pair = [("bare", bare), ("ours", ours)]
        for repeat in range(args.repeats):
            for name, measure in pair if repeat % 2 == 0 else pair[::-1]:
                ctx.watchdog.expect(f"{name} all_reduce of {size} B")
                times.setdefault(size, {}).setdefault(name, []).append(measure(size))
    if ctx.rank == 0:
        Path(args.out).write_text(json.dumps(times))
    rt.finish_probe(ctx, healthy=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5, help="pairs per size (more: steadier figures)")
    parser.add_argument("--iters", type=int, default=100, help="timed iterations per measurement")
    parser.add_argument("--warmup", type=int, default=10, help="warmup iterations per measurement")
    parser.add_argument("--begin", type=int, default=8)
    parser.add_argument("--end", type=int, default=2**20)
    parser.add_argument("--factor", type=int, default=2)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        names = ("repeats", "iters", "warmup", "begin", "end", "factor")
        forwarded = [f"--{name}={getattr(args, name)}" for name in names]
        launcher = [TORCHRUN, "--standalone", f"--nproc_per_node={args.nproc}"]
        cmd = [*launcher, __file__, "--worker", "--out", str(out), *forwarded]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            raise SystemExit(f"failed: {' '.join(cmd)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        times = json.loads(out.read_text())

    print(f"all_reduce, {args.nproc} CPU ranks (gloo), {args.iters} iterations after {args.warmup} warmups; "
          f"{args.repeats} alternating measurements each")  # fmt: skip
    header = ("size (B)", "bare med", "ours med", "ratio", "bare min", "ours min", "ratio")
    print("  ".join(f"{h:>9}" for h in header), "  (times in us)")
    medians, minima = [], []
    for size, pair in sorted(times.items(), key=lambda item: int(item[0])):
        bare, ours = statistics.median(pair["bare"]), statistics.median(pair["ours"])
        bare_min, ours_min = min(pair["bare"]), min(pair["ours"])
        medians.append(ours / bare)
        minima.append(ours_min / bare_min)
        cells = (bare * 1e6, ours * 1e6, ours / bare, bare_min * 1e6, ours_min * 1e6, ours_min / bare_min)
        text = [f"{c:9.3f}" if i in (2, 5) else f"{c:9.2f}" for i, c in enumerate(cells)]
        print(f"{int(size):9d}  " + "  ".join(text))
    print(f"ours/bare: ratio of medians {spread(medians)}; ratio of minima {spread(minima)}; goal 0.95-1.05")
    ours_ns, bare_ns = loop_cost()
    print(
        f"loop cost around a no-op, per call: ours {ours_ns:.0f} ns, bare {bare_ns:.0f} ns "
        f"(+{ours_ns - bare_ns:.0f} ns); {time.perf_counter() - started:.0f} s in all"
    )


def spread(ratios: list[float]) -> str:
    return f"median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})"


def loop_cost(calls: int = 1_000_000) -> tuple[float, float]:
    """ns per call of comms_bench's timed loop and of a bare loop, around a no-op "collective"."""
    sys.path.insert(0, str(ENTRYPOINTS))
    import functools

    import comms_bench as cb
    import torch

    def noop(tensor: torch.Tensor) -> None:
        return None

    tensor = torch.zeros(1)
    run = functools.partial(noop, tensor)
    ours = min(cb.time_iterations(run, calls, torch.device("cpu")) for _ in range(5))
    bare = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            noop(tensor)
        bare.append((time.perf_counter() - start) / calls)
    return ours * 1e9, min(bare) * 1e9


if __name__ == "__main__":
    main()
