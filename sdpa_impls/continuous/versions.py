"""What an environment runs attention with: Python, torch and its build, CUDA, cuDNN, oneDNN and MKL as torch
reports them, the kernel libraries, numpy, and the packages that bring `sdpa_impls` plug-ins; and which of these
differ between the two sides of a comparison.

    probe(python, env) -> {"torch": "2.13.0+cpu", "oneDNN": "3.7.1", ...}   # in a process of that environment
    differences(base, head) -> ["torch 2.13.0+cpu → 2.14.1+cu130", ...]
"""
from __future__ import annotations

import json
import subprocess

from ..errors import GateInputError

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
    out["cuDNN"] = str(cudnn.version()) if cudnn is not None and cudnn.is_available() else None
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


def probe(python: str, env: dict[str, str]) -> dict[str, str | None]:
    """The versions seen by `python` with the process environment `env` (a side's, its install folder first)."""
    done = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise GateInputError(f"{python}: cannot report its versions: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def differences(base: dict[str, str | None], head: dict[str, str | None]) -> list[str]:
    """`name base → head` for every entry that differs ("-" where one side lacks it), in probe order."""
    names = list(dict.fromkeys([*base, *head]))
    return [f"{n} {base.get(n) or '-'} → {head.get(n) or '-'}" for n in names if base.get(n) != head.get(n)]


def summary(versions: dict[str, str | None]) -> str:
    """The entries worth naming for one side: Python, torch, and whatever else it has."""
    return ", ".join(f"{n} {v}" for n, v in versions.items() if v)
