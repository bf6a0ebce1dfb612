#!/usr/bin/env python3
"""Does distributed PyTorch work here? Checks one job's ranks end to end and says PASS or FAIL.

Launch it any way a cluster does (python + torch only, from a checkout or /opt/clusterprobe):

    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:29500 ddp_check.py
    srun --ntasks-per-node=8 python ddp_check.py          # SLURM_PROCID/NTASKS/LOCALID/NODEID
    mpirun -np 16 -x MASTER_ADDR=$HEAD -x MASTER_PORT=29500 python ddp_check.py

Checks, each PASS/FAIL on every rank: process-group init within --timeout, rank topology, all_reduce
of known values, broadcast from the first and the last rank, barrier, a short DDP training on
seeded MNIST-shaped data after which the parameters must be bit-identical on all ranks and the
loss lower. Rank 0 prints the gathered rank table, the versions and the results, writes --json,
and ends with one line: `clusterprobe: ddp_check PASS world_size=N ...` or `... FAIL <reason>`.
Exit codes: 0 pass, 1 a check failed, 2 bad flags, 3 timeout (a rank missing or stuck),
4 incomplete launch environment.

--json PATH (rank 0, also when init fails):
    {"ok": bool, "world_size": int,
     "ranks": [{"rank", "local_rank", "group_rank", "local_world_size", "world_size", "host",
                "device", "source"}, ...]                        sorted by rank
     "checks": {NAME: {"ok", "detail", "seconds", "failed_ranks"}}   init, topology, all_reduce,
               broadcast, barrier, ddp_training, params_identical, loss_decreased
     "training": {"epochs", "batch_size", "samples_per_rank", "steps_per_epoch", "loss_before",
                  "loss_after", "params_identical", "seconds", "samples_per_s_per_rank",
                  "samples_per_s_total", "peak_rss_bytes_per_rank", "peak_gpu_mem_bytes_per_rank",
                  "profile_dir"}                                 ({} when training did not run)
     "versions": versions.collect()}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import _probe_runtime as rt
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SCRIPT = "ddp_check"
NOT_RUN = "not run"
RANK_KEYS = ("rank", "local_rank", "group_rank", "local_world_size", "world_size", "host", "device", "source")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="ddp_check.py",
        description="Check that multi-node PyTorch DDP works: collectives, a short training, same weights.",
        epilog="Exit codes: 0 every check passed on every rank, 1 a check failed, 2 bad flags, "
        "3 timeout (a rank missing or stuck), 4 incomplete launch environment.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                        help="auto: nccl when CUDA is available, else gloo")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: this rank's GPU (cuda:LOCAL_RANK) when CUDA is available, else cpu")
    parser.add_argument("--epochs", type=_positive_int, default=3, help="training epochs")
    parser.add_argument("--batch-size", type=_positive_int, default=32, help="batch size per rank")
    parser.add_argument("--samples-per-rank", type=_positive_int, default=1024,
                        help="synthetic training samples per rank (the data set holds this x world size)")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=0, help="seed for the data and the initial weights")
    parser.add_argument("--timeout", type=_positive_float, default=300.0,
                        help="seconds to wait for all ranks to join, and for any one collective")
    parser.add_argument("--json", metavar="PATH", help="rank 0 writes the full report here")
    parser.add_argument("--profile", metavar="DIR", help="write a torch.profiler trace of training, per rank")
    return parser.parse_args(argv)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


# ---------------------------------------------------------------------------------------------
# Checks


class CheckFailed(Exception):
    """A check ran to the end and found a wrong result (communication itself still works)."""


@dataclass
class Check:
    ok: bool
    detail: str
    seconds: float


class CheckBook:
    """Runs the checks in order on this rank and records each outcome.

    An exception other than CheckFailed means the group may be broken (a peer died, a timeout):
    the remaining checks are then recorded as not run instead of waiting on a dead group again.
    """

    def __init__(self, ctx: rt.ProbeContext) -> None:
        self.ctx = ctx
        self.checks: dict[str, Check] = {}
        self.broken: str | None = None
        self.rows: list[dict[str, Any]] = []  # the gathered rank table, once the topology check ran

    def record(self, name: str, ok: bool, detail: str, seconds: float = 0.0) -> None:
        self.checks[name] = Check(ok, detail, round(seconds, 4))

    def run(self, name: str, activity: str, fn: Callable[[], str]) -> None:
        if self.broken:
            self.record(name, False, f"{NOT_RUN}: communication failed in {self.broken}")
            return
        self.ctx.watchdog.expect(activity)
        start = time.perf_counter()
        try:
            detail, ok = fn(), True
        except CheckFailed as exc:
            detail, ok = str(exc), False
        except Exception as exc:
            detail, ok = f"{type(exc).__name__} while {activity}: {rt.first_line(exc)}", False
            self.broken = name
        seconds = time.perf_counter() - start
        self.record(name, ok, detail, seconds)
        self.ctx.say(f"check {name}: {'PASS' if ok else 'FAIL'} ({seconds:.3f} s) {detail}")


def _known_values(rank: int, count: int, device: torch.device) -> torch.Tensor:
    """Rank r holds ((r + i) % 16) + 1 at index i: every rank and position differs, sums stay exact."""
    index = torch.arange(count, device=device)
    return ((index + rank) % 16 + 1).to(torch.float32)


def _expected_sum(world_size: int, count: int, device: torch.device) -> torch.Tensor:
    """Sum over ranks of _known_values, in closed form (no O(world size) loop)."""
    index = torch.arange(count, device=device)
    cycles, rest = divmod(world_size, 16)
    total = torch.full((count,), world_size + cycles * 120, dtype=torch.int64, device=device)
    for k in range(rest):
        total += (index + cycles * 16 + k) % 16
    return total.to(torch.float32)


def check_all_reduce(ctx: rt.ProbeContext, count: int = 4096) -> str:
    tensor = _known_values(ctx.rank, count, ctx.device)
    dist.all_reduce(tensor)
    wrong = int((tensor != _expected_sum(ctx.world_size, count, ctx.device)).sum())
    if wrong:
        raise CheckFailed(f"{wrong} of {count} sums wrong")
    return f"{count} float32 sums exact"


def check_broadcast(ctx: rt.ProbeContext, count: int = 4096) -> str:
    roots = sorted({0, ctx.world_size - 1})
    for root in roots:
        expected = torch.arange(count, device=ctx.device, dtype=torch.float32) + root
        tensor = expected.clone() if ctx.rank == root else torch.full_like(expected, -1.0)
        dist.broadcast(tensor, src=root)
        wrong = int((tensor != expected).sum())
        if wrong:
            raise CheckFailed(f"{wrong} of {count} values wrong after broadcast from rank {root}")
    return f"{count} values from rank{'s' if len(roots) > 1 else ''} {', '.join(map(str, roots))}"


def check_barrier(ctx: rt.ProbeContext) -> str:
    start = time.perf_counter()
    rt.barrier(ctx.device)
    return f"{(time.perf_counter() - start) * 1e3:.2f} ms"


def check_topology(rows: list[dict[str, Any]]) -> tuple[bool, str]:
    """Each rank once; per node, local ranks 0..n-1 each once; no two ranks on one GPU."""
    problems: list[str] = []
    world = len(rows)
    if sorted(row["rank"] for row in rows) != list(range(world)):
        problems.append("ranks are not 0..N-1 exactly once")
    if any(row["world_size"] != world for row in rows):
        problems.append("ranks disagree on the world size")
    nodes: dict[object, list[dict[str, Any]]] = {}
    for row in rows:
        nodes.setdefault(row["group_rank"], []).append(row)
    for node, members in sorted(nodes.items(), key=lambda item: str(item[0])):
        local = sorted(row["local_rank"] for row in members)
        if local != list(range(len(members))):
            problems.append(f"node {node}: local ranks {local}, expected 0..{len(members) - 1}")
        sizes = {row["local_world_size"] for row in members}
        if sizes != {len(members)}:
            problems.append(f"node {node}: {len(members)} ranks, LOCAL_WORLD_SIZE {sorted(sizes, key=str)}")
    gpus: dict[tuple[str, str], list[int]] = {}
    for row in rows:
        if str(row["device"]).startswith("cuda"):
            gpus.setdefault((row["host"], row["device"]), []).append(row["rank"])
    problems += [f"ranks {r} share {dev} on {host}" for (host, dev), r in gpus.items() if len(r) > 1]
    hosts = len({row["host"] for row in rows})
    return not problems, "; ".join(problems) or f"{world} ranks, {len(nodes)} nodes, {hosts} hosts"


def identity_row(info: rt.LaunchInfo, host: str, device: str) -> dict[str, Any]:
    """One entry of the report's "ranks" list, as the launcher gave it."""
    return {
        "rank": info.rank,
        "local_rank": info.local_rank,
        "group_rank": info.group_rank,
        "local_world_size": info.local_world_size,
        "world_size": info.world_size,
        "host": host,
        "device": device,
        "source": info.source,
    }


def rank_rows(ctx: rt.ProbeContext) -> list[dict[str, Any]]:
    """Gather every rank's identity; fill in what the launcher did not say from the hosts."""
    mine = identity_row(ctx.info, ctx.host, str(ctx.device))
    rows: list[dict[str, Any]] = rt.gather_objects(mine, ctx.device)
    hosts = [row["host"] for row in rows]
    local, per_host = rt.local_positions(hosts)
    node = rt.node_indices(hosts)
    for row in rows:
        derived = [key for key in ("local_rank", "group_rank", "local_world_size") if row[key] is None]
        r = row["rank"]
        row.update({"local_rank": local[r]} if row["local_rank"] is None else {})
        row.update({"group_rank": node[r]} if row["group_rank"] is None else {})
        row.update({"local_world_size": per_host[r]} if row["local_world_size"] is None else {})
        if derived:
            row["source"] += f" ({', '.join(derived)} from hosts)"
    return sorted(rows, key=lambda row: row["rank"])


# ---------------------------------------------------------------------------------------------
# Training


def make_dataset(samples: int, seed: int) -> TensorDataset:
    """MNIST-shaped and learnable: ten seeded prototype images plus noise, no download."""
    gen = torch.Generator().manual_seed(seed)
    prototypes = torch.randn(10, 1, 28, 28, generator=gen)
    labels = torch.randint(0, 10, (samples,), generator=gen)
    # faint prototypes under unit noise: the loss falls over an epoch or two, not in ten steps
    images = 0.1 * prototypes[labels] + torch.randn(samples, 1, 28, 28, generator=gen)
    return TensorDataset(images, labels)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 10))


def global_mean_loss(model: nn.Module, loader: DataLoader[Any], device: torch.device) -> float:
    """Mean cross-entropy over every rank's shard (the model is identical everywhere)."""
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            totals[0] += loss_fn(model(images), labels).double()
            totals[1] += labels.numel()
    dist.all_reduce(totals)
    return float(totals[0] / totals[1])


@contextlib.contextmanager
def maybe_profile(
    directory: str | None, rank: int, device: torch.device, steps: int
) -> Iterator[Callable[[], None]]:
    """torch.profiler over the first steps (a trace per rank in `directory`); yields step()."""
    if not directory:
        yield lambda: None
        return
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    warmup = 1 if steps > 1 else 0
    active = max(1, min(20, steps - warmup))
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1),
        on_trace_ready=tensorboard_trace_handler(directory, worker_name=f"rank{rank}"),
        record_shapes=True,
    ) as prof:
        yield prof.step


def train(ctx: rt.ProbeContext, args: argparse.Namespace) -> dict[str, Any]:
    """A short DDP training; returns this rank's figures and the global loss before/after."""
    per_rank = max(args.samples_per_rank, args.batch_size)
    dataset = make_dataset(per_rank * ctx.world_size, args.seed)
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=args.seed, drop_last=True
    )
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                        pin_memory=ctx.device.type == "cuda")
    torch.manual_seed(args.seed)
    model = make_model().to(ctx.device)
    # The first DDP in a process spends seconds on imports before its one broadcast (and much
    # longer on a loaded machine): the group's own timeout guards that broadcast, the watchdog
    # only the whole step.
    ctx.watchdog.expect("building the DDP model (broadcast of rank 0's weights)", 2 * ctx.timeout + 60)
    ddp = DistributedDataParallel(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    ctx.watchdog.expect("the loss before training (an all_reduce)")
    loss_before = global_mean_loss(model, loader, ctx.device)
    steps = 0
    rt.synchronize(ctx.device)
    start = time.perf_counter()
    with maybe_profile(args.profile, ctx.rank, ctx.device, args.epochs * len(loader)) as profiler_step:
        for epoch in range(args.epochs):
            ctx.say(f"Epoch {epoch} | Batchsize: {args.batch_size} | Steps: {len(loader)}")
            sampler.set_epoch(epoch)
            for images, labels in loader:
                ctx.watchdog.expect(f"DDP training step {steps} (epoch {epoch}): gradient all_reduce")
                images = images.to(ctx.device, non_blocking=True)
                labels = labels.to(ctx.device, non_blocking=True)
                optimizer.zero_grad(set_to_none=True)
                loss_fn(ddp(images), labels).backward()
                optimizer.step()
                steps += 1
                profiler_step()
    rt.synchronize(ctx.device)
    seconds = time.perf_counter() - start
    ctx.watchdog.expect("the loss evaluation after training")
    loss_after = global_mean_loss(model, loader, ctx.device)
    samples = steps * args.batch_size
    ctx.say(f"trained {samples} samples in {seconds:.3f} s: {samples / seconds:.1f} samples/s, "
            f"loss {loss_before:.4f} -> {loss_after:.4f}")
    return {
        "model": model,
        "steps_per_epoch": len(loader),
        "samples": samples,
        "seconds": seconds,
        "samples_per_s": samples / seconds if seconds > 0 else 0.0,
        "loss_before": loss_before,
        "loss_after": loss_after,
    }


def params_mismatch(model: nn.Module) -> tuple[int, int]:
    """(parameters differing bit for bit from rank 0's, total parameters)."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).contiguous()
    reference = flat.clone()
    dist.broadcast(reference, src=0)
    return int((flat.view(torch.int32) != reference.view(torch.int32)).sum()), flat.numel()


# ---------------------------------------------------------------------------------------------
# Report


def versions() -> dict[str, Any]:
    try:
        import versions as versions_module  # entrypoints/versions.py, beside this script
    except ImportError:
        return {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": None}
    return dict(versions_module.collect())


def merge_checks(per_rank: list[dict[str, Check]]) -> dict[str, dict[str, Any]]:
    """A check passes when it passed on every rank; the detail names the ranks where it did not."""
    merged: dict[str, dict[str, Any]] = {}
    for name in per_rank[0]:
        results = [(rank, checks.get(name)) for rank, checks in enumerate(per_rank)]
        failed = [rank for rank, check in results if check is None or not check.ok]
        detail = per_rank[0][name].detail
        if failed:
            bad = next((c for r, c in results if r == failed[0] and c is not None), None)
            said = bad.detail if bad else "no result"
            detail = f"rank{'s' if len(failed) > 1 else ''} {_ranks(failed)}: {said}"
        merged[name] = {
            "ok": not failed,
            "detail": detail,
            "seconds": max((c.seconds for _, c in results if c is not None), default=0.0),
            "failed_ranks": failed,
        }
    return merged


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f", ... ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def write_json(path: str | None, report: dict[str, Any]) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(report, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
    os.replace(tmp, path)


def failed_summary(checks: dict[str, dict[str, Any]]) -> str:
    """The failed checks for the verdict line; those skipped after a broken group only counted."""
    failed = {name: c for name, c in checks.items() if not c["ok"]}
    not_run = [name for name, c in failed.items() if NOT_RUN in c["detail"]]
    text = "; ".join(f"{name} failed on {c['detail']}" for name, c in failed.items() if name not in not_run)
    return text + (f"; not run after that: {', '.join(not_run)}" if not_run else "")


def print_report(ctx: rt.ProbeContext, report: dict[str, Any]) -> None:
    checks = report["checks"]
    ctx.rank0("checks:")
    ctx.rank0(rt.format_table(
        ("CHECK", "RESULT", "SECONDS", "DETAIL"),
        [(name, "PASS" if c["ok"] else "FAIL", c["seconds"], c["detail"]) for name, c in checks.items()],
    ))
    training = report["training"]
    if training.get("samples_per_s_per_rank"):
        rows = zip(report["ranks"], training["samples_per_s_per_rank"], training["peak_rss_bytes_per_rank"],
                   strict=False)
        ctx.rank0("training (per rank):")
        ctx.rank0(rt.format_table(
            ("RANK", "HOST", "SAMPLES/S", "PEAK_RSS_MIB"),
            [(row["rank"], row["host"], rate, rt.mib(rss)) for row, rate, rss in rows],
        ))
        ctx.rank0(f"  total {training['samples_per_s_total']:.1f} samples/s, {len(report['ranks'])} ranks; "
                  f"loss {training['loss_before']:.4f} -> {training['loss_after']:.4f}")


def run_checks(ctx: rt.ProbeContext, args: argparse.Namespace, book: CheckBook) -> dict[str, Any]:
    """Every check after init, in order, on this rank; returns the training figures (or {})."""
    rows: list[dict[str, Any]] = []
    trained: dict[str, Any] = {}

    def topology() -> str:
        rows.extend(rank_rows(ctx))
        ok, detail = check_topology(rows)
        if not ok:
            raise CheckFailed(detail)
        return detail

    def training() -> str:
        trained.update(train(ctx, args))
        return f"{trained['samples']} samples in {trained['seconds']:.3f} s"

    def identical() -> str:
        wrong, total = params_mismatch(trained["model"])
        if wrong:
            raise CheckFailed(f"{wrong} of {total} parameters differ from rank 0")
        return f"{total} parameters bit-identical to rank 0"

    def loss_down() -> str:
        before, after = trained["loss_before"], trained["loss_after"]
        if not after < before:
            raise CheckFailed(f"loss did not go down: {before:.4f} -> {after:.4f}")
        return f"{before:.4f} -> {after:.4f}"

    book.run("topology", "gathering every rank's identity", topology)
    if rows:
        book.rows = [{key: row[key] for key in RANK_KEYS} for row in rows]
        ctx.rank0(rt.format_table([key.upper() for key in RANK_KEYS], [list(row.values()) for row in book.rows]))
    book.run("all_reduce", "all_reduce of known values", lambda: check_all_reduce(ctx))
    book.run("broadcast", "broadcast from ranks 0 and N-1", lambda: check_broadcast(ctx))
    book.run("barrier", "barrier", lambda: check_barrier(ctx))
    book.run("ddp_training", "DDP training (gradient all_reduce among all ranks)", training)
    book.run("params_identical", "comparing parameters with rank 0", identical)
    book.run("loss_decreased", "evaluating the loss", loss_down)
    return trained


def gather_results(ctx: rt.ProbeContext, book: CheckBook, trained: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's checks and figures, indexed by rank (only rank 0's own when the group broke)."""
    cuda = ctx.device.type == "cuda"
    local: dict[str, Any] = {
        "checks": {name: asdict(check) for name, check in book.checks.items()},
        "samples_per_s": trained.get("samples_per_s"),
        "seconds": trained.get("seconds"),
        "peak_rss_bytes": rt.peak_rss_bytes(),
        "peak_gpu_mem_bytes": torch.cuda.max_memory_allocated(ctx.device) if cuda else None,
    }
    if book.broken:  # gathering over a broken group would only wait out the timeout again
        return [local] if ctx.rank == 0 else []
    ctx.watchdog.expect("gathering the results of every rank")
    return rt.gather_objects(local, ctx.device)


def training_report(args: argparse.Namespace, trained: dict[str, Any], gathered: list[dict[str, Any]],
                    identical: bool) -> dict[str, Any]:
    rates = [g["samples_per_s"] for g in gathered]
    return {
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "samples_per_rank": trained["samples"],
        "steps_per_epoch": trained["steps_per_epoch"],
        "loss_before": trained["loss_before"],
        "loss_after": trained["loss_after"],
        "params_identical": identical,
        "seconds": max(g["seconds"] for g in gathered),
        "samples_per_s_per_rank": rates,
        "samples_per_s_total": sum(rates),
        "peak_rss_bytes_per_rank": [g["peak_rss_bytes"] for g in gathered],
        "peak_gpu_mem_bytes_per_rank": [g["peak_gpu_mem_bytes"] for g in gathered],
        "profile_dir": os.path.abspath(args.profile) if args.profile else None,
    }


def pass_detail(ctx: rt.ProbeContext, report: dict[str, Any], seconds: float) -> str:
    training = report["training"]
    return (
        f"world_size={ctx.world_size} hosts={len({row['host'] for row in report['ranks']})} "
        f"backend={ctx.backend} device={ctx.device.type} checks={len(report['checks'])}/{len(report['checks'])} "
        f"samples_per_s={training['samples_per_s_total']:.1f} "
        f"loss={training['loss_before']:.4f}->{training['loss_after']:.4f} seconds={seconds:.1f}"
    )


def run(args: argparse.Namespace) -> int:
    wall = time.perf_counter()
    info = rt.detect_launch()
    report: dict[str, Any] = {"ok": False, "world_size": info.world_size, "ranks": [], "checks": {},
                              "training": {}, "versions": versions() if info.rank == 0 else {}}
    try:
        ctx = rt.start_probe(SCRIPT, args.backend, args.device, args.timeout)
    except rt.ProbeError as exc:
        if info.rank == 0:  # the report says what it can: this rank, and why init failed
            report["ranks"] = [identity_row(info, socket.gethostname(), args.device)]
            report["checks"]["init"] = {"ok": False, "detail": str(exc), "seconds": args.timeout,
                                        "failed_ranks": [0]}
            write_json(args.json, report)
        raise
    book = CheckBook(ctx)
    book.record("init", True, f"{ctx.backend} process group of {ctx.world_size} within {args.timeout:g} s",
                time.perf_counter() - wall)
    v = report["versions"]
    ctx.rank0(f"clusterprobe ddp_check: world_size {ctx.world_size}, backend {ctx.backend}, "
              f"torch {v.get('torch')}, CUDA {v.get('cuda')}, NCCL {v.get('nccl')}")
    trained = run_checks(ctx, args, book)
    gathered = gather_results(ctx, book, trained)
    per_rank = [{name: Check(**check) for name, check in g["checks"].items()} for g in gathered]
    ok = all(all(c.ok for c in checks.values()) for checks in per_rank) and not book.broken
    if ctx.rank == 0:
        report["ranks"] = book.rows
        report["checks"] = merge_checks(per_rank)
        if trained and not book.broken:
            identical = report["checks"]["params_identical"]["ok"]
            report["training"] = training_report(args, trained, gathered, identical)
        report["ok"] = ok
        print_report(ctx, report)
        write_json(args.json, report)
    # leave first, then say so: a hang in teardown must not follow a PASS line
    rt.finish_probe(ctx, healthy=not book.broken)
    if ctx.rank != 0:
        failed = [name for name, c in book.checks.items() if not c.ok]
        return rt.conclude(ctx, ok, "", f"failed on this rank: {', '.join(failed) or 'none, on other ranks'}")
    if not ok:
        return rt.conclude(ctx, ok, failed_summary(report["checks"]))
    return rt.conclude(ctx, ok, pass_detail(ctx, report, time.perf_counter() - wall))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return rt.run_probe(SCRIPT, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
