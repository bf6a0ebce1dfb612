#!/usr/bin/env python3
"""Image pipeline figures: cold build, no-op rebuild, rebuild after touching one entrypoint,
and the image size over its base. Prints a table of medians over --repeat runs.

Goals (issue 2): no-op rebuild <= 3 s with no layer rebuilt; touching an entrypoint rebuilds
only the entrypoint layer; the cpu variant adds < 5 MB over its base.

Runs on a copy of the image inputs (so the checkout stays clean) with the cpu variant on the
local torch base (`invoke local-base` makes it). Needs a running Docker engine.

    .venv/bin/python benchmarks/bench_build.py [--repeat 3] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from clusterprobe import build, engine  # noqa: E402
from clusterprobe.config import load_variants  # noqa: E402
from clusterprobe.output import render_table  # noqa: E402
from clusterprobe.runner import Runner  # noqa: E402
from clusterprobe.settings import Settings  # noqa: E402


def copy_inputs(dest: Path, base: str) -> Path:
    shutil.copytree(ROOT / "entrypoints", dest / "entrypoints", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "images").mkdir()
    shutil.copy(ROOT / "images" / "Dockerfile", dest / "images" / "Dockerfile")
    variants = dest / "images" / "variants.yaml"
    variants.write_text(f"variants:\n  cpu:\n    base_image: {base}\n    gpu: false\n")
    return variants


def one_build(client, variants: Path, *, smoke: bool, no_cache: bool) -> tuple[float, build.BuildResult]:  # type: ignore[no-untyped-def]
    config = load_variants(variants)
    (spec,) = build.plan_builds(config, ["cpu"], repository="clusterprobe-bench")
    start = time.monotonic()
    result = build.execute_build(client, Runner(echo=lambda _: None), spec, smoke_test=smoke, no_cache=no_cache)
    assert result is not None
    return time.monotonic() - start, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per scenario (medians are reported)")
    parser.add_argument("--smoke", action="store_true", help="include the smoke test in cold builds")
    parser.add_argument("--base", default=Settings().local_base_tag, help="base image (default: the local base)")
    args = parser.parse_args()
    client = engine.connect()
    if engine.get_image(client, args.base) is None:
        print(f"base image {args.base} is missing: run `invoke local-base` first", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        os.environ["CLUSTERPROBE_CACHE_DIR"] = str(Path(tmp) / "cache")
        variants = copy_inputs(Path(tmp), args.base)
        script = Path(tmp) / "entrypoints" / "versions.py"
        cold, noop, touched = [], [], []
        rebuilt_noop: set[int] = set()
        rebuilt_touch: set[int] = set()
        touched_steps: set[str] = set()
        result = None
        for i in range(args.repeat):
            shutil.rmtree(os.environ["CLUSTERPROBE_CACHE_DIR"], ignore_errors=True)
            seconds, result = one_build(client, variants, smoke=args.smoke, no_cache=True)
            cold.append(seconds)
            seconds, again = one_build(client, variants, smoke=args.smoke, no_cache=False)
            noop.append(seconds)
            rebuilt_noop.add(len(again.rebuilt_steps))
            script.write_text(script.read_text() + f"\n# touch {i} {time.time()}\n")
            seconds, edited = one_build(client, variants, smoke=False, no_cache=False)
            touched.append(seconds)
            rebuilt_touch.add(len(edited.rebuilt_steps))
            touched_steps.update(s.instruction for s in edited.rebuilt_steps)
        assert result is not None
        added = result.size_bytes - result.base_size_bytes
        rows = [
            {"scenario": "cold build (no layer cache)" + (" + smoke" if args.smoke else ""),
             "median_s": statistics.median(cold), "min_s": min(cold), "layers_rebuilt": "all"},
            {"scenario": "no-op rebuild", "median_s": statistics.median(noop), "min_s": min(noop),
             "layers_rebuilt": ",".join(map(str, sorted(rebuilt_noop)))},
            {"scenario": "touch one entrypoint", "median_s": statistics.median(touched), "min_s": min(touched),
             "layers_rebuilt": ",".join(map(str, sorted(rebuilt_touch))) + f" ({'; '.join(sorted(touched_steps))})"},
        ]
        for tag in client.images.list(name="clusterprobe-bench"):
            client.images.remove(tag.id, force=True)
    print(render_table(rows, ["scenario", "median_s", "min_s", "layers_rebuilt"]))
    print(f"\nimage size over its base: {added / 1e6:.3f} MB ({added} bytes); runs per scenario: {args.repeat}")
    print(f"no-op / cold ratio: {statistics.median(noop) / statistics.median(cold):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
