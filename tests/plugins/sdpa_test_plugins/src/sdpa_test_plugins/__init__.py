"""Test plug-ins for sdpa_impls, registered through the `sdpa_impls` entry-point group (never imported by the suite itself).

- test_perturbed: naive's answer plus 0.25 (beyond every dtype's tolerance) — must be caught as wrong, never timed.
- test_tunable: naive repeated; SDPA_TUNABLE_SLOWDOWN=1.25 does 25 % more work,
  SDPA_TUNABLE_EXTRA_BYTES=N holds N more bytes at the peak. Used to prove the gate catches regressions.
"""
from __future__ import annotations

import os

import torch

import sdpa_impls
from sdpa_impls import Implementation, SDPAInputs, Support

BASE_REPEATS = 4  # the unit of work; a slowdown of 1.25 runs 5 repeats instead of 4


class Perturbed(Implementation):
    name = "test_perturbed"
    description = "naive + 0.25: a wrong result"
    support = Support()

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        out = sdpa_impls.get("naive")(inp.query, inp.key, inp.value, inp.attn_mask, 0.0, inp.is_causal,
                                      inp.scale, inp.enable_gqa)
        return out + 0.25


class Tunable(Implementation):
    name = "test_tunable"
    description = "naive, repeated; its cost and memory are set from the environment"
    support = Support()

    def forward(self, inp: SDPAInputs) -> torch.Tensor:
        slowdown = float(os.environ.get("SDPA_TUNABLE_SLOWDOWN", "1"))
        extra = int(os.environ.get("SDPA_TUNABLE_EXTRA_BYTES", "0"))
        repeats = max(1, round(BASE_REPEATS * slowdown))
        naive = sdpa_impls.get("naive")
        ballast = torch.ones(extra, dtype=torch.uint8, device=inp.query.device) if extra else None
        out = None
        for _ in range(repeats):
            out = naive(inp.query, inp.key, inp.value, inp.attn_mask, 0.0, inp.is_causal, inp.scale, inp.enable_gqa)
        del ballast
        return out
