"""comms_bench's arithmetic and flags, without processes: sizes, algbw/busbw, checks, verdict."""

from __future__ import annotations

import argparse
import datetime

import comms_bench as cb
import pytest
import torch
import torch.distributed as dist

from tests.entrypoints.procs import BUSBW_FACTORS

GB = 1e9


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8", 8),
        ("64K", 64 * 2**10),
        ("2M", 2 * 2**20),
        ("1G", 2**30),
        ("2GB", 2 * 2**30),
        ("1GiB", 2**30),
        ("512kb", 512 * 2**10),
        ("1.5M", 3 * 2**19),
        ("0", 0),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert cb.parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "-8", "2X", "G", "1..5M"])
def test_parse_size_rejects(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cb.parse_size(bad)


def test_size_sweep() -> None:
    assert cb.size_sweep(8, 64 * 2**10, 8) == [8, 64, 512, 4096, 32768]
    assert cb.size_sweep(8, 8, 2) == [8]
    assert len(cb.size_sweep(8, 2 * 2**30, 2)) == 29  # 8 B .. 2 GiB, as seed 000's run
    with pytest.raises(ValueError):
        cb.size_sweep(64, 8, 2)
    with pytest.raises(ValueError):
        cb.size_sweep(8, 64, 1)


@pytest.mark.parametrize("name", sorted(BUSBW_FACTORS))
@pytest.mark.parametrize("world", [1, 2, 3, 4, 8, 16, 1024])
def test_busbw_matches_nccl_tests(name: str, world: int) -> None:
    collective = cb.COLLECTIVES[name]
    size, seconds = 256 * 2**20, 0.004
    algbw, busbw = cb.bandwidths(collective, size, seconds, world)
    assert algbw == pytest.approx(size / seconds / GB)
    assert busbw == pytest.approx(size / seconds / GB * BUSBW_FACTORS[name](world))


def test_known_figures() -> None:
    # 1 GiB all_reduce over 8 ranks in 10 ms: algbw 107.37 GB/s, busbw x 14/8
    algbw, busbw = cb.bandwidths(cb.COLLECTIVES["all_reduce"], 2**30, 0.010, 8)
    assert round(algbw, 2) == 107.37 and round(busbw, 2) == 187.90
    assert cb.bandwidths(cb.COLLECTIVES["broadcast"], 8, 0.0, 2) == (0.0, 0.0)


def test_counts_are_whole_elements_per_rank() -> None:
    gather, reduce = cb.COLLECTIVES["all_gather"], cb.COLLECTIVES["all_reduce"]
    assert gather.count(8, 4, 4) == 4  # at least one float per rank
    assert gather.count(1000, 4, 3) == 249  # 250 floats, rounded down to a multiple of 3
    assert reduce.count(8, 4, 4) == 2
    assert reduce.count(2, 4, 4) == 1


def test_param_spellings_of_seed_000() -> None:
    args = cb.parse_args(
        [
            "--b=8",
            "--e=2GB",
            "--f=2",
            "--collective=all_reduce",
            "--num_iters=100",
            "--w=3",
            "--c=0",
            "--data-type=bfloat16",
        ]
    )
    assert (args.begin, args.end, args.factor, args.iters, args.warmup, args.check, args.dtype) == (
        8,
        2 * 2**30,
        2,
        100,
        3,
        0,
        "bfloat16",
    )
    assert [c.name for c in args.collectives] == ["all_reduce"]


def test_nccl_tests_spellings() -> None:
    args = cb.parse_args(
        [
            "-b",
            "8",
            "-e",
            "128M",
            "-f",
            "4",
            "-n",
            "7",
            "-w",
            "1",
            "-c",
            "2",
            "-d",
            "half",
            "--collective",
            "all_gather,reduce_scatter,all_to_all,broadcast,reduce,all_gather",
        ]
    )
    assert (args.iters, args.warmup, args.check, args.dtype) == (7, 1, 2, "half")
    assert [c.name for c in args.collectives] == [
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "broadcast",
        "reduce",
    ]


def test_unknown_collective_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cb.parse_args(["--collective", "allreduce"])
    assert exit_info.value.code == 2
    assert "did you mean 'all_reduce'" in capsys.readouterr().err


def test_min_busbw_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_TESTS_MIN_BW", "12.5")
    assert cb.parse_args([]).min_busbw == 12.5
    assert cb.parse_args(["--min-busbw", "0"]).min_busbw == 0


def _row(collective: str, busbw: float, wrong: int | None = 0) -> dict[str, object]:
    return {"collective": collective, "busbw_gbps": busbw, "wrong": wrong, "size_bytes": 8}


def test_verdict() -> None:
    ok, detail = cb.verdict([_row("all_reduce", 2.0), _row("all_reduce", 4.0)], {}, None)
    assert ok and "all_reduce=3.000" in detail
    ok, detail = cb.verdict([_row("all_reduce", 2.0, wrong=3)], {}, None)
    assert not ok and "#wrong=3" in detail
    ok, detail = cb.verdict([_row("all_reduce", 2.0), _row("broadcast", 9.0)], {}, 5.0)
    assert not ok and "all_reduce avg busbw 2.000 GB/s < minimum 5" in detail and "broadcast" not in detail
    ok, detail = cb.verdict([], {"reduce_scatter": "unsupported"}, None)
    assert not ok and "no collective could run" in detail
    ok, detail = cb.verdict([_row("all_reduce", 1.0, wrong=None)], {"all_to_all": "x"}, None)
    assert ok and "wrong=N/A" in detail and "skipped=all_to_all" in detail


@pytest.fixture
def one_rank_group() -> object:
    """A real gloo group of one, in this process (no network)."""
    dist.init_process_group(
        "gloo",
        store=dist.HashStore(),
        rank=0,
        world_size=1,  # type: ignore[attr-defined]
        timeout=datetime.timedelta(seconds=30),
    )
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("name", sorted(cb.COLLECTIVES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8])
def test_check_finds_nothing_wrong_and_sees_corruption(
    one_rank_group: object, name: str, dtype: torch.dtype
) -> None:
    collective = cb.COLLECTIVES[name]
    buffers = cb.make_buffers(
        collective, collective.count(4096, 4, 1), dtype, torch.device("cpu"), world=1, root=0
    )
    assert cb.check_once(collective, buffers, rank=0, world=1, root=0) == 0
    real = buffers.run

    def corrupting() -> None:
        real()
        buffers.out[::100] += 1

    buffers.run = corrupting
    assert cb.check_once(collective, buffers, rank=0, world=1, root=0) == len(
        range(0, buffers.out.numel(), 100)
    )


def test_known_values_are_exact_in_small_types() -> None:
    index = torch.arange(100_000)
    assert int(cb.pattern(1023, index).max()) <= 113 and int(cb.pattern(5, index).min()) >= 1
    sums = sum(cb.reduce_input(index, r, 4) for r in range(4))
    assert torch.equal(sums, cb.owner_weight(index, 4)) and int(sums.max()) <= 7
