"""comms_bench.py in real processes on CPU: rows, JSON Lines, #wrong, skips, --min-busbw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.entrypoints.procs import (
    BUSBW_FACTORS,
    COMMS_BENCH,
    HOST,
    PYTHON,
    Launch,
    Result,
    argv,
    clean_env,
    read_jsonl,
    run_one,
    slurm_env,
    slurm_job_id,
    torchrun,
)

FAULTY = str(Path(__file__).with_name("faulty_comms_bench.py"))
ROW_KEYS = {"collective", "dtype", "size_bytes", "count", "world_size", "time_us", "algbw_gbps", "busbw_gbps",
            "wrong", "time_us_min", "time_us_max", "slowest_rank", "slowest_host"}  # fmt: skip


def verdict(result: Result) -> str:
    (line,) = result.verdicts("comms_bench")
    assert line == result.last_plain_line(), "the verdict must end rank 0's output"
    return line


def assert_rows(
    rows: list[dict[str, Any]], world: int, collectives: list[str], sizes: list[int], dtype: str = "float32"
) -> None:
    assert [(r["collective"], r["size_bytes"]) for r in rows] == [(c, s) for c in collectives for s in sizes]
    elem = {"float32": 4, "bfloat16": 2}[dtype]
    for row in rows:
        assert set(row) >= ROW_KEYS
        assert (row["world_size"], row["dtype"], row["wrong"]) == (world, dtype, 0)
        assert row["count"] * elem == row["size_bytes"]
        assert row["time_us"] == row["time_us_max"] >= row["time_us_min"] > 0
        assert row["slowest_host"] == HOST and 0 <= row["slowest_rank"] < world
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / (row["time_us"] * 1e-6) / 1e9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * BUSBW_FACTORS[row["collective"]](world))


def test_the_image_smoke_command(launch: Launch, tmp_path: Path) -> None:
    out = tmp_path / "comms.json"
    args = argv("-b 8 -e 64K -f 8 -n 5 -w 2 -c 1 --collective all_reduce,all_gather,broadcast")
    result = run_one(launch, torchrun(COMMS_BENCH, *args, "--json", str(out)), timeout=120)
    assert result.returncode == 0, result.describe()
    assert verdict(result).startswith("clusterprobe: comms_bench PASS world_size=2 backend=gloo device=cpu")
    collectives = ["all_reduce", "all_gather", "broadcast"]
    assert_rows(read_jsonl(out), 2, collectives, [8, 64, 512, 4096, 32768])
    assert (
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        in result.stdout
    )
    assert result.stdout.count("# Avg bus bandwidth    :") == 4  # one per collective, one overall
    assert "# Peak memory per rank" in result.stdout


def test_every_collective_with_four_ranks(launch: Launch, tmp_path: Path) -> None:
    out = tmp_path / "comms.json"
    collectives = list(BUSBW_FACTORS)
    args = [
        *argv("-b 16 -e 4K -f 16 -n 3 -w 1 -c 2 --root 3 --json"),
        str(out),
        "--collective",
        ",".join(collectives),
    ]
    result = run_one(launch, torchrun(COMMS_BENCH, *args, nproc=4), timeout=180)
    assert result.returncode == 0, result.describe()
    rows = read_jsonl(out)
    assert_rows(rows, 4, collectives, [16, 256, 4096])
    assert {r["root"] for r in rows if r["collective"] in ("broadcast", "reduce")} == {3}
    assert {r["redop"] for r in rows if r["collective"] in ("all_reduce", "reduce_scatter", "reduce")} == {
        "sum"
    }


def test_seed_000_param_command_line(launch: Launch, tmp_path: Path) -> None:
    """param's spellings unchanged (smaller sizes), under srun as the seed runs it."""
    out = tmp_path / "comms.json"
    flags = argv("--b=8 --e=4KB --f=2 --collective=all_reduce --num_iters=5 --w=1 --c=1 --data-type=bfloat16")
    job = slurm_job_id()
    for rank in range(2):
        launch.start([PYTHON, COMMS_BENCH, *flags, "--json", str(out)], slurm_env(rank, 2, job))
    rank0, rank1 = launch.wait(timeout=120)
    assert rank0.returncode == 0 and rank1.returncode == 0, rank0.describe() + rank1.describe()
    assert verdict(rank0).startswith("clusterprobe: comms_bench PASS world_size=2")
    rows = read_jsonl(out)
    assert_rows(rows, 2, ["all_reduce"], [8 * 2**i for i in range(10)], dtype="bfloat16")
    assert {r["iters"] for r in rows} == {5}


def test_param_flags_under_torchrun_after_a_separator(launch: Launch, tmp_path: Path) -> None:
    """torchrun's own parser takes --e/--n for abbreviations of its flags; after `--` they reach us."""
    out = tmp_path / "comms.json"
    args = argv("-- --b=8 --e=64 --f=8 --collective=all_gather --n=2 --w=1 --json")
    result = run_one(launch, torchrun(COMMS_BENCH, *args, str(out)), timeout=120)
    assert result.returncode == 0, result.describe()
    assert_rows(read_jsonl(out), 2, ["all_gather"], [8, 64])


def test_a_wrong_result_is_counted_and_fails(launch: Launch, tmp_path: Path) -> None:
    out = tmp_path / "comms.json"
    args = argv("-b 8 -e 512 -f 8 -n 2 -w 1 -c 1 --collective all_reduce,broadcast --json")
    env = clean_env(FAULT_CORRUPT="all_reduce")
    result = run_one(launch, torchrun(FAULTY, *args, str(out)), timeout=120, env=env)
    assert result.returncode == 1, result.describe()
    rows = read_jsonl(out)
    assert [r["wrong"] for r in rows if r["collective"] == "all_reduce"] == [1, 1, 1]  # rank 1, first element
    assert [r["wrong"] for r in rows if r["collective"] == "broadcast"] == [0, 0, 0]
    expected = "clusterprobe: comms_bench FAIL #wrong=3 (all_reduce 8 B: 1, all_reduce 64 B: 1"
    assert verdict(result).startswith(expected)


def test_a_collective_the_backend_lacks_is_skipped(launch: Launch, tmp_path: Path) -> None:
    out = tmp_path / "comms.json"
    args = argv("-b 8 -e 64 -f 8 -n 2 -w 1 --collective reduce_scatter,all_reduce --json")
    env = clean_env(FAULT_UNSUPPORTED="reduce_scatter")
    result = run_one(launch, torchrun(FAULTY, *args, str(out)), timeout=120, env=env)
    assert result.returncode == 0, result.describe()
    note = "# reduce_scatter: skipped, backend gloo on cpu cannot run it with float32 (RuntimeError: "
    assert note in result.stdout
    assert "skipped=reduce_scatter" in verdict(result)
    assert {r["collective"] for r in read_jsonl(out)} == {"all_reduce"}


@pytest.mark.parametrize(
    ("flags", "env", "passes"),
    [
        (["--min-busbw", "1e6"], {}, False),
        ([], {"NCCL_TESTS_MIN_BW": "1e6"}, False),
        (["--min-busbw", "0"], {"NCCL_TESTS_MIN_BW": "1e6"}, True),
    ],
)
def test_minimum_bus_bandwidth(launch: Launch, flags: list[str], env: dict[str, str], passes: bool) -> None:
    """One process (no launcher): broadcast's busbw is its algbw, far below 1 PB/s on any machine."""
    args = [PYTHON, COMMS_BENCH, *argv("-b 8 -e 64 -n 2 -w 1 --collective broadcast"), *flags]
    result = run_one(launch, args, timeout=60, env=clean_env(**env))
    assert result.returncode == (0 if passes else 1), result.describe()
    if not passes:
        assert "broadcast avg busbw" in verdict(result) and "< minimum 1e+06 GB/s" in verdict(result)
