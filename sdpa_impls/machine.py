"""What machine a measurement came from: CPU, threads, GPU, driver, library versions (one dict for every front end)."""
from __future__ import annotations

import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version

import torch

from .timing import cpu_model


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info(device: str | torch.device | None = None) -> dict:
    """Device, CPU model, thread count, GPU (model, memory, capability, driver), torch/CUDA/xformers versions."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gpu = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu = {"name": props.name, "memory_bytes": int(props.total_memory),
               "capability": f"{props.major}.{props.minor}", "driver": _driver()}
    return {
        "device": device.type,
        "device_name": gpu["name"] if gpu else cpu_model(),
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "gpu": gpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "xformers": _version("xformers"),
        "python": platform.python_version(),
    }
