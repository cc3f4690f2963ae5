#!/usr/bin/env bash
# The CUDA checks in one go, within a time budget: tests/test_gpu.py, then the `serve` and `masks` presets on the
# GPU. Each step has its own deadline; a sweep stopped by its deadline keeps its finished points and writes its
# report (SIGTERM), and `sdpa-bench run --resume --out DIR` continues it later.
#
#   tools/gpu_checks.sh OUTDIR [SECONDS] [--impl NAME ...]
#
# OUTDIR receives: env.txt (GPU, driver, versions), test_gpu.log and test_gpu.xml, and serve.tar / masks.tar (each
# sweep's folder: results.json, report.md, CSV). SECONDS (default 540) goes 40 % to the tests, then 30 % of what is
# left to serve, the rest to masks. --impl (repeatable) narrows the masks sweep; the serve sweep and the tests run every
# implementation.
set -u
out=${1:?usage: tools/gpu_checks.sh OUTDIR [SECONDS] [--impl NAME ...]}
total=${2:-540}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
py=${PYTHON:-python3}
start=$SECONDS
work=${GPU_CHECKS_WORK:-/tmp/sdpa-gpu-checks}
mkdir -p "$work"
export PYTHONUNBUFFERED=1

if ! "$py" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "tools/gpu_checks.sh: $py's torch sees no CUDA device: nothing to check here" >&2
  exit 2
fi

left() { echo $(( total - (SECONDS - start) )); }
stamp() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - start))s] $*"; }

{
  stamp "environment"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.sm,temperature.gpu --format=csv
  # the same record a sweep's report keeps (sdpa_impls.bench.machine); each peer's reasons are in the reports
  "$py" -c "import json; from sdpa_impls.bench.machine import machine_info; print(json.dumps(machine_info('cuda'), indent=1))"
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

tests_s=$(( $(left) * 40 / 100 ))
stamp "tests/test_gpu.py (${tests_s}s)"
# flex and compiled compile on the CPU: pytest-xdist workers, where it is installed, share that out
parallel=()
if "$py" -c "import xdist" 2>/dev/null; then
  workers=$(( $(nproc) / 3 )); parallel=(-n $(( workers < 1 ? 1 : workers > 6 ? 6 : workers )))
fi
timeout -k 15 "$tests_s" "$py" -m pytest tests/test_gpu.py -q -rfEs -p no:cacheprovider \
  "${parallel[@]}" --junitxml="$out/test_gpu.xml" >"$out/test_gpu.log" 2>&1
echo "exit $?" >>"$out/test_gpu.log"
tail -n 40 "$out/test_gpu.log"

sweep() {  # name seconds [run args...]
  local name=$1 secs=$2; shift 2
  stamp "--preset $name (${secs}s)"
  timeout -k 20 "$secs" "$py" -m sdpa_impls run --preset "$name" --device cuda --out "$work/$name" --resume \
    --no-plots "$@" >"$work/$name.log" 2>&1
  echo "exit $?" >>"$work/$name.log"
  tail -n 25 "$work/$name.log"
  cp "$work/$name.log" "$work/$name/run.log" 2>/dev/null
  [ -d "$work/$name" ] && tar -C "$work" -cf "$out/$name.tar" "$name"
}
sweep serve $(( $(left) * 30 / 100 )) --budget 0.1 --max-reps 50
sweep masks $(( $(left) - 15 )) --budget 0.05 --max-reps 50 "$@"
stamp "done"
