"""flex: torch.compile'd torch.nn.attention.flex_attention, its block mask built from the call's mask before any call."""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ..compilation import compiler_reasons, declare_compiles
from ..masks import Structure
from ..protocol import Implementation, SDPAInputs, Support, empty_attention
from ..registry import register
from ..torchver import needs_torch
from .torch_sdpa import mask4

ModFn = Callable[..., torch.Tensor]
# The first release this file runs on: its CPU check (torch._inductor.kernel.flex.flex_cpu) is there from 2.9 on, and
# on a CPU 2.7.0 and 2.8.0 did not compile flex's forward ("flex_attention is not an OpOverload"); 2.9.0 did. Newer
# than the suite's compile step needs (torchver.COMPILATION).
FLEX = "2.9"


@functools.lru_cache(maxsize=None)
def compiled_flex() -> Callable[..., torch.Tensor]:
    """flex_attention compiled once per process for static shapes (`dynamic=False`: each case gets kernels for its
    own shape, as attention-gym's benchmarks compile it). Without compilation flex runs an unfused reference."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def dense_view(inp: SDPAInputs) -> torch.Tensor:
    """The call's mask as a (B, Hq, Lq, Lk) view (stride 0 over broadcast dims: no copy) that a mod indexes. A mask of
    one stored element (a scalar, or one expanded by the caller) is first copied along the keys: torch's CPU flex
    lowering failed on a buffer that is all stride 0."""
    q, m = inp.query, mask4(inp.attn_mask)
    if all(stride == 0 or size == 1 for stride, size in zip(m.stride(), m.shape)):
        m = m.reshape(-1)[:1].reshape(1, 1, 1, 1).expand(1, 1, 1, inp.key.shape[2]).contiguous()
    return m.expand(q.shape[0], q.shape[1], q.shape[2], inp.key.shape[2])


def structure_mod(structure: Structure, device: torch.device) -> tuple[ModFn, bool]:
    """A bool mask structure's rule as a native mask_mod (attention-gym writes these masks the same way), so the
    kernel never reads the dense mask; and whether it varies with the batch row. Same rule as `Structure.dense`."""
    if structure.kind == "window":
        w = structure.spec.param
        return (lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx) & (q_idx - kv_idx < w)), False
    if structure.kind == "prefix":
        p = structure.spec.param
        return (lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx) | (kv_idx < p)), False
    if structure.kind == "documents":
        doc = torch.repeat_interleave(torch.arange(len(structure.lengths), device=device),
                                      torch.tensor(structure.lengths, device=device))  # (L,) document of each token
        return (lambda b, h, q_idx, kv_idx: (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)), False
    n = torch.tensor(structure.lengths, device=device)  # padding: each row's KV length, queries at its end
    lq = structure.lq
    return (lambda b, h, q_idx, kv_idx: (kv_idx < n[b]) & (kv_idx < n[b] - lq + q_idx + 1)), True


def mask_mod(inp: SDPAInputs) -> tuple[ModFn | None, int | None, int | None]:
    """(mask_mod, B, H) for `create_block_mask`: top-left causal `q_idx >= kv_idx`, a boolean mask read from the
    dense tensor (or a bool structure's native rule, when the call names one), or both ANDed; B and H are None
    where the mask does not vary with them (one block map serves all). None when nothing is masked."""
    if inp.structure is not None and inp.structure.is_bool:
        rule, per_batch = structure_mod(inp.structure, inp.query.device)
        b = inp.query.shape[0] if per_batch else None
        if not inp.is_causal:
            return rule, b, None
        return (lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx) & rule(b, h, q_idx, kv_idx)), b, None
    keep = dense_view(inp) if inp.mask_kind == "bool" else None
    if keep is None and not inp.is_causal:
        return None, None, None
    b = inp.query.shape[0] if keep is not None and inp.attn_mask.dim() == 4 and inp.attn_mask.shape[0] > 1 else None
    h = (inp.query.shape[1] if keep is not None and inp.attn_mask.dim() >= 3 and inp.attn_mask.shape[-3] > 1
         else None)

    if keep is None:
        def causal(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202  (flex's mask_mod signature)
            return q_idx >= kv_idx

        return causal, b, h
    if not inp.is_causal:
        def masked(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
            return keep[b, h, q_idx, kv_idx]

        return masked, b, h

    def causal_masked(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
        return (q_idx >= kv_idx) & keep[b, h, q_idx, kv_idx]

    return causal_masked, b, h


def block_mask(inp: SDPAInputs) -> object | None:
    """flex's BlockMask of the call (which tiles are empty, full or partial), built on the inputs' device from
    `mask_mod`; None when nothing is masked."""
    from torch.nn.attention.flex_attention import create_block_mask

    mod, b, h = mask_mod(inp)
    if mod is None:
        return None
    return create_block_mask(mod, b, h, inp.query.shape[2], inp.key.shape[2], device=inp.query.device)


def score_mod(inp: SDPAInputs) -> ModFn | None:
    """A float mask as flex's score_mod: the dense bias added to each (already scaled) score."""
    if inp.mask_kind != "float":
        return None
    bias = dense_view(inp)

    def add_bias(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
        return score + bias[b, h, q_idx, kv_idx]

    return add_bias


def _no_grad_where_off(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q, k and v as flex gets them: detached under torch.no_grad (or inference mode), where no backward can follow;
    torch's flex refuses inputs that require grad on the CPU ("does not support backward") even there."""
    return tensors if torch.is_grad_enabled() else tuple(t.detach() for t in tensors)


def torch_reasons(inp: SDPAInputs) -> list[str]:
    """What torch's own flex_attention checks say about this call, with torch's version: its device and backward
    check (`_validate_device`), and on CPU whether its compiled CPU kernel exists on this platform."""
    from torch.nn.attention import flex_attention as flex

    out: list[str] = []
    try:
        flex._validate_device(*_no_grad_where_off(inp.query, inp.key, inp.value))
    except (NotImplementedError, ValueError) as exc:
        out.append(f"{exc} (torch {torch.__version__})")
    if inp.query.device.type == "cpu":
        from torch._inductor.kernel.flex.flex_cpu import check_cpu_supported

        if not check_cpu_supported():
            out.append(f"torch.compile on current platform is not supported for CPU (torch {torch.__version__}: "
                       "flex_attention's CPU kernel needs AVX2, not macOS)")
    return out


@register
class Flex(Implementation):
    name = "flex"
    description = ("torch.compile(flex_attention): block mask from the mask (causal, bool; a window, documents, "
                   "prefix or padding natively), float masks as a score_mod, GQA native; compiled before the first "
                   "sample")
    support = Support()
    compiles = True  # its prepared closures compile on their first call (bench.compilation)

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        if inp.is_empty or inp.query.shape[-1] == 0:
            return []  # answered without flex (its kernels take E >= 1), as torch answers it
        too_old = needs_torch(FLEX, "flex_attention compiled for this suite") or compiler_reasons(inp.query.device)
        if too_old:
            return too_old
        return torch_reasons(inp)

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        if inp.is_empty:
            return lambda: empty_attention(inp)
        if inp.query.shape[-1] == 0:  # every score is 0, each row averages the values it sees: naive's answer
            from .naive import Naive
            return lambda: Naive().forward(inp)
        flex = compiled_flex()  # its kernels read a last dim of stride other than 1 (an input expanded from
        q, k, v = (t if t.stride(-1) == 1 or t.shape[-1] <= 1 else t.contiguous()  # (…, L, 1)) wrongly: made dense
                   for t in (inp.query, inp.key, inp.value))
        kwargs = {"score_mod": score_mod(inp), "block_mask": block_mask(inp), "scale": inp.softmax_scale,
                  "enable_gqa": q.shape[1] != k.shape[1]}
        return declare_compiles(lambda: flex(*_no_grad_where_off(q, k, v), **kwargs))  # as grad mode is at the call

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()
