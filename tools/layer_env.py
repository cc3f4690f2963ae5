"""Layer a tox environment on the test environment, so that `tox -e docs` and `tox -e continuous` do not install
torch a second time.

A `.pth` line adds the test environment's site-packages (where `tox -e py` installed torch and this package,
editable) behind this environment's own; what is here first wins. Without a test environment, the package with
the named extra and its dependencies are installed here instead (slower: torch is the bulk of it).

    python tools/layer_env.py TEST_ENV_DIR EXTRA
"""
from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def site_packages(env: Path) -> Path | None:
    found = sorted(env.glob("lib/python*/site-packages")) + sorted(env.glob("Lib/site-packages"))
    return found[0] if found else None


def main(test_env: str, extra: str) -> int:
    here = Path(sysconfig.get_paths()["purelib"])
    theirs = site_packages(Path(test_env))
    pth = here / "sdpa-bench-test-env.pth"
    if theirs is not None and (theirs / "torch").is_dir():
        pth.write_text(f"{theirs}\n", encoding="utf-8")
        print(f"{Path(sys.prefix).name} environment layered on {theirs}")
        return 0
    pth.unlink(missing_ok=True)
    print(f"no test environment at {test_env}: installing the package and its dependencies here")
    return subprocess.call([sys.executable, "-m", "pip", "install", "-e", f"{ROOT}[{extra}]"])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.rsplit("\n\n", 1)[1].strip())
    sys.exit(main(*sys.argv[1:]))
