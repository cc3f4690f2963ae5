"""cudnn_frontend: cuDNN's fused attention through the cuDNN frontend's graph API (`import cudnn`, the
nvidia-cudnn-frontend package); optional, CUDA only.

Per case, one forward graph (`sdpa`) and, where the inputs require grad, one backward graph (`sdpa_backward`, fed the
forward's softmax statistics) are validated and built when the closure is prepared, and kept for the next closure of
the same case: building may compile kernels, so it is set-up, never timed; the timed call only executes them. cuDNN
takes our (B, H, L, E) tensors as they are (it reads their strides), K/V with fewer heads (GQA) too. Causal is
cuDNN's diagonal band aligned top-left, as ours; where cuDNN refuses that graph, the same mask aligned bottom-right
(`diagonal_band`). A bool or float mask goes in as an additive bias of its own broadcast shape, built in prepare
(`bias_of`). The pure parts (band, bias, rows without keys) are checked on CPU tensors.
"""
from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from types import ModuleType

import torch

from ..protocol import Implementation, SDPAInputs, Support
from ..registry import register
from .torch_sdpa import mask4

HALF = frozenset({torch.float16, torch.bfloat16})
ALIGNMENTS = ("TOP_LEFT", "BOTTOM_RIGHT")
MAX_PLANS = 32  # built graphs kept (each holds its workspace on the device)


def diagonal_band(is_causal: bool, lq: int, lk: int, alignment: str) -> tuple[str, int] | None:
    """(alignment, right bound) of cuDNN's diagonal band that is our top-left causal mask, None where that alignment
    cannot state it; ("", 0) without causal. cuDNN keeps key j for query i where j <= i + right (TOP_LEFT) or
    j <= i + Lk - Lq + right (BOTTOM_RIGHT); ours keeps j <= i, so bottom-right needs right = Lq - Lk >= 0."""
    if not is_causal:
        return "", 0
    if alignment == "TOP_LEFT":
        return "TOP_LEFT", 0
    return ("BOTTOM_RIGHT", lq - lk) if lq >= lk else None


def bias_of(inp: SDPAInputs) -> torch.Tensor | None:
    """The mask as cuDNN's additive bias: (B or 1, Hq or 1, Lq, Lk), contiguous, in the inputs' dtype; a bool mask
    is 0 where it attends and -inf elsewhere. None without a mask."""
    if inp.attn_mask is None:
        return None
    q, lk = inp.query, inp.key.shape[2]
    m = mask4(inp.attn_mask)  # (B or 1, H or 1, Lq or 1, Lk or 1)
    shape = (m.shape[0], m.shape[1], q.shape[2], lk)
    if m.dtype == torch.bool:
        bias = torch.zeros(shape, dtype=q.dtype, device=q.device).masked_fill_(~m.expand(shape), float("-inf"))
        return bias
    return m.to(q.dtype).expand(shape).contiguous()


def rows_without_keys(inp: SDPAInputs) -> bool:
    """Whether a query row has every key masked (the mask, with top-left causal), where our answer is zeros. Reads
    one value back from the device: for the reasons, never inside a timed call."""
    if inp.attn_mask is None:
        return False  # top-left causal always keeps key 0
    m = mask4(inp.attn_mask)
    keep = m if m.dtype == torch.bool else m > float("-inf")
    lq, lk = inp.query.shape[2], inp.key.shape[2]
    keep = keep.expand(*keep.shape[:2], lq, lk)
    if inp.is_causal:
        keep = keep & torch.ones(lq, lk, dtype=torch.bool, device=keep.device).tril()
    return bool((~keep.any(-1)).any())


@functools.lru_cache(maxsize=None)
def _cudnn() -> tuple[ModuleType | None, str]:
    try:
        import cudnn
    except Exception as exc:  # ImportError, or a build that does not load here
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.split(".")[0] == "cudnn":
            return None, "cudnn frontend is not installed (pip install nvidia-cudnn-frontend)"
        return None, f"cudnn frontend failed to import: {type(exc).__name__}: {exc}"
    try:  # the frontend loads libcudnn itself (site-packages' nvidia/cudnn, LD_LIBRARY_PATH or the loaded one)
        version = cudnn.backend_version()
    except RuntimeError as exc:
        return None, f"cudnn frontend {_version(cudnn)} found no cuDNN library to load ({exc})"
    if version < 8903:  # the fused attention graphs (sdpa, sdpa_backward) arrived in cuDNN 8.9.3
        return None, f"cuDNN {version} is older than 8.9.3, the first with fused attention graphs"
    return cudnn, ""


def _version(lib: ModuleType) -> str:
    return str(getattr(lib, "__version__", "?"))


@functools.lru_cache(maxsize=None)
def _handle(lib: ModuleType, device_index: int) -> object:
    with torch.cuda.device(device_index):
        return lib.create_handle()


def _shape(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), t.dtype


class Plan:
    """The built graphs of one case (forward, and backward where `train`), for tensors of the shapes and strides they
    were built for; `forward` and `backward` only execute them, on the current stream."""

    def __init__(self, lib: ModuleType, inp: SDPAInputs, bias: torch.Tensor | None, band: tuple[str, int]) -> None:
        q, k, v = inp.query, inp.key, inp.value
        b, hq, lq, _ = q.shape
        self.lib, self.train, self.device = lib, inp.needs_grad, q.device
        self.handle = _handle(lib, q.device.index if q.device.index is not None else torch.cuda.current_device())
        self.o_like = torch.empty((b, hq, lq, v.shape[-1]), dtype=q.dtype, device=q.device)  # (B, Hq, Lq, Ev)
        self.stats_shape = (b, hq, lq, 1)
        dt = {torch.float16: lib.data_type.HALF, torch.bfloat16: lib.data_type.BFLOAT16}[q.dtype]
        options = {"attn_scale": inp.softmax_scale}
        if band[0]:
            options |= {"diagonal_alignment": getattr(lib.diagonal_alignment, band[0]),
                        "diagonal_band_right_bound": band[1]}

        def graph(sources: dict[str, torch.Tensor]) -> tuple[object, dict[str, object]]:
            g = lib.pygraph(io_data_type=dt, intermediate_data_type=lib.data_type.FLOAT,
                            compute_data_type=lib.data_type.FLOAT, handle=self.handle)
            return g, {n: g.tensor_like(t.detach()) for n, t in sources.items()}

        def output(t: object, like: torch.Tensor, float32: bool = False) -> None:
            t.set_output(True).set_dim(list(like.shape)).set_stride(list(like.stride()))
            if float32:
                t.set_data_type(lib.data_type.FLOAT)

        inputs = {"q": q, "k": k, "v": v} | ({"bias": bias} if bias is not None else {})
        self.fwd, self.t = graph(inputs)
        o, stats = self.fwd.sdpa(name="sdpa", q=self.t["q"], k=self.t["k"], v=self.t["v"], bias=self.t.get("bias"),
                                 generate_stats=self.train, **options)
        stats_like = torch.empty(self.stats_shape, dtype=torch.float32, device=q.device)
        output(o, self.o_like)
        self.t["o"] = o
        if self.train:
            output(stats, stats_like, float32=True)
            self.t["stats"] = stats
        self._build(self.fwd)
        size = self.fwd.get_workspace_size()
        if self.train:
            self.bwd, self.tb = graph(inputs | {"o": self.o_like, "dO": self.o_like, "stats": stats_like})
            dq, dk, dv = self.bwd.sdpa_backward(name="sdpa_backward", q=self.tb["q"], k=self.tb["k"], v=self.tb["v"],
                                                o=self.tb["o"], dO=self.tb["dO"], stats=self.tb["stats"],
                                                bias=self.tb.get("bias"), **options)
            for t, like, name in ((dq, q, "dq"), (dk, k, "dk"), (dv, v, "dv")):
                output(t, like)
                self.tb[name] = t
            self._build(self.bwd)
            size = max(size, self.bwd.get_workspace_size())
        self.workspace = torch.empty(size, dtype=torch.uint8, device=q.device)

    def _build(self, g: object) -> None:
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([self.lib.heur_mode.A, self.lib.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()

    def _execute(self, g: object, pack: dict) -> None:
        self.lib.set_stream(self.handle, torch.cuda.current_stream(self.device).cuda_stream)  # a capture's too
        g.execute(pack, self.workspace, handle=self.handle)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        o = torch.empty_like(self.o_like)
        stats = torch.empty(self.stats_shape, dtype=torch.float32, device=q.device) if self.train else None
        pack = {self.t["q"]: q, self.t["k"]: k, self.t["v"]: v, self.t["o"]: o}
        if bias is not None:
            pack[self.t["bias"]] = bias
        if stats is not None:
            pack[self.t["stats"]] = stats
        self._execute(self.fwd, pack)
        return o, stats

    def backward(self, saved: tuple[torch.Tensor | None, ...], do: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v, o, stats, bias = saved
        if do.stride() != o.stride():  # the graph was built for a dO laid out as the output
            do = torch.empty_like(o).copy_(do)
        grads = {"dq": torch.empty_like(q), "dk": torch.empty_like(k), "dv": torch.empty_like(v)}
        sources = {"q": q, "k": k, "v": v, "o": o, "dO": do, "stats": stats, "bias": bias} | grads
        self._execute(self.bwd, {self.tb[n]: t for n, t in sources.items() if t is not None})
        return grads["dq"], grads["dk"], grads["dv"]


class _Attention(torch.autograd.Function):
    """The forward graph, with the backward graph as its gradient."""

    @staticmethod
    def forward(ctx, q, k, v, bias, plan):  # noqa: ANN001, ANN205 (autograd's signature)
        o, stats = plan.forward(q, k, v, bias)
        ctx.save_for_backward(q, k, v, o, stats, bias)
        ctx.plan = plan
        return o

    @staticmethod
    def backward(ctx, do):  # noqa: ANN001, ANN205
        return (*ctx.plan.backward(ctx.saved_tensors, do), None, None)


_PLANS: collections.OrderedDict[tuple, Plan | str] = collections.OrderedDict()


def plan_for(lib: ModuleType, inp: SDPAInputs, bias: torch.Tensor | None) -> Plan | str:
    """The built plan of this case (kept for the next closure of it), or cuDNN's reason for refusing it: top-left
    causal first, then the same mask aligned bottom-right."""
    q, k, v = inp.query, inp.key, inp.value
    key = (_shape(q), _shape(k), _shape(v), None if bias is None else _shape(bias), q.device, inp.is_causal,
           inp.softmax_scale, inp.needs_grad)
    if key in _PLANS:
        _PLANS.move_to_end(key)
        return _PLANS[key]
    refused = []
    for alignment in ALIGNMENTS:
        band = diagonal_band(inp.is_causal, q.shape[2], k.shape[2], alignment)
        if band is None or (refused and not band[0]):
            continue  # no such band, or no causal: nothing else to try
        try:
            plan: Plan | str = Plan(lib, inp, bias, band)
            break
        except (getattr(lib, "cudnnGraphNotSupportedError", RuntimeError), RuntimeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            refused.append(f"{band[0] or 'no causal'}: {first}" if inp.is_causal else first)
    else:
        plan = "cuDNN refuses this graph (" + "; ".join(refused) + ")"
    _PLANS[key] = plan
    while len(_PLANS) > MAX_PLANS:
        _PLANS.popitem(last=False)
    return plan


@register
class CudnnFrontend(Implementation):
    name = "cudnn_frontend"
    description = "cuDNN fused attention through the cuDNN frontend's graphs, built once per case (optional; sm80+)"
    support = Support(devices=frozenset({"cuda"}), dtypes=HALF, max_head_dim=256, head_dim_multiple=8)

    def not_supported_reasons(self, inp: SDPAInputs) -> list[str]:
        reasons = super().not_supported_reasons(inp)
        lib, missing = _cudnn()
        if inp.is_empty:
            reasons.append("a dimension of size 0: cuDNN is not called on empty inputs")
        return reasons if lib is not None else [missing, *reasons]  # "not installed" first, wherever it runs

    def library_reasons(self, inp: SDPAInputs) -> list[str]:
        lib, _ = _cudnn()
        if lib is None or inp.is_empty:
            return []  # both said by not_supported_reasons
        cap = torch.cuda.get_device_capability(inp.query.device)
        if cap < (8, 0):
            return [f"compute capability sm{cap[0]}{cap[1]} (cuDNN's fused attention runs on sm80 or newer)"]
        if rows_without_keys(inp):
            return ["a query row with every key masked: ours is zeros there, which cuDNN's kernels do not promise"]
        plan = plan_for(lib, inp, bias_of(inp))
        return [plan] if isinstance(plan, str) else []

    def prepare_inputs(self, inp: SDPAInputs) -> Callable[[], torch.Tensor]:
        lib, _ = _cudnn()
        bias = bias_of(inp)
        plan = plan_for(lib, inp, bias)
        q, k, v = inp.query, inp.key, inp.value
        if inp.needs_grad:
            return lambda: _Attention.apply(q, k, v, bias, plan)
        return lambda: plan.forward(q, k, v, bias)[0]

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        return self.prepare_inputs(inp)()
