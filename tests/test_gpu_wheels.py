"""tools/gpu_wheels.py without a network: small wheels built here, fetched by the real pip from a local folder,
packed into call-sized folders, cut and joined again byte for byte; and gpu_checks.sh's dry run of the peers step."""
from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import gpu_wheels as gw  # noqa: E402

KiB = 1024


def make_wheel(folder: Path, name: str, version: str = "1.0", requires: tuple[str, ...] = (),
               payload: int = 1000, seed: int = 0) -> Path:
    """A real (installable) pure-Python wheel of `payload` random bytes, stored uncompressed so its size is known."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    files = {
        f"{name.replace('-', '_')}/__init__.py": b"",
        f"{name.replace('-', '_')}/data.bin": random.Random(seed).randbytes(payload),
        f"{dist}.dist-info/METADATA": "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                                                *(f"Requires-Dist: {r}\n" for r in requires)]).encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{dist}.dist-info/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, data in files.items():
            z.writestr(n, data)
        z.writestr(f"{dist}.dist-info/RECORD", record)
    return path


def test_what_the_gpu_machine_has_is_data_and_compared_by_project_name() -> None:
    assert gw.on_gpu_machine("Typing_Extensions") and gw.on_gpu_machine("torch")
    assert gw.on_gpu_machine("nvidia-cudnn-cu13") and gw.on_gpu_machine("nvidia-cuda-runtime")
    assert not gw.on_gpu_machine("nvidia-cudnn-frontend") and not gw.on_gpu_machine("xformers")
    assert gw.present_conflict("torch>=2.10") == ""
    assert "torch 2.11.0" in gw.present_conflict("torch<2.10")
    assert gw.wheel_project("Nvidia_Cudnn_Frontend-1.32.0-cp312-cp312-manylinux_2_28_x86_64.whl") == \
        ("nvidia-cudnn-frontend", "1.32.0")
    with pytest.raises(ValueError, match="not a wheel file name"):
        gw.wheel_project("xformers-0.0.35.tar.gz")


def test_download_follows_dependencies_and_leaves_out_what_the_gpu_machine_has(tmp_path: Path) -> None:
    """The real pip, from a local folder (--no-index): alpha needs beta, torch, a CUDA library and packages that
    apply only elsewhere or with an extra; beta needs alpha back and an extra of gamma."""
    index = tmp_path / "index"
    make_wheel(index, "alpha", requires=("beta>=1", "torch>=2.10", "nvidia-cublas", "numpy",
                                         "old; python_version < '3.10'", "extra-only; extra == 'docs'",
                                         "winonly; sys_platform == 'win32'"))
    make_wheel(index, "beta", "1.2", requires=("alpha", "gamma[fast]", "torch<2.10"))
    make_wheel(index, "gamma", requires=("delta; extra == 'fast'",))
    make_wheel(index, "delta")
    got, notes = gw.download(["alpha"], tmp_path / "got", ["--no-index", f"--find-links={index}"])
    assert [gw.wheel_project(w.name)[0] for w in got] == ["alpha", "beta", "delta", "gamma"]
    assert notes == ["torch<2.10 does not hold for the GPU machine's torch 2.11.0"]
    assert sorted(p.name for p in (tmp_path / "got").iterdir()) == sorted(w.name for w in got)


@pytest.fixture
def wheels(tmp_path: Path) -> list[Path]:
    sizes = {"small": 20, "mid": 45, "mid2": 40, "big": 230, "tiny": 3}
    return [make_wheel(tmp_path / "src", name, payload=kib * KiB, seed=i)
            for i, (name, kib) in enumerate(sizes.items())]


def test_packing_respects_the_limit_and_a_cut_wheel_joins_byte_for_byte(tmp_path: Path, wheels: list[Path]) -> None:
    limit = 100 * KiB
    dest = tmp_path / ".whl"
    folders = gw.pack(wheels, dest, limit, ["small==1.0", "big==1.0"])
    assert folders == sorted(dest.glob("call-*"), key=lambda p: int(p.name[5:]))
    for folder in folders:
        assert gw.folder_bytes(folder) <= limit, folder
        assert (folder / "requirements.txt").read_text() == "small==1.0\nbig==1.0\n"
    whole = [p.name for p in dest.glob("call-*/*.whl")]
    assert sorted(whole) == sorted(w.name for w in wheels if w.stat().st_size < limit - 8 * KiB)
    big = next(w for w in wheels if w.name.startswith("big-"))
    parts = sorted(dest.glob(f"call-*/{big.name}.part-*"), key=lambda p: p.name)
    assert len(parts) == 3 and len({p.parent for p in parts}) == 3  # each part in its own call
    manifests = list(dest.glob(f"call-*/{big.name}.parts.json"))
    assert {m.parent for m in manifests} == {p.parent for p in parts}

    assert gw.join(dest) == ([dest / "joined" / big.name], [])
    assert (dest / "joined" / big.name).read_bytes() == big.read_bytes()
    assert gw.join(dest)[1] == []  # a second join finds it there, checked
    with zipfile.ZipFile(dest / "joined" / big.name) as z:  # and it is a wheel again
        assert z.testzip() is None


def test_join_names_a_part_not_carried_yet_and_one_that_changed(tmp_path: Path, wheels: list[Path]) -> None:
    dest = tmp_path / ".whl"
    gw.pack(wheels, dest, 100 * KiB, ["big"])
    parts = sorted(dest.glob("call-*/big-*.part-*"), key=lambda p: p.name)
    kept = parts[1].read_bytes()
    parts[1].unlink()
    joined, problems = gw.join(dest)
    assert joined == [] and len(problems) == 1
    assert f"{parts[1].parent.name}/{parts[1].name}" in problems[0] and "not here yet" in problems[0]
    parts[1].write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))
    assert "sha256 of " + parts[1].name in gw.join(dest)[1][0]
    assert not (dest / "joined" / parts[1].name.split(".part-")[0]).exists()


def test_the_join_command_there_reassembles_and_says_so(tmp_path: Path, wheels: list[Path]) -> None:
    dest = tmp_path / ".whl"
    gw.pack(wheels, dest, 100 * KiB, ["big"])
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_wheels.py"), "join", "--dest", str(dest)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "joined" in done.stdout and "big-1.0-py3-none-any.whl" in done.stdout
    want = hashlib.sha256(next(w for w in wheels if w.name.startswith("big-")).read_bytes()).hexdigest()
    assert gw.sha256(dest / "joined" / "big-1.0-py3-none-any.whl") == want


def test_pack_defaults_to_what_the_tree_leaves_of_a_call(tmp_path: Path, wheels: list[Path]) -> None:
    """Without --limit-mib a folder holds 60 MiB less the working tree (git's tracked and unignored files)."""
    tree = gw.tree_bytes()
    assert 1 << 20 < tree < gw.CALL_MIB << 20
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert tree >= sum((ROOT / p).stat().st_size for p in listed if (ROOT / p).is_file())
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_wheels.py"), "pack", str(tmp_path / "src"),
                           "--dest", str(tmp_path / "out")], capture_output=True, text=True, check=True)
    assert len(list((tmp_path / "out").glob("call-*"))) == 1 and "carried by call-1: " in done.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_wheels.py"), "pack", str(tmp_path / "src"),
                          "--dest", str(tmp_path / "out"), "--limit-mib", "0.001"], capture_output=True, text=True)
    assert bad.returncode != 0 and "cannot hold anything" in bad.stderr


def test_the_dry_run_prints_the_peers_step_and_what_each_call_carries(tmp_path: Path, wheels: list[Path]) -> None:
    dest = tmp_path / ".whl"
    gw.pack(wheels, dest, 100 * KiB, ["big"])
    env = os.environ | {"PYTHON": sys.executable, "GPU_CHECKS_STEPS": "peers:200,llm", "GPU_CHECKS_DRY_RUN": "1",
                        "GPU_CHECKS_WHEELS": str(dest)}
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu_checks.sh"), str(tmp_path / "out"), "500"],
                          capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    lines = done.stdout.splitlines()
    assert lines[:2] == ["peers 200s", "llm 285s"], done.stdout
    tree = gw.tree_bytes() / gw.MiB
    carried = [line.strip() for line in lines if line.startswith("  carried by call-")]
    assert len(carried) == 4 == len(list(dest.glob("call-*")))
    for line, folder in zip(carried, sorted(dest.glob("call-*"), key=lambda p: int(p.name[5:]))):
        mib = gw.folder_bytes(folder) / gw.MiB
        assert line == f"carried by {folder.name}: {tree + mib:.1f} MiB (the tree {tree:.1f} + .whl/{folder.name} " \
                       f"{mib:.1f})"
    assert not (tmp_path / "out").exists()


def test_a_copy_of_the_tree_without_git_says_the_tree_is_not_measured(tmp_path: Path, wheels: list[Path]) -> None:
    """Where the tree travels without .git (the GPU machine's copy) the sizes name only the wheel folders, and
    packing asks for an explicit limit."""
    (tmp_path / "copy" / "tools").mkdir(parents=True)
    script = tmp_path / "copy" / "tools" / "gpu_wheels.py"
    script.write_bytes((ROOT / "tools" / "gpu_wheels.py").read_bytes())
    env = os.environ | {"GIT_CEILING_DIRECTORIES": str(tmp_path)}  # no repository above the copy either
    dest = tmp_path / ".whl"
    gw.pack(wheels, dest, 100 * KiB, ["big"])
    done = subprocess.run([sys.executable, str(script), "sizes", "--dest", str(dest)], capture_output=True, text=True,
                          env=env, check=True)
    assert done.stdout.splitlines()[0] == (f"carried by call-1: the tree (not measured: no git checkout here) + "
                                           f".whl/call-1 {gw.folder_bytes(dest / 'call-1') / gw.MiB:.1f} MiB")
    bad = subprocess.run([sys.executable, str(script), "pack", str(tmp_path / "src"), "--dest", str(dest)],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and "give --limit-mib" in bad.stderr
