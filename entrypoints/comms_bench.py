#!/usr/bin/env python3
"""Collective bandwidth, measured and reported the way NVIDIA nccl-tests does, from PyTorch.

    torchrun --nproc_per_node=8 comms_bench.py -b 8 -e 2G -f 2 -n 20 -w 5 -c 1 --collective all_reduce,reduce
    srun python comms_bench.py --b=8 --e=2GB --f=2 --collective=all_reduce --num_iters=100   # param's flags

Collectives: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce (a comma list).
Sizes are total bytes as in nccl-tests (for all_gather the gathered output, for reduce_scatter the
input, for all_to_all one rank's send buffer), rounded down to whole elements per rank.

    algbw = size / time                   (GB/s, 1 GB = 1e9 bytes)
    busbw = algbw * 2(n-1)/n              all_reduce
          = algbw * (n-1)/n               all_gather, reduce_scatter, all_to_all
          = algbw                         broadcast, reduce

Each size: buffers allocated once, -w warmups, a barrier, -n timed iterations (CUDA events on GPU,
a monotonic clock on CPU); the row's time is the slowest rank's mean. -c N runs N more iterations
on inputs with known per-rank values and counts every wrong output element (#wrong, summed over
ranks). Rank 0 ends with `clusterprobe: comms_bench PASS ...` or `... FAIL <reason>`; FAIL (exit 1)
when #wrong > 0, when a collective's average busbw is below --min-busbw / NCCL_TESTS_MIN_BW, or
when nothing could run. A collective the backend lacks is skipped with a note.

--json PATH (rank 0; JSON Lines, one object per row, written as each row completes):
    collective, dtype, size_bytes, count, world_size, time_us (slowest rank), algbw_gbps,
    busbw_gbps, wrong (null with -c 0), time_us_min, time_us_max, slowest_rank, slowest_host,
    root (-1 unless rooted), redop, iters, warmup, backend, device, peak_mem_bytes (highest so
    far on any rank: the GPU allocator's peak, or peak RSS on CPU)
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import _probe_runtime as rt
import torch
import torch.distributed as dist

SCRIPT = "comms_bench"
CHECK_CHUNK = 1 << 24  # elements per slice when filling or checking, to bound the extra memory

# Names accepted by -d: nccl-tests' (float, half, ...), param's (float32, float16, long, ...), torch's.
DTYPES: dict[str, torch.dtype] = {
    "float": torch.float32, "float32": torch.float32, "fp32": torch.float32,
    "half": torch.float16, "float16": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "double": torch.float64, "float64": torch.float64,
    "int32": torch.int32, "int": torch.int32,
    "int64": torch.int64, "long": torch.int64,
    "int8": torch.int8, "uint8": torch.uint8,
}

_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(i?b)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str) -> int:
    """'8', '64K', '2M', '1G', '2GB', '1GiB' -> bytes; K/M/G are binary, as in nccl-tests and param."""
    match = _SIZE.fullmatch(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 8, 64K, 2M, 1G, 2GB)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def size_sweep(begin: int, end: int, factor: int) -> list[int]:
    if begin > end:
        raise ValueError(f"-b {begin} is larger than -e {end}")
    if factor < 2:
        raise ValueError(f"-f must be >= 2, got {factor}")
    sizes = [max(begin, 0)]
    while sizes[-1] * factor <= end and sizes[-1] > 0:
        sizes.append(sizes[-1] * factor)
    return sizes


# ---------------------------------------------------------------------------------------------
# The collectives: sizes, bandwidth factors, buffers, known values


@dataclass(frozen=True)
class Collective:
    name: str
    rooted: bool  # broadcast, reduce: has a root rank
    reduces: bool  # sums (redop column)
    split: bool  # the count is divided among ranks (all_gather, reduce_scatter, all_to_all)

    def busbw_factor(self, world: int) -> float:
        """nccl-tests doc/PERFORMANCE.md: busbw = algbw * factor."""
        if self.name == "all_reduce":
            return 2 * (world - 1) / world
        if self.split:
            return (world - 1) / world
        return 1.0

    def count(self, size: int, elem: int, world: int) -> int:
        """Total elements for a size in bytes: whole elements, and a whole chunk per rank where split."""
        if self.split:
            return max(world, size // elem // world * world)
        return max(1, size // elem)


COLLECTIVES = {
    c.name: c
    for c in (
        Collective("all_reduce", rooted=False, reduces=True, split=False),
        Collective("all_gather", rooted=False, reduces=False, split=True),
        Collective("reduce_scatter", rooted=False, reduces=True, split=True),
        Collective("all_to_all", rooted=False, reduces=False, split=True),
        Collective("broadcast", rooted=True, reduces=False, split=False),
        Collective("reduce", rooted=True, reduces=True, split=False),
    )
}


def bandwidths(collective: Collective, size_bytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s, as nccl-tests)."""
    if seconds <= 0:
        return 0.0, 0.0
    algbw = size_bytes / 1e9 / seconds
    return algbw, algbw * collective.busbw_factor(world)


def _op(*names: str) -> Callable[..., Any]:
    """The first of these torch.distributed functions this torch has (newer names first)."""
    for name in names:
        fn = getattr(dist, name, None)
        if fn is not None:
            return fn  # type: ignore[no-any-return]
    raise AttributeError(f"torch {torch.__version__} has none of {names}")


@dataclass
class Buffers:
    """One size's tensors, allocated once, and the call that runs the collective on them."""

    inp: torch.Tensor
    out: torch.Tensor
    run: Callable[[], Any]

    @property
    def nbytes(self) -> int:
        same = self.inp.data_ptr() == self.out.data_ptr()
        return self.inp.nbytes + (0 if same else self.out.nbytes)


def make_buffers(
    c: Collective, count: int, dtype: torch.dtype, device: torch.device, *, world: int, root: int
) -> Buffers:
    # zeros, not empty: repeated sums of zeros stay zero (no overflow, no slow denormals on CPU)
    def zeros(n: int) -> torch.Tensor:
        return torch.zeros(n, dtype=dtype, device=device)

    chunk = count // world
    if c.name == "all_reduce":
        buf = zeros(count)
        return Buffers(buf, buf, functools.partial(dist.all_reduce, buf))
    if c.name == "broadcast":
        buf = zeros(count)
        return Buffers(buf, buf, functools.partial(dist.broadcast, buf, root))
    if c.name == "reduce":
        buf = zeros(count)
        return Buffers(buf, buf, functools.partial(dist.reduce, buf, root))
    if c.name == "all_gather":
        inp, out = zeros(chunk), zeros(count)
        gather = _op("all_gather_single", "all_gather_into_tensor")
        return Buffers(inp, out, functools.partial(gather, out, inp))
    if c.name == "reduce_scatter":
        inp, out = zeros(count), zeros(chunk)
        scatter = _op("reduce_scatter_single", "reduce_scatter_tensor")
        return Buffers(inp, out, functools.partial(scatter, out, inp))
    if c.name == "all_to_all":
        inp, out = zeros(count), zeros(count)
        return Buffers(inp, out, functools.partial(dist.all_to_all_single, out, inp))
    raise ValueError(f"unknown collective {c.name}")


def owner_weight(index: torch.Tensor, world: int) -> torch.Tensor:
    """Reduction inputs: element i belongs to rank i % world, which holds 1 + (i // world) % 7 there;
    every other rank holds 0. The exact sum is then the owner's value, in any dtype: a missing,
    doubled or misplaced contribution shows."""
    return 1 + (index // world) % 7


def reduce_input(index: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    return torch.where(index % world == rank, owner_weight(index, world), torch.zeros_like(index))


def pattern(rank: int | torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Data-movement inputs: distinct per rank and position, 1..113 (exact in int8 and bfloat16)."""
    return (rank * 31 + index * 7) % 113 + 1


def _fill(tensor: torch.Tensor, values: Callable[[torch.Tensor], torch.Tensor]) -> None:
    for start in range(0, tensor.numel(), CHECK_CHUNK):
        stop = min(start + CHECK_CHUNK, tensor.numel())
        index = torch.arange(start, stop, device=tensor.device)
        tensor[start:stop] = values(index).to(tensor.dtype)


def _count_wrong(tensor: torch.Tensor, expected: Callable[[torch.Tensor], torch.Tensor]) -> int:
    wrong = torch.zeros((), dtype=torch.int64, device=tensor.device)
    for start in range(0, tensor.numel(), CHECK_CHUNK):
        stop = min(start + CHECK_CHUNK, tensor.numel())
        index = torch.arange(start, stop, device=tensor.device)
        wrong += (tensor[start:stop] != expected(index).to(tensor.dtype)).sum()
    return int(wrong)


def check_once(c: Collective, buffers: Buffers, rank: int, world: int, root: int) -> int:
    """Fill known inputs, run the collective once, return this rank's count of wrong output elements."""
    chunk = buffers.inp.numel() if c.name == "all_gather" else buffers.inp.numel() // world  # one rank's part
    expected: Callable[[torch.Tensor], torch.Tensor] | None
    if c.name in ("all_reduce", "reduce"):
        _fill(buffers.inp, lambda i: reduce_input(i, rank, world))
        expected = (lambda i: owner_weight(i, world)) if c.name == "all_reduce" or rank == root else None
    elif c.name == "reduce_scatter":
        _fill(buffers.inp, lambda i: reduce_input(i, rank, world))
        buffers.out.zero_()
        expected = lambda i: owner_weight(rank * chunk + i, world)  # noqa: E731
    elif c.name == "broadcast":
        if rank == root:
            _fill(buffers.inp, lambda i: pattern(root, i))
        else:
            buffers.inp.zero_()  # 0 is never a pattern value: a missed update shows
        expected = lambda i: pattern(root, i)  # noqa: E731
    elif c.name == "all_gather":
        _fill(buffers.inp, lambda i: pattern(rank, i))
        buffers.out.zero_()
        expected = lambda i: pattern(i // chunk, i % chunk)  # noqa: E731
    else:  # all_to_all: rank s's chunk `rank` lands in our chunk s
        _fill(buffers.inp, lambda i: pattern(rank, i))
        buffers.out.zero_()
        expected = lambda i: pattern(i // chunk, rank * chunk + i % chunk)  # noqa: E731
    buffers.run()
    rt.synchronize(buffers.out.device)
    return 0 if expected is None else _count_wrong(buffers.out, expected)


# ---------------------------------------------------------------------------------------------
# Timing


def time_iterations(run: Callable[[], Any], iters: int, device: torch.device) -> float:
    """Mean seconds per call over `iters` back-to-back calls, on this rank."""
    if device.type == "cuda":
        event: Any = torch.cuda.Event  # untyped in torch's stubs
        start, end = event(enable_timing=True), event(enable_timing=True)
        start.record()
        for _ in range(iters):
            run()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3 / iters
    begin = time.perf_counter()
    for _ in range(iters):
        run()
    return (time.perf_counter() - begin) / iters


def peak_memory_bytes(device: torch.device) -> int:
    """GPU: the caching allocator's peak; CPU: the process's peak RSS."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return rt.peak_rss_bytes()


# ---------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="comms_bench.py",
        description="nccl-tests-style collective benchmark over torch.distributed (param's flags accepted).",
        epilog="Under torchrun, put param-style flags after `--` (torchrun's own parser reads --e and --n "
        "as abbreviations of its flags). Exit codes: 0 pass, 1 #wrong > 0 or busbw below the minimum, "
        "2 bad flags, 3 timeout, 4 incomplete launch environment.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("-b", "--b", "--minbytes", dest="begin", type=parse_size, default="8",
        help="smallest size in bytes (8, 64K, 2M, 1G, 2GB)")
    add("-e", "--e", "--maxbytes", dest="end", type=parse_size, default="32M",
        help="largest size in bytes")
    add("-f", "--f", "--stepfactor", dest="factor", type=int, default=2, help="multiply the size by this")
    add("-n", "--n", "--iters", "--num_iters", dest="iters", type=int, default=20, help="timed iterations")
    add("-w", "--w", "--warmup_iters", dest="warmup", type=int, default=5, help="warmup iterations")
    add("-c", "--c", "--check", dest="check", type=int, default=1,
        help="check iterations with known values (0: no check, #wrong shows N/A)")
    add("-d", "--datatype", "--data-type", "--dtype", dest="dtype", default="float32",
        choices=sorted(DTYPES), metavar="DTYPE", help=f"element type, one of {', '.join(sorted(DTYPES))}")
    add("--collective", "--collectives", dest="collectives", default="all_reduce",
        help=f"comma list of {', '.join(COLLECTIVES)}")
    add("--root", type=int, default=0, help="root rank of broadcast and reduce")
    add("--backend", choices=("auto", "gloo", "nccl"), default="auto", help="auto: nccl with CUDA, else gloo")
    add("--device", choices=("auto", "cpu", "cuda"), default="auto",
        help="auto: cuda:LOCAL_RANK with CUDA, else cpu")
    add("--timeout", type=float, default=300.0,
        help="seconds to wait for all ranks to join, and for any one collective")
    add("--json", metavar="PATH", help="rank 0 writes one JSON object per row here (JSON Lines)")
    add("--min-busbw", type=float, default=_env_float("NCCL_TESTS_MIN_BW"), metavar="GBPS",
        help="fail when a collective's average busbw is below this; default from $NCCL_TESTS_MIN_BW")
    add("--master-ip", help="param's spelling of MASTER_ADDR (used when MASTER_ADDR is unset)")
    add("--master-port", help="param's spelling of MASTER_PORT (used when MASTER_PORT is unset)")
    args = parser.parse_args(argv)
    args.collectives = _collectives(parser, args.collectives)
    for name, value in (("-n", args.iters), ("-w", args.warmup), ("-c", args.check)):
        if value < (1 if name == "-n" else 0):
            parser.error(f"{name} must be >= {1 if name == '-n' else 0}, got {value}")
    try:
        args.sizes = size_sweep(args.begin, args.end, args.factor)
    except ValueError as exc:
        parser.error(str(exc))
    if args.timeout <= 0:
        parser.error("--timeout must be > 0")
    return args


def _env_float(name: str) -> float | None:
    value = os.environ.get(name, "").strip()
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _collectives(parser: argparse.ArgumentParser, text: str) -> list[Collective]:
    picked: list[Collective] = []
    for name in (part.strip() for part in text.split(",") if part.strip()):
        if name not in COLLECTIVES:
            close = difflib.get_close_matches(name, COLLECTIVES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            parser.error(f"unknown collective {name!r}{hint}; choose from {', '.join(COLLECTIVES)}")
        if COLLECTIVES[name] not in picked:
            picked.append(COLLECTIVES[name])
    if not picked:
        parser.error("--collective is empty")
    return picked


# ---------------------------------------------------------------------------------------------
# The run


HEADER = (
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong  slowest\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
)


def format_row(row: dict[str, Any]) -> str:
    wrong = "N/A" if row["wrong"] is None else str(row["wrong"])
    return (f"{row['size_bytes']:12d}  {row['count']:12d}  {row['dtype']:>8s}  {row['redop']:>6s}  "
            f"{row['root']:6d}  {row['time_us']:7.2f}  {row['algbw_gbps']:6.2f}  {row['busbw_gbps']:6.2f}  "
            f"{wrong:>6s}  r{row['slowest_rank']}@{row['slowest_host']}")


class Bench:
    """One rank's run over the collectives and sizes; rank 0 prints and writes the rows."""

    def __init__(self, ctx: rt.ProbeContext, args: argparse.Namespace, hosts: list[str]) -> None:
        self.ctx = ctx
        self.args = args
        self.hosts = hosts
        self.dtype = DTYPES[args.dtype]
        self.dtype_name = str(self.dtype).removeprefix("torch.")
        self.elem = torch.empty((), dtype=self.dtype).element_size()
        self.rows: list[dict[str, Any]] = []
        self.skipped: dict[str, str] = {}
        self.json = None
        if args.json and ctx.rank == 0:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            self.json = open(args.json, "w")  # noqa: SIM115 - written row by row, closed by run()

    def supported(self, c: Collective) -> bool:
        """Try the collective once on a tiny buffer; all ranks agree before anyone goes on."""
        world = self.ctx.world_size
        reason = ""
        self.ctx.watchdog.expect(f"trying {c.name} once on {world} elements")
        try:
            make_buffers(c, world, self.dtype, self.ctx.device, world=world, root=self.args.root).run()
            rt.synchronize(self.ctx.device)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {rt.first_line(exc, 200)}"
        flag = torch.tensor([0 if reason else 1], dtype=torch.int32, device=self.ctx.device)
        self.ctx.watchdog.expect(f"agreeing whether {c.name} is supported")
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if int(flag.item()) == 0:
            self.skipped[c.name] = reason or "failed on another rank"
            self.ctx.rank0(f"# {c.name}: skipped, backend {self.ctx.backend} on {self.ctx.device.type} "
                           f"cannot run it with {self.dtype_name} ({self.skipped[c.name]})")
            return False
        return True

    def measure(self, c: Collective, size: int) -> dict[str, Any]:
        ctx, args, world = self.ctx, self.args, self.ctx.world_size
        count = c.count(size, self.elem, world)
        where = f"{c.name} of {count * self.elem} B"
        ctx.watchdog.expect(f"allocating and warming up {where}")
        buffers = make_buffers(c, count, self.dtype, ctx.device, world=world, root=args.root)
        warm = time_iterations(buffers.run, args.warmup, ctx.device) if args.warmup else math.nan
        ctx.watchdog.expect(f"the barrier before timing {where}")
        rt.barrier(ctx.device)
        budget = ctx.timeout * args.iters if math.isnan(warm) else ctx.timeout + 2 * warm * args.iters
        ctx.watchdog.expect(f"timing {args.iters} iterations of {where}", budget)
        seconds = time_iterations(buffers.run, args.iters, ctx.device)
        wrong = 0
        for _ in range(args.check):
            ctx.watchdog.expect(f"checking {where}", ctx.timeout + 10 * (0 if math.isnan(warm) else warm))
            wrong += check_once(c, buffers, ctx.rank, world, args.root)
        ctx.watchdog.expect(f"gathering the times of {where}")
        mine = torch.tensor([seconds, wrong, peak_memory_bytes(ctx.device)], dtype=torch.float64,
                            device=ctx.device)
        every = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
        stats = torch.stack(every).cpu()
        times = stats[:, 0]
        slowest = int(times.argmax())
        time_s = float(times[slowest])
        algbw, busbw = bandwidths(c, count * self.elem, time_s, world)
        del buffers
        return {
            "collective": c.name,
            "dtype": self.dtype_name,
            "size_bytes": count * self.elem,
            "count": count,
            "world_size": world,
            "time_us": time_s * 1e6,
            "algbw_gbps": algbw,
            "busbw_gbps": busbw,
            "wrong": int(stats[:, 1].sum()) if args.check else None,
            "time_us_min": float(times.min()) * 1e6,
            "time_us_max": time_s * 1e6,
            "slowest_rank": slowest,
            "slowest_host": self.hosts[slowest],
            "root": args.root if c.rooted else -1,
            "redop": "sum" if c.reduces else "none",
            "iters": args.iters,
            "warmup": args.warmup,
            "backend": ctx.backend,
            "device": ctx.device.type,
            "peak_mem_bytes": int(stats[:, 2].max()),
        }

    def run(self, c: Collective) -> None:
        if not self.supported(c):
            return
        self.ctx.rank0(f"#\n# {c.name}\n{HEADER}")
        rows: list[dict[str, Any]] = []
        seen: set[int] = set()
        for size in self.args.sizes:
            if c.count(size, self.elem, self.ctx.world_size) in seen:
                continue  # rounding to whole elements per rank made this size a repeat
            seen.add(c.count(size, self.elem, self.ctx.world_size))
            row = self.measure(c, size)
            rows.append(row)
            self.ctx.rank0(format_row(row))
            if self.json:
                self.json.write(json.dumps(row, sort_keys=True) + "\n")
                self.json.flush()
        self.ctx.rank0(f"# Avg bus bandwidth    : {average_busbw(rows):.3f} GB/s ({c.name})")
        self.rows += rows


def average_busbw(rows: list[dict[str, Any]]) -> float:
    return sum(row["busbw_gbps"] for row in rows) / len(rows) if rows else 0.0


def verdict(rows: list[dict[str, Any]], skipped: dict[str, str], min_busbw: float | None) -> tuple[bool, str]:
    """(ok, the verdict's detail) from all rows."""
    problems: list[str] = []
    wrong = sum(row["wrong"] or 0 for row in rows)
    if wrong:
        where = [f"{r['collective']} {r['size_bytes']} B: {r['wrong']}" for r in rows if r["wrong"]]
        problems.append(f"#wrong={wrong} ({', '.join(where[:6])}{', ...' if len(where) > 6 else ''})")
    by_collective: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_collective.setdefault(row["collective"], []).append(row)
    averages = {name: average_busbw(group) for name, group in by_collective.items()}
    if min_busbw is not None:
        problems += [f"{name} avg busbw {avg:.3f} GB/s < minimum {min_busbw:g} GB/s"
                     for name, avg in averages.items() if avg < min_busbw]
    if not rows:
        problems.append("no collective could run" + (f" (skipped: {', '.join(skipped)})" if skipped else ""))
    if problems:
        return False, "; ".join(problems)
    detail = " ".join(f"{name}={avg:.3f}" for name, avg in averages.items())
    checked = "N/A" if any(row["wrong"] is None for row in rows) else "0"
    skip = f" skipped={','.join(skipped)}" if skipped else ""
    return True, f"rows={len(rows)} wrong={checked} avg_busbw_gbps: {detail}{skip}"


def run(args: argparse.Namespace) -> int:
    # param's --master-ip/--master-port fill in what the environment lacks
    if args.master_ip and not os.environ.get("MASTER_ADDR"):
        os.environ["MASTER_ADDR"] = args.master_ip
    if args.master_port and not os.environ.get("MASTER_PORT"):
        os.environ["MASTER_PORT"] = str(args.master_port)
    wall = time.perf_counter()
    ctx = rt.start_probe(SCRIPT, args.backend, args.device, args.timeout)
    if not 0 <= args.root < ctx.world_size:
        raise rt.LaunchError(f"--root {args.root} is not a rank of this {ctx.world_size}-rank job")
    ctx.watchdog.expect("gathering every rank's host")
    ranks = rt.gather_objects({"host": ctx.host, "pid": os.getpid(), "device": str(ctx.device),
                               "source": ctx.info.source}, ctx.device)
    ctx.rank0(f"# clusterprobe comms_bench: world_size {ctx.world_size}, backend {ctx.backend}, "
              f"dtype {args.dtype}, iters {args.iters}, warmup {args.warmup}, check {args.check}, "
              f"sizes {args.sizes[0]}..{args.sizes[-1]} B x{args.factor}, torch {torch.__version__}")
    ctx.rank0("#\n# Using devices")
    for r, peer in enumerate(ranks):
        ctx.rank0(f"#  Rank {r:3d} Pid {peer['pid']:7d} on {peer['host']:>12s} device {peer['device']}"
                  f"  ({peer['source']})")
    bench = Bench(ctx, args, [peer["host"] for peer in ranks])
    try:
        for collective in args.collectives:
            bench.run(collective)
    finally:
        if bench.json:
            bench.json.close()
    ctx.watchdog.expect("gathering peak memory")
    peaks = rt.gather_objects({"rss": rt.peak_rss_bytes(), "mem": peak_memory_bytes(ctx.device)}, ctx.device)
    ctx.rank0(f"#\n# Peak memory per rank ({'GPU allocator' if ctx.device.type == 'cuda' else 'RSS'}):")
    if ctx.world_size <= 64:
        ctx.rank0(rt.format_table(("RANK", "HOST", "PEAK_MIB", "PEAK_RSS_MIB"),
                                  [(r, ranks[r]["host"], rt.mib(p["mem"]), rt.mib(p["rss"]))
                                   for r, p in enumerate(peaks)], indent="#  "))
    else:
        top = max(range(ctx.world_size), key=lambda r: peaks[r]["mem"])
        ctx.rank0(f"#  max {rt.mib(peaks[top]['mem'])} MiB (rank {top} on {ranks[top]['host']}), "
                  f"min {rt.mib(min(p['mem'] for p in peaks))} MiB")
    if bench.rows:
        ctx.rank0(f"# Avg bus bandwidth    : {average_busbw(bench.rows):.3f} GB/s (all rows)")
    ok, detail = verdict(bench.rows, bench.skipped, args.min_busbw)
    rt.finish_probe(ctx, healthy=True)
    if ok:
        detail = (f"world_size={ctx.world_size} backend={ctx.backend} device={ctx.device.type} "
                  f"dtype={args.dtype} {detail} seconds={time.perf_counter() - wall:.1f}")
    return rt.conclude(ctx, ok, detail)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return rt.run_probe(SCRIPT, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
