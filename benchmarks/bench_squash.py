#!/usr/bin/env python3
"""Squash figures on the cpu image (the 1.2 GB torch image `invoke build --variant cpu` makes).

1. time and size per compression setting (the native backend, as `invoke squash` runs it);
2. a second `invoke squash` of the unchanged image, whole command (goal <= 1 s);
3. `invoke squash --force` against the raw pipeline a user would type with the same options
   (`docker create`; `docker export C | mksquashfs - OUT -tar ...`; `docker rm`), alternating
   so that a busy machine slows both alike (goal: ours / raw <= 1.1).
Medians over --repeat runs; on a shared machine the minimum is the steadier estimate
(interference only ever adds time), so both are printed. Figures are printed, never asserted.

    .venv/bin/python benchmarks/bench_squash.py [--repeat 3] [--settings zstd:3,lz4,lzo-nod] [--skip-table]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from clusterprobe import engine, squash  # noqa: E402
from clusterprobe.compression import Compression  # noqa: E402
from clusterprobe.output import human_bytes, render_table  # noqa: E402

SETTINGS = "zstd:3,zstd:1,zstd,lz4,lz4:hc,gzip:1,gzip,lzo-nod,xz"


@dataclass
class Run:
    wall: float
    cpu: float  # user + system of the processes started (not dockerd's export): steadier when others load the machine


def timed(action: Callable[[], object]) -> Run:
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    action()
    wall, after = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return Run(wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def invoke_squash(out: Path, *args: str) -> Run:
    return timed(lambda: subprocess.run(
        [sys.executable, "-m", "invoke", "squash", "--variant", "cpu", "--backend", "native", "--out", str(out),
         *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


def raw_pipeline(image_id: str, out: Path, options: tuple[str, ...]) -> Run:
    out.unlink(missing_ok=True)
    return timed(lambda: _raw_pipeline(image_id, out, options))


def _raw_pipeline(image_id: str, out: Path, options: tuple[str, ...]) -> None:
    """What a user types today, with the options our native backend passes mksquashfs."""
    spec_argv = ["mksquashfs", "-", str(out), "-tar", "-all-root", "-root-mode", "0755", "-noappend",
                 "-no-xattrs", "-no-progress", "-processors", str(len(os.sched_getaffinity(0))), *options,
                 "-wildcards", "-e", *squash.EXPORT_EXCLUDES]
    name = subprocess.run(["docker", "create", image_id], check=True, capture_output=True, text=True).stdout.strip()
    try:
        # mksquashfs stops reading at the end-of-archive blocks, so docker export may die of SIGPIPE (141).
        pipeline = (f"docker export {name} | {shlex.join(spec_argv)}; s=(\"${{PIPESTATUS[@]}}\"); "
                    '[ "${s[1]}" = 0 ] && { [ "${s[0]}" = 0 ] || [ "${s[0]}" = 141 ]; }')
        subprocess.run(["bash", "-c", pipeline], check=True, stdout=subprocess.DEVNULL)
    finally:
        subprocess.run(["docker", "rm", "-f", name], check=True, capture_output=True)


def stats(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), min(values)


def table_per_setting(out: Path, settings: list[str], repeat: int) -> None:
    rows = []
    for setting in settings:
        spelling = Compression.parse(setting).spelling
        runs = [invoke_squash(out, "--force", "--compression", spelling) for _ in range(repeat)]
        size = (out / "clusterprobe-cpu.sqsh").stat().st_size
        median, fastest = stats([r.wall for r in runs])
        rows.append({"compression": spelling, "median_s": round(median, 1), "min_s": round(fastest, 1),
                     "cpu_s": round(statistics.median(r.cpu for r in runs), 1), "size": human_bytes(size),
                     "size_mb": round(size / 1e6)})
        print(f"  {spelling}: {median:.1f} s, {human_bytes(size)}", file=sys.stderr, flush=True)
    print(render_table(rows, ["compression", "median_s", "min_s", "cpu_s", "size", "size_mb"]))


def compare(label: str, ours: Callable[[], Run], theirs: Callable[[], Run], repeat: int) -> None:
    mine: list[Run] = []
    raw: list[Run] = []
    for _ in range(repeat):
        mine.append(ours())
        raw.append(theirs())
    figures: dict[str, dict[str, float]] = {}
    for name, runs in (("invoke squash --force", mine), ("raw docker export | mksquashfs", raw)):
        median, fastest = stats([r.wall for r in runs])
        figures[name] = {"median_s": median, "min_s": fastest, "cpu_median_s": statistics.median(r.cpu for r in runs)}
    ours_f, raw_f = figures.values()
    ratio = figures["ratio ours / raw"] = {key: ours_f[key] / raw_f[key] for key in ours_f}
    rows = [{"run": name, **{k: round(v, 3) for k, v in values.items()}} for name, values in figures.items()]
    print(render_table(rows, ["run", "median_s", "min_s", "cpu_median_s"]))
    print(f"{label}: ours/raw wall median {ratio['median_s']:.3f}, min {ratio['min_s']:.3f}, "
          f"cpu {ratio['cpu_median_s']:.3f} (goal <= 1.1) over {repeat} alternating pairs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (medians and minima)")
    parser.add_argument("--settings", default=SETTINGS, help=f"compression settings for the table ({SETTINGS})")
    parser.add_argument("--skip-table", action="store_true", help="only the up-to-date and raw-pipeline figures")
    args = parser.parse_args()
    client = engine.connect()
    source = squash.find_source_image(client, "clusterprobe", "cpu")
    if source is None:
        print("no clusterprobe:cpu image: run `invoke build --variant cpu` first", file=sys.stderr)
        return 1
    print(f"cpu image {source.tag} ({source.image_id[:19]}), {human_bytes(source.size_bytes)}, "
          f"{len(os.sched_getaffinity(0))} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-squash-") as tmp:
        out = Path(tmp) / "apps"
        if not args.skip_table:
            print("\n1. squash time and size per compression setting (native backend, whole invoke squash)")
            table_per_setting(out, [s for s in args.settings.split(",") if s], args.repeat)

        print("\n2. second squash of the unchanged image (whole `invoke squash`, goal <= 1 s)")
        invoke_squash(out, "--compression", "zstd:3")  # make it up to date
        again = [invoke_squash(out, "--compression", "zstd:3").wall for _ in range(max(5, args.repeat))]
        median, fastest = stats(again)
        print(f"up to date: median {median:.2f} s, min {fastest:.2f} s over {len(again)} runs")

        print("\n3. ours vs the raw pipeline, zstd:3, same mksquashfs options")
        options = Compression.parse("zstd:3").mksquashfs_options()
        raw_out = Path(tmp) / "raw.sqsh"
        compare("zstd:3", lambda: invoke_squash(out, "--force", "--compression", "zstd:3"),
                lambda: raw_pipeline(source.image_id, raw_out, options), args.repeat)
        ours_size, raw_size = (out / "clusterprobe-cpu.sqsh").stat().st_size, raw_out.stat().st_size
        print(f"sizes: ours {human_bytes(ours_size)}, raw {human_bytes(raw_size)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
