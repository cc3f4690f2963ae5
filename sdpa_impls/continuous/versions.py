"""What an environment runs attention with: Python, torch and its build, CUDA, cuDNN, oneDNN and MKL as torch
reports them, the kernel libraries, numpy, and the packages that bring `sdpa_impls` plug-ins; and which of these
differ between the two sides of a comparison.

    PROBE: code that prints {"torch": "2.13.0+cpu", "oneDNN": "3.12.0", ...} as JSON (sides.check_import runs it)
    differences(base, head) -> ["torch 2.13.0+cpu → 2.14.1+cu130", ...]
    torch_differs(base, head) -> bool     # whether torch's own kernels may differ (torch_sdpa's code)
"""
from __future__ import annotations

# Runs in the side's interpreter (any Python >= 3.10, any torch): prints one JSON object.
PROBE = r"""
import json, platform, re, sys
from importlib import metadata
out = {"Python": platform.python_version()}
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
try:
    import torch
    out["torch"] = torch.__version__
    out["CUDA"] = torch.version.cuda
    cudnn = getattr(torch.backends, "cudnn", None)
    v = cudnn.version() if cudnn is not None and cudnn.is_available() else None  # 92400 for 9.24.0
    out["cuDNN"] = f"{v // 10000}.{v % 10000 // 100}.{v % 100}" if isinstance(v, int) and v >= 90000 else v and str(v)
    config = torch.__config__.show()
    for label, pattern in (("oneDNN", r"(?:MKL-DNN|oneDNN) v([\w.]+)"), ("MKL", r"Math Kernel Library Version ([\w.]+)")):
        m = re.search(pattern, config)
        out[label] = m.group(1) if m else None
except Exception as exc:
    out["torch"] = f"does not import ({type(exc).__name__})"
for name in ("numpy", "triton", "xformers", "flash-attn", "flash-attn-4", "flashinfer-python", "nvidia-cudnn-frontend"):
    out[name] = version(name)
for ep in metadata.entry_points(group="sdpa_impls"):
    dist = getattr(ep, "dist", None)
    if dist is not None and dist.metadata["Name"]:
        out[f"{dist.metadata['Name']} (plug-ins)"] = dist.version
print(json.dumps(out))
"""


def differences(base: dict[str, str | None], head: dict[str, str | None]) -> list[str]:
    """`name base → head` for every entry that differs ("-" where one side lacks it), in probe order."""
    names = list(dict.fromkeys([*base, *head]))
    return [f"{n} {base.get(n) or '-'} → {head.get(n) or '-'}" for n in names if base.get(n) != head.get(n)]


def summary(versions: dict[str, str | None]) -> str:
    """The entries worth naming for one side: Python, torch, and whatever else it has."""
    return ", ".join(f"{n} {v}" for n, v in versions.items() if v)


# What torch_sdpa's code is: torch's own kernels, with the libraries they call, run by this Python.
TORCH_STACK = ("Python", "torch", "CUDA", "cuDNN", "oneDNN", "MKL")


def torch_differs(base: dict[str, str | None], head: dict[str, str | None]) -> bool:
    """Whether torch or a library its kernels call differs between the sides, so that torch's SDPA may have
    changed and cannot be the time unit."""
    return any(base.get(n) != head.get(n) for n in TORCH_STACK)
