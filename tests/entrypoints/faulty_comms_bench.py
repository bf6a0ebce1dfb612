"""comms_bench.py with a collective broken on purpose, to prove the harness notices.

FAULT_CORRUPT=all_reduce: rank 1 adds 1 to the first element of every floating all_reduce result.
FAULT_UNSUPPORTED=reduce_scatter: the collective raises as a backend without it would.
Launched like comms_bench.py itself (torchrun ... faulty_comms_bench.py FLAGS).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "entrypoints"))

import comms_bench
import torch
import torch.distributed as dist

real_all_reduce = dist.all_reduce


def corrupting_all_reduce(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    work = real_all_reduce(tensor, *args, **kwargs)
    if dist.get_rank() == 1 and tensor.is_floating_point():  # the int flags of the harness stay intact
        tensor.view(-1)[0] += 1
    return work


def unsupported(name: str) -> Any:
    def raise_unsupported(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"ProcessGroupGloo does not support {name}")

    return raise_unsupported


if os.environ.get("FAULT_CORRUPT") == "all_reduce":
    dist.all_reduce = corrupting_all_reduce
for name in filter(None, os.environ.get("FAULT_UNSUPPORTED", "").split(",")):
    for attr in {
        "reduce_scatter": ("reduce_scatter_single", "reduce_scatter_tensor"),
        "all_to_all": ("all_to_all_single",),
    }[name]:
        setattr(dist, attr, unsupported(name))

sys.exit(comms_bench.main())
