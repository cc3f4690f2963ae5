"""flashinfer: `single_prefill_with_kv_cache`, and `single_decode_with_kv_cache` for Lq = 1; a padded decode batch
through `BatchPrefillWithRaggedKVCacheWrapper`; optional, CUDA only.

The single-request kernels take the query as (Lq, H, E), keys and values as (H, Lk, E) (kv_layout="HND": our own
(1, H, L, E) memory, contiguous, which the decode kernel requires of K and V). A `padding` batch goes ragged: the
queries of every row one after another, and only the first n_b keys of row b, with flashinfer's causal mask, which
is aligned bottom-right as the structure is. The conversions and the mask mapping are the pure functions `to_nhd`,
`to_hnd`, `from_nhd`, `prefill_kwargs`, `uses_decode` and `ragged_batch`.

flashinfer builds a kernel the first time a configuration is used (its JIT: nvcc, driven by ninja), unless a
prebuilt one covers it. `jit_toolchain` finds both on this machine (CUDA_HOME, else torch's own search for the CUDA
toolkit; ninja on PATH, else the `ninja` package's binary) and sets them up before flashinfer is imported; where
one is missing, that is the reason flashinfer does not run. The first call of a prepared closure is therefore its
compile step (`sdpa_impls.compilation`: reported as compile_s, never a sample).
"""
from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

import torch

from ..compilation import declare_compiles
from ..protocol import Implementation, SDPAInputs, Support
from ..registry import register
from .torch_sdpa import mask4


def to_nhd(t: torch.Tensor) -> torch.Tensor:
    """(1, H, L, E) -> (L, H, E), a view: the query's order in flashinfer (and its output's)."""
    return t[0].transpose(0, 1)


def to_hnd(t: torch.Tensor) -> torch.Tensor:
    """(1, H, L, E) -> (H, L, E), contiguous (a view of contiguous inputs; flashinfer's kv_layout="HND")."""
    return t[0].contiguous()


def from_nhd(t: torch.Tensor) -> torch.Tensor:
    """(L, H, Ev) -> (1, H, L, Ev), a view."""
    return t.transpose(0, 1).unsqueeze(0)


# The query-head group sizes flashinfer's decode kernel is compiled for (DISPATCH_GQA_GROUP_SIZE); the prefill
# kernel takes any other, so a decode call with one of those goes there instead.
DECODE_GROUPS = frozenset({1, 2, 3, 4, 6, 8})


def uses_decode(inp: SDPAInputs) -> bool:
    """Lq = 1 with every key visible (a top-left causal row 0 sees key 0 only), and a query-head group size the
    decode kernel is built for: its case."""
    q, k = inp.query, inp.key
    return (q.shape[2] == 1 and inp.attn_mask is None and (not inp.is_causal or k.shape[2] == 1)
            and q.shape[1] // max(k.shape[1], 1) in DECODE_GROUPS)


def shared_mask(inp: SDPAInputs) -> torch.Tensor | None:
    """The boolean (Lq, Lk) mask every head and batch shares (ANDed with the top-left causal triangle), or None
    when nothing is masked; flashinfer's custom_mask has this shape and meaning (True = attend)."""
    lq, lk = inp.query.shape[2], inp.key.shape[2]
    keep = None if inp.attn_mask is None else mask4(inp.attn_mask)[0, 0].expand(lq, lk)
    if inp.is_causal:
        tril = torch.ones(lq, lk, dtype=torch.bool, device=inp.query.device).tril()
        keep = tril if keep is None else keep & tril
    return keep


def prefill_kwargs(inp: SDPAInputs) -> dict:
    """single_prefill_with_kv_cache's keyword arguments: causal=True for a square causal call with no mask (where
    top-left and bottom-right alignment agree), else the dense shared mask as custom_mask."""
    lq, lk = inp.query.shape[2], inp.key.shape[2]
    kwargs: dict = {"kv_layout": "HND", "sm_scale": inp.softmax_scale}
    if inp.is_causal and inp.attn_mask is None and lq == lk:
        return kwargs | {"causal": True}
    mask = shared_mask(inp)
    return kwargs if mask is None else kwargs | {"custom_mask": mask.contiguous()}


def uses_ragged(inp: SDPAInputs) -> bool:
    """A `padding` decode batch that the ragged batch kernel states exactly: no top-left causal on top (it would cut
    the bottom-right rows further), and every row's KV length n_b >= Lq (no query without keys, whose zeros
    flashinfer does not promise)."""
    s = inp.structure
    return (s is not None and s.kind == "padding" and not inp.is_causal and len(s.lengths) == inp.query.shape[0]
            and min(s.lengths) >= inp.query.shape[2])


def ragged_batch(inp: SDPAInputs) -> tuple[torch.Tensor, ...]:
    """(q, k, v, qo_indptr, kv_indptr) for BatchPrefillWithRaggedKVCacheWrapper, NHD (copies, made in prepare): the
    B·Lq queries row after row, (B·Lq, Hq, E); the first n_b keys and values of each row b, (sum n_b, Hkv, E);
    where each request starts, int32 on the inputs' device."""
    b, lq, lengths, device = inp.query.shape[0], inp.query.shape[2], inp.structure.lengths, inp.query.device
    q = inp.query.transpose(1, 2).reshape(b * lq, inp.query.shape[1], inp.query.shape[3])
    k, v = (torch.cat([t[row, :, :n].transpose(0, 1) for row, n in enumerate(lengths)]) for t in (inp.key, inp.value))
    qo_indptr = torch.arange(0, (b + 1) * lq, lq, dtype=torch.int32, device=device)
    kv_indptr = torch.tensor((0, *lengths), dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
    return q, k, v, qo_indptr, kv_indptr


def mapping_reasons(inp: SDPAInputs) -> list[str]:
    """What this call asks that flashinfer's kernels, as called here, cannot express (pure checks, no GPU needed)."""
    out = []
    e, ev = inp.query.shape[-1], inp.value.shape[-1]
    if ev != e:
        out.append(f"Ev={ev} != E={e} (flashinfer's kernels, as called here, take one head dim for q, k and v)")
    if uses_ragged(inp):
        return out
    if inp.query.shape[0] != 1:
        out.append(f"batch B={inp.query.shape[0]}: flashinfer's single_prefill/single_decode take one request (B=1); "
                   "a batch runs as a `padding` decode batch (ragged keys), with every KV length >= Lq and no "
                   "top-left causal")
    m = None if inp.attn_mask is None else mask4(inp.attn_mask)
    if m is not None and (m.shape[0] != 1 or m.shape[1] != 1):
        out.append(f"attn_mask {tuple(inp.attn_mask.shape)} varies over batch or heads (custom_mask is one "
                   "(Lq, Lk) mask for every head)")
    return out


def jit_toolchain(environ: Mapping[str, str] = os.environ) -> tuple[dict[str, str], list[str]]:
    """What flashinfer's JIT build needs here: (environment settings to add, reasons it cannot build). CUDA_HOME
    (or CUDA_PATH) must hold bin/nvcc, else torch's search for the toolkit (nvcc on PATH, /usr/local/cuda) is
    used; ninja must be on PATH, else the `ninja` package's BIN_DIR is put first on it."""
    settings, reasons = {}, []
    home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    if not home:
        from torch.utils import cpp_extension

        home = cpp_extension.CUDA_HOME or ""
        if home:
            settings["CUDA_HOME"] = home
    if not home or not os.access(Path(home) / "bin" / "nvcc", os.X_OK):
        where = f"CUDA_HOME={home} has no bin/nvcc" if home else "no CUDA toolkit found (CUDA_HOME, nvcc on PATH)"
        reasons.append(f"flashinfer builds its kernels on first use with nvcc: {where}")
    path = environ.get("PATH", "")
    if shutil.which("ninja", path=path) is None:
        try:
            import ninja  # the PyPI package ships the binary
        except ImportError:
            reasons.append("flashinfer builds its kernels on first use with ninja: not on PATH (pip install ninja)")
        else:
            settings["PATH"] = os.pathsep.join([ninja.BIN_DIR, *([path] if path else [])])
    return settings, reasons


@functools.lru_cache(maxsize=None)
def _toolchain_reasons() -> tuple[str, ...]:
    """jit_toolchain's reasons, its settings made in this process (once, before flashinfer is imported)."""
    settings, reasons = jit_toolchain()
    os.environ.update(settings)
    return tuple(reasons)


@functools.lru_cache(maxsize=None)
def _flashinfer() -> tuple[ModuleType | None, str]:
    if torch.cuda.is_available():
        _toolchain_reasons()  # flashinfer reads CUDA_HOME when it is imported
    try:
        import flashinfer
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.startswith("flashinfer"):
            return None, "flashinfer is not installed (pip install flashinfer-python)"
        return None, f"flashinfer failed to import: {type(exc).__name__}: {exc}"
    return flashinfer, ""


@register
class FlashInfer(Implementation):
    name = "flashinfer"
    description = "flashinfer single prefill/decode (B = 1), a padded decode batch as ragged keys (optional; CUDA)"
    support = Support(devices=frozenset({"cuda"}), dtypes=frozenset({torch.float16, torch.bfloat16}),
                      max_head_dim=256, masks=frozenset({"none", "bool"}), backward=False,
                      head_dim_multiple=64)  # its kernels are built for these; its FA2 prefill checks none and
                                             # faults or returns wrong values on others

    def not_supported_reasons(self, inp: SDPAInputs) -> list[str]:
        reasons = super().not_supported_reasons(inp)
        lib, missing = _flashinfer()
        if inp.is_empty:
            reasons.append("a dimension of size 0: flashinfer is not called on empty inputs")
        return reasons if lib is not None else [missing, *reasons]  # "not installed" first, wherever it runs

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        return [*_toolchain_reasons(), *mapping_reasons(inp)]

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        return declare_compiles(self._closure(inp))  # the first call builds (or loads) its kernel: set-up

    def _closure(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        lib, _ = _flashinfer()
        if uses_ragged(inp):
            return self._ragged(inp, lib)
        q, k, v = to_nhd(inp.query), to_hnd(inp.key), to_hnd(inp.value)
        if uses_decode(inp):
            q1, scale = q[0].contiguous(), inp.softmax_scale  # (Hq, E): the one query token

            return lambda: from_nhd(lib.single_decode_with_kv_cache(q1, k, v, kv_layout="HND",
                                                                      sm_scale=scale).unsqueeze(0))
        kwargs = prefill_kwargs(inp)
        if "custom_mask" in kwargs:  # packed to bits here: flashinfer would pack a custom_mask on every call
            mask = kwargs.pop("custom_mask")
            kwargs["packed_custom_mask"] = lib.packbits(mask.reshape(-1), bitorder="little")
        return lambda: from_nhd(lib.single_prefill_with_kv_cache(q, k, v, **kwargs))

    @staticmethod
    def _ragged(inp: SDPAInputs, lib: ModuleType) -> Callable[[], torch.Tensor]:
        """The padded decode batch: planned once here (host work and copies), `run` alone in the timed call."""
        q, k, v, qo_indptr, kv_indptr = ragged_batch(inp)
        b, hq, lq, e = inp.query.shape
        workspace = torch.empty(128 << 20, dtype=torch.uint8, device=q.device)
        wrapper = lib.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD")
        wrapper.plan(qo_indptr, kv_indptr, hq, inp.key.shape[1], e, causal=True, sm_scale=inp.softmax_scale,
                     q_data_type=q.dtype, kv_data_type=k.dtype)
        return lambda: wrapper.run(q, k, v).unflatten(0, (b, lq)).transpose(1, 2)

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()
