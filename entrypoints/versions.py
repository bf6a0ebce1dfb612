#!/usr/bin/env python3
"""Print what this image (or host) carries, as one JSON object on stdout.

Standalone on purpose: python + torch only, so it runs in images we don't control. The image
pipeline probes these values inside a freshly built image and derives the image tags from them
(torch, CUDA, NCCL, aws-ofi-nccl), so a tag never claims what the image doesn't hold.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import socket
import sys
from typing import Any

# Where AWS images put the EFA installer record and the aws-ofi-nccl plugin.
EFA_INSTALLED_PACKAGES = "/opt/amazon/efa_installed_packages"
OFI_NCCL_GLOBS = (
    "/opt/amazon/ofi-nccl/lib*/**/libnccl-net*.so*",
    "/opt/aws-ofi-nccl/lib*/libnccl-net*.so*",
    "/usr/local/lib/libnccl-net*.so*",
    "/usr/lib/x86_64-linux-gnu/libnccl-net*.so*",
)


def torch_versions() -> dict[str, Any]:
    try:
        import torch
    except ImportError as exc:  # the smoke test turns this into a clear failure
        return {"torch": None, "torch_error": str(exc)}
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "cudnn": None,
        "nccl": None,
    }
    try:
        if torch.backends.cudnn.is_available():
            out["cudnn"] = str(torch.backends.cudnn.version())
    except Exception:
        pass
    try:
        if torch.cuda.is_available() or torch.version.cuda:
            nccl = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception:
        pass
    import torch.distributed as dist

    out["backends"] = {
        "gloo": dist.is_gloo_available(),
        "nccl": dist.is_nccl_available(),
        "mpi": dist.is_mpi_available(),
    }
    return out


def efa_versions() -> dict[str, Any]:
    """EFA installer and aws-ofi-nccl versions, where the image has them."""
    out: dict[str, Any] = {"efa_installer": None, "aws_ofi_nccl": None, "libfabric": None}
    try:
        with open(EFA_INSTALLED_PACKAGES) as fh:
            text = fh.read()
        match = re.search(r"EFA installer version:\s*(\S+)", text)
        out["efa_installer"] = match.group(1) if match else "present"
    except OSError:
        pass
    for pattern in OFI_NCCL_GLOBS:
        for lib in sorted(glob.glob(pattern, recursive=True)):
            version = _ofi_nccl_version(lib)
            if version:
                out["aws_ofi_nccl"] = version
                break
        if out["aws_ofi_nccl"]:
            break
    for lib in sorted(glob.glob("/opt/amazon/efa/lib*/libfabric.so.*")):
        match = re.search(r"libfabric\.so\.(\d+(?:\.\d+)*)", lib)
        if match:
            out["libfabric"] = match.group(1)
    return out


def _ofi_nccl_version(lib: str) -> str | None:
    """aws-ofi-nccl embeds 'NET/OFI Initializing aws-ofi-nccl X.Y.Z' in its binary."""
    try:
        with open(lib, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    match = re.search(rb"aws-ofi-nccl[ -]v?(\d+\.\d+\.\d+[\w.-]*)", data)
    return match.group(1).decode() if match else "present"


def collect() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "machine": platform.machine(),
        **torch_versions(),
        **efa_versions(),
        "nvidia_visible_devices": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
    }


def main() -> int:
    info = collect()
    json.dump(info, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0 if info.get("torch") else 1


if __name__ == "__main__":
    sys.exit(main())
