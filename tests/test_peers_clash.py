"""flash-attn-4 beside xformers and FlashAttention-2, on the CPU with small stand-in packages in throwaway folders:
flash-attn-4 installs `flash_attn` as a namespace package holding only `cute`, and xformers' fmha/flash.py imports
`flash_attn.flash_attn_interface` whenever find_spec("flash_attn") finds one. Every layout is probed in one
interpreter, each on sys.path in turn with the modules and caches of the one before cleared."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# xformers' import of FlashAttention-2 as fmha/flash.py does it (find_spec, import, version check), and nothing else
XFORMERS = {
    "xformers/__init__.py": "__version__ = '0.0.0+stand-in'\n",
    "xformers/ops/__init__.py": "from . import fmha\n",
    "xformers/ops/fmha/__init__.py": textwrap.dedent("""\
        import importlib.util

        FLASH_VERSION = "0.0.0"
        if importlib.util.find_spec("flash_attn"):
            import flash_attn
            import flash_attn.flash_attn_interface

            FLASH_VERSION = flash_attn.__version__
            if not "2.7.1" <= FLASH_VERSION <= "2.8.4":
                raise ImportError(f"Requires Flash-Attention version >=2.7.1,<=2.8.4 but got {FLASH_VERSION}.")


        def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None):
            raise RuntimeError("a stand-in: no kernel here")
        """),
}
CUTE = {"flash_attn/cute/__init__.py": "def flash_attn_func(q, k, v, **kwargs):\n    raise RuntimeError('stand-in')\n"}


def fa2(version: str) -> dict[str, str]:
    return {"flash_attn/__init__.py": f"__version__ = '{version}'\nfrom .flash_attn_interface import flash_attn_func\n",
            "flash_attn/flash_attn_interface.py": "def flash_attn_func(q, k, v, **kwargs):\n    raise RuntimeError\n"}


PROBE = textwrap.dedent("""\
    import importlib, json, sys
    import torch
    import sdpa_impls
    from sdpa_impls.impls import flash_attn as fa, xformers as xf

    def probe(folder, order):
        sys.path.insert(0, folder)
        for name in [m for m in sys.modules if m.split(".")[0] in ("xformers", "flash_attn")]:
            del sys.modules[name]
        importlib.invalidate_caches()
        xf._fmha.cache_clear()
        fa._load.cache_clear()
        if order == "cute-first":
            import flash_attn.cute
            before = sys.modules["flash_attn"]
        fmha, why = xf._fmha()
        t = torch.ones(1, 1, 2, 8)
        out = {"namespace": fa.fa4_namespace_only(), "fmha": fmha is not None, "why": why,
               "flash_version": getattr(fmha, "FLASH_VERSION", None),
               "reasons": {n: sdpa_impls.get(n).unsupported_reasons(t, t, t)
                           for n in ("xformers", "flash_attn", "flash_attn4")}}
        if order == "cute-first":
            out["same_module_after"] = sys.modules["flash_attn"] is before
        try:
            import flash_attn.cute
            out["cute_after"] = flash_attn.cute.flash_attn_func.__module__
        except ImportError as exc:
            out["cute_after"] = str(exc)
        sys.path.remove(folder)
        return out

    print(json.dumps([probe(folder, order) for folder, order in json.loads(sys.argv[1])]))
    """)


def site(folder: Path, *layouts: dict[str, str]) -> Path:
    for layout in layouts:
        for name, text in layout.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
    return folder


def run(folder: Path | None, *args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(f) for f in (folder, ROOT) if f])}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT)


LAYOUTS = {  # name: (packages, order)
    "fa4": ((XFORMERS, CUTE), "plain"), "fa4-cute-first": ((XFORMERS, CUTE), "cute-first"),
    "fa2-and-cute": ((XFORMERS, fa2("2.8.3"), CUTE), "plain"), "fa2-refused": ((XFORMERS, fa2("2.9.0")), "plain"),
    "none": (({"empty/__init__.py": ""},), "plain"),
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """Every layout probed in one interpreter (one import of torch), each in its own folder on sys.path in turn."""
    base = tmp_path_factory.mktemp("peers")
    folders = {name: site(base / name, *layouts) for name, (layouts, _) in LAYOUTS.items()}
    done = run(None, "-c", PROBE, json.dumps([[str(folders[n]), order] for n, (_, order) in LAYOUTS.items()]))
    assert done.returncode == 0, done.stderr
    return {n: (folders[n], got) for n, got in zip(LAYOUTS, json.loads(done.stdout.splitlines()[-1]))}


def test_the_stand_ins_reproduce_the_clash(tmp_path: Path) -> None:
    folder = site(tmp_path, XFORMERS, CUTE)
    done = run(folder, "-c", "import xformers.ops")
    assert done.returncode == 1 and "No module named 'flash_attn.flash_attn_interface'" in done.stderr


@pytest.mark.parametrize("layout", ["fa4", "fa4-cute-first"])
def test_xformers_imports_beside_flash_attn_4_alone_and_flash_attn_says_what_it_found(probed: dict,
                                                                                      layout: str) -> None:
    folder, got = probed[layout]
    assert got["namespace"] == str(folder / "flash_attn")
    assert got["fmha"] and got["why"] == "" and got["flash_version"] == "0.0.0"  # as without FlashAttention-2
    assert got["reasons"]["xformers"] == ["device=cpu (supported: cuda)"]
    assert got["reasons"]["flash_attn"][0] == (
        "flash_attn here is flash-attn-4's namespace package (FlashAttention-4, only flash_attn.cute: flash_attn4 "
        f"runs it), not FlashAttention-2 (pip install flash-attn); it spans {folder / 'flash_attn'}")
    assert got["reasons"]["flash_attn4"] == ["device=cpu (supported: cuda)", "dtype=fp32 (supported: bf16, fp16)"]
    assert got["cute_after"] == "flash_attn.cute"  # flash_attn is importable again after xformers' import
    if layout == "fa4-cute-first":
        assert got["same_module_after"]


def test_flash_attention_2_with_cute_inside_is_not_hidden_from_xformers(probed: dict) -> None:
    _, got = probed["fa2-and-cute"]
    assert got["namespace"] == "" and got["fmha"] and got["flash_version"] == "2.8.3"
    assert not any("not installed" in r or "namespace" in r for rs in got["reasons"].values() for r in rs)


def test_a_flash_attention_2_xformers_refuses_is_named_in_its_reason(probed: dict) -> None:
    folder, got = probed["fa2-refused"]
    assert not got["fmha"]
    assert got["why"] == ("xformers failed to import: ImportError: Requires Flash-Attention version >=2.7.1,<=2.8.4 "
                          "but got 2.9.0. (xformers' fmha/flash.py imports FlashAttention-2 from the installed "
                          f"flash_attn package: {folder / 'flash_attn' / '__init__.py'})")
    assert got["reasons"]["xformers"][0] == got["why"]


def test_without_any_of_them_each_says_it_is_not_installed(probed: dict) -> None:
    _, got = probed["none"]
    assert not got["fmha"] and got["why"] == "xformers is not installed (pip install xformers)"
    assert got["reasons"]["xformers"][0] == got["why"]
    assert got["reasons"]["flash_attn"][0] == "flash_attn is not installed (pip install flash-attn)"
    assert got["reasons"]["flash_attn4"][0] == "flash_attn.cute is not installed (pip install --pre flash-attn-4)"
