#!/usr/bin/env bash
# The CUDA checks in one go, within a time budget: tests/test_gpu.py, then the `serve` and `masks` presets on the
# GPU. Each step has its own deadline; a sweep stopped by its deadline keeps its finished points and writes its
# report (SIGTERM), and `sdpa-bench run --resume --out DIR` continues it later.
#
#   tools/gpu_checks.sh OUTDIR [SECONDS] [--impl NAME ...]
#
# OUTDIR receives: env.txt (GPU, driver, versions), test_gpu.log and test_gpu.xml, and serve.tar / masks.tar (each
# sweep's folder: results.json, report.md, CSV). SECONDS (a whole number, default 540; may be left out before
# --impl) goes 40 % to the tests, then half of what is left to serve, the rest to masks. --impl (repeatable) narrows
# the masks sweep; the serve sweep and the tests run every implementation. Where the steps wrote more than the 8 files
# a device call brings back, or one over 15 MiB (it brings back 16 at most), all but env.txt end in
# OUTDIR/checks.tar.gz, cut in pieces of 15 MiB where it is larger (tools/gpu_bundle.sh).
#
# GPU_CHECKS_STEPS picks other steps, in order (default tests,serve,masks). A step written NAME:S gets S seconds
# (at most what is left); the others share the rest, each an equal share of what is left when it starts (the
# tests 40 %, the last step all of it less 15 s). E.g. GPU_CHECKS_STEPS=variants:150,gate in 590 s: the
# variants 150 s, then the gate's evidence 425 s (365 s of trials). GPU_CHECKS_DRY_RUN=1 prints each step's
# seconds (every step taking all of its share) and the gate step's command, and stops, on any machine.
#   llm    the llm preset with naive, chunked, fused, compiled, flex and torch_sdpa: device time and host overhead
#          per point, and the plain-PyTorch implementations against compiled, flex and torch_sdpa (llm.tar)
#   speed  the same but naive on llm-long: L = 8192 and 16384 (speed-long.tar)
#          GPU_CHECKS_IMPLS (comma-separated) replaces both steps' implementations, e.g. fused,compiled,torch_sdpa
#   asv    this tree installed into the interpreter (pip, no dependencies), the asv suite on the llm preset (fused,
#          torch_sdpa) through it as an existing environment, then `sdpa-bench run` of the same points, each timed
#          (asv.log; asv-results.json, asv's results file, whose durations give each setup_cache's seconds); needs a
#          git checkout, and asv installed or carried as a wheel (else skipped, saying so)
#          GPU_CHECKS_ASV_PRESET and GPU_CHECKS_ASV_IMPLS replace the preset and implementations, e.g. gpu-history
#          and torch_sdpa: 44 points
#   gate   tools/gpu_gate_evidence.py within the step's share (gate.log, gate-results.jsonl); its trials are kept in
#          $GPU_CHECKS_WORK/gate, so a second call on the same machine adds to them. GPU_CHECKS_GATE_ARGS replaces
#          the evidence script's --continuous-args (default "--adaptive-budget 30", so name an --adaptive-budget
#          too), e.g. "--rounds 3 --adaptive-budget 0": shorter trials; give a second call the same
#          GPU_CHECKS_GATE_SCENARIOS (e.g. "aa") picks the scenarios, in order, as the script's --scenarios. A share
#          under a minute plus one trial (about 130 s before one has run here) starts none and passes its time on
#   variants  tools/fused_variants.py, bf16 then fp16: the elementwise passes of fused's and chunked's CUDA plan
#          against their alternatives, then whole calls with CAST_FIRST (and in fp16 SOFTMAX_FROM_HALF) off and on
#          (variants.log, variants-*.json)
#   peers  the peer libraries from carried wheels (tools/gpu_wheels.py): joins the cut ones, installs each
#          requirement of GPU_CHECKS_WHEELS/call-*/requirements.txt (default .whl) with pip --no-index from those
#          folders, then a fifth of the step to the peer tests of tests/test_gpu.py and the rest to the llm preset
#          with xformers, cudnn_frontend, flash_attn, flash_attn4, flashinfer, torch_sdpa and torch_sdpa_cudnn (peers.log,
#          peers-llm.tar)
#   plugin the plug-in `sdpa-bench quickstart` writes, installed beside this tree: its own test against fp64 on the
#          CPU and CUDA, then the gpu-ci preset with it and torch_sdpa on CUDA (plugin.log, plugin.tar)
# The dry run also prints what each call carries: the working tree plus one wheel folder, in MiB.
set -u
out=${1:?usage: tools/gpu_checks.sh OUTDIR [SECONDS] [--impl NAME ...]}
shift
total=540
case ${1:-} in
  '' | --*) ;;
  *[!0-9]*) echo "tools/gpu_checks.sh: SECONDS must be a whole number of seconds, not '$1'" >&2; exit 2 ;;
  *) total=$1; shift ;;
esac
py=${PYTHON:-python3}
start=$SECONDS
work=${GPU_CHECKS_WORK:-/tmp/sdpa-gpu-checks}
wheels=${GPU_CHECKS_WHEELS:-.whl}
export PYTHONUNBUFFERED=1

steps=${GPU_CHECKS_STEPS:-tests,serve,masks}
IFS=, read -r -a todo <<<"$steps"
names=() fixed=()  # each step's name, and its seconds where NAME:S fixes them (else 0)
for step in "${todo[@]}"; do  # a misspelt step stops here, before any GPU time is spent on the others
  name=${step%%:*} secs=0
  [ "$name" != "$step" ] && secs=${step#*:}
  case $secs in
    '' | *[!0-9]*) echo "tools/gpu_checks.sh: step '$step': the seconds after ':' must be a whole number" >&2
                   exit 2 ;;
  esac
  case $name in
    tests | serve | masks | llm | speed | asv | gate | variants | peers | plugin) ;;
    *) echo "tools/gpu_checks.sh: unknown step '$name' (tests, serve, masks, llm, speed, asv, gate, variants," \
            "peers, plugin)" >&2
       exit 2 ;;
  esac
  names+=("$name") fixed+=("$secs")
done

simulated=0  # the dry run's seconds of steps it did not run
# a real gate trial's seconds before one has run (tools/gpu_gate_evidence.py): a gate step given less starts none
FIRST_TRIAL_S=$(sed -n 's/^FIRST_TRIAL_S = \([0-9]*\).*/\1/p' "$(dirname "$0")/gpu_gate_evidence.py")
left() { echo $(( total - (SECONDS - start) - simulated )); }
stamp() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - start))s] $*"; }

run_tests() {  # seconds
  stamp "tests/test_gpu.py (${1}s)"
  # flex and compiled compile on the CPU: pytest-xdist workers, where it is installed, share that out
  local parallel=()
  if "$py" -c "import xdist" 2>/dev/null; then
    local workers=$(( $(nproc) / 3 )); parallel=(-n $(( workers < 1 ? 1 : workers > 6 ? 6 : workers )))
  fi
  timeout -k 15 "$1" "$py" -m pytest tests/test_gpu.py -q -rfEs -p no:cacheprovider \
    "${parallel[@]}" --junitxml="$out/test_gpu.xml" >"$out/test_gpu.log" 2>&1
  echo "exit $?" >>"$out/test_gpu.log"
  tail -n 40 "$out/test_gpu.log"
}

sweep() {  # name seconds [run args...]
  local name=$1 secs=$2; shift 2
  stamp "$name (${secs}s)"
  timeout -k 20 "$secs" "$py" -m sdpa_impls run --device cuda --out "$work/$name" --resume \
    --no-plots "$@" >"$work/$name.log" 2>&1
  echo "exit $?" >>"$work/$name.log"
  tail -n 25 "$work/$name.log"
  cp "$work/$name.log" "$work/$name/run.log" 2>/dev/null
  [ -d "$work/$name" ] && tar -C "$work" -cf "$out/$name.tar" "$name"
}

wheel_links() {  # -> links (the caller's): pip's --find-links for each folder of carried wheels, joined and call-N
  links=(); local d
  for d in "$wheels"/joined "$wheels"/call-*; do [ -d "$d" ] && links+=(--find-links "$d"); done
}

asv_step() {  # seconds: half to asv, half to sdpa-bench run of the same points, each with its wall time
  local impls=${GPU_CHECKS_ASV_IMPLS:-fused,torch_sdpa} preset=${GPU_CHECKS_ASV_PRESET:-llm} t0
  stamp "asv on the $preset preset ($impls), then sdpa-bench run of the same points (${1}s)"
  if ! "$py" -c "import asv" 2>/dev/null; then  # not in the GPU image: from the carried wheels, where they are
    local links; wheel_links
    [ ${#links[@]} -gt 0 ] && PIP_BREAK_SYSTEM_PACKAGES=${PIP_BREAK_SYSTEM_PACKAGES:-1} "$py" -m pip install \
      --no-index --quiet "${links[@]}" asv >"$out/asv.log" 2>&1
    if ! "$py" -c "import asv" 2>/dev/null; then
      echo "asv step skipped: asv is not installed for $py, and no wheel of it is carried in $wheels" \
        "(python tools/gpu_wheels.py download asv)" | tee -a "$out/asv.log"
      return
    fi
  fi
  "$py" -m asv machine --yes >/dev/null 2>&1
  t0=$SECONDS
  # an existing environment measures the sdpa-bench installed in it, and asv's benchmark processes drop PYTHONPATH:
  # this tree is installed there first (a copy, no dependencies), as the asv guide asks of GPU users
  PIP_BREAK_SYSTEM_PACKAGES=${PIP_BREAK_SYSTEM_PACKAGES:-1} "$py" -m pip install --quiet --no-deps --no-index \
    --no-build-isolation "$PWD" >>"$out/asv.log" 2>&1
  echo "pip install of this tree: exit $? in $(( SECONDS - t0 )) s" >>"$out/asv.log"
  t0=$SECONDS
  SDPA_BENCH_PRESET=$preset SDPA_BENCH_IMPLS=$impls timeout -k 10 $(( $1 / 2 )) "$py" -m asv run --show-stderr \
    --environment "existing:$(command -v "$py")" --set-commit-hash "$(git rev-parse HEAD)" >>"$out/asv.log" 2>&1
  echo "asv run: exit $? in $(( SECONDS - t0 )) s" >>"$out/asv.log"
  # asv's results file: its "durations" give each setup_cache's seconds, the measurement's share of asv's time
  local res; res=$(ls -t .asv/results/*/*-existing-*.json 2>/dev/null | head -n 1)
  [ -n "$res" ] && cp "$res" "$out/asv-results.json"
  t0=$SECONDS
  timeout -k 10 $(( $1 / 2 )) "$py" -m sdpa_impls run --preset "$preset" --device cuda --impl "$impls" \
    --out "$work/asv-pair" --overwrite --no-plots >>"$out/asv.log" 2>&1
  echo "sdpa-bench run: exit $? in $(( SECONDS - t0 )) s" >>"$out/asv.log"
  tail -n 4 "$out/asv.log"
}

gate_args() {  # seconds -> gate_cmd: the evidence script's command line (GPU_CHECKS_GATE_ARGS: each real
  # continuous's arguments, its --continuous-args)
  gate_cmd=("$py" tools/gpu_gate_evidence.py --out "$work/gate" --budget $(( $1 - 60 )))
  if [ -n "${GPU_CHECKS_GATE_ARGS:-}" ]; then gate_cmd+=(--continuous-args "$GPU_CHECKS_GATE_ARGS"); fi
  if [ -n "${GPU_CHECKS_GATE_SCENARIOS:-}" ]; then gate_cmd+=(--scenarios "$GPU_CHECKS_GATE_SCENARIOS"); fi
}

gate() {  # seconds
  stamp "tools/gpu_gate_evidence.py (${1}s)"
  gate_args "$1"
  timeout -k 30 $(( $1 + 60 )) "${gate_cmd[@]}" >"$out/gate.log" 2>&1
  echo "exit $?" >>"$out/gate.log"
  cp "$work/gate/results.jsonl" "$out/gate-results.jsonl" 2>/dev/null
  tail -n 30 "$out/gate.log"
}

variants() {  # seconds: half to each dtype
  stamp "tools/fused_variants.py (${1}s)"
  : >"$out/variants.log"
  for dt in bf16 fp16; do
    timeout -k 10 $(( $1 / 2 )) "$py" tools/fused_variants.py --device cuda --dtype $dt \
      --out "$out/variants-$dt.json" >>"$out/variants.log" 2>&1
    echo "$dt: exit $?" >>"$out/variants.log"
  done
  tail -n 30 "$out/variants.log"
}

peers() {  # seconds: install the carried wheels, then a fifth to the peer tests, the rest to the llm preset
  local links=() r t0=$SECONDS secs
  stamp "peers: wheels carried in $wheels, the peer tests, the llm preset with the peers (${1}s)"
  "$py" tools/gpu_wheels.py join --dest "$wheels" >"$out/peers.log" 2>&1
  echo "join: exit $?" >>"$out/peers.log"
  wheel_links
  # one requirement at a time: a wheel still missing a part stops its own set, not the others. PIP_BREAK_SYSTEM_PACKAGES
  # (default 1; 0 refuses) lets pip install into a system Python that its distribution manages (PEP 668)
  while IFS= read -r r; do
    [ -n "$r" ] || continue
    PIP_BREAK_SYSTEM_PACKAGES=${PIP_BREAK_SYSTEM_PACKAGES:-1} "$py" -m pip install --no-index --quiet "${links[@]}" \
      "$r" >>"$out/peers.log" 2>&1
    echo "pip install $r: exit $?" >>"$out/peers.log"
  done < <(cat "$wheels"/call-*/requirements.txt 2>/dev/null | sort -u)
  "$py" -m sdpa_impls list >>"$out/peers.log" 2>&1  # each peer's reason where it still cannot run
  secs=$(( $1 - (SECONDS - t0) ))
  timeout -k 10 $(( secs / 5 )) "$py" -m pytest tests/test_gpu.py -q -rfEs -p no:cacheprovider \
    -k "xformers or flash or cudnn or flashinfer or peer" >>"$out/peers.log" 2>&1
  echo "peer tests: exit $?" >>"$out/peers.log"
  tail -n 30 "$out/peers.log"
  secs=$(( $1 - (SECONDS - t0) - 5 ))
  # a library that hangs on a point (a JIT build waiting on a lock) fails that point, and the other peers still run
  [ "$secs" -gt 20 ] && sweep peers-llm "$secs" --preset llm --budget 0.1 --max-reps 50 \
    --point-timeout $(( secs / 2 > 90 ? secs / 2 : 90 )) \
    --impl xformers,cudnn_frontend,flash_attn,flash_attn4,flashinfer,torch_sdpa,torch_sdpa_cudnn
}

plugin() {  # seconds: a third to the quickstart plug-in's own test (CPU and CUDA), the rest to a gpu-ci sweep with it
  local t0=$SECONDS dir=$work/plugin-src site=$work/plugin-site repo=$PWD secs
  stamp "plugin: quickstart's plug-in, its test on CPU and CUDA, then gpu-ci with torch_sdpa (${1}s)"
  rm -rf "$dir" "$site"
  "$py" -m sdpa_impls quickstart --name gpu_plugin --dest "$dir" >"$out/plugin.log" 2>&1
  PIP_BREAK_SYSTEM_PACKAGES=${PIP_BREAK_SYSTEM_PACKAGES:-1} "$py" -m pip install --quiet --no-deps --no-index \
    --no-build-isolation --target "$site" "$dir" >>"$out/plugin.log" 2>&1
  echo "quickstart and install: exit $?" >>"$out/plugin.log"
  (cd "$dir" && PYTHONPATH="$site:$repo" timeout -k 10 $(( $1 / 3 )) "$py" -m pytest -q -rfEs \
    -p no:cacheprovider tests) >>"$out/plugin.log" 2>&1
  echo "plug-in test: exit $?" >>"$out/plugin.log"
  secs=$(( $1 - (SECONDS - t0) - 5 ))
  [ "$secs" -gt 20 ] && PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" sweep plugin "$secs" --preset gpu-ci \
    --impl gpu_plugin,torch_sdpa --budget 0.1 --max-reps 50
  cat "$work/plugin.log" >>"$out/plugin.log" 2>/dev/null
  tail -n 20 "$out/plugin.log"
}

share_of() {  # step index -> its seconds, from what is left now
  local i=$1 j reserved=0 rest=0 free
  # what the steps after this one have fixed is kept for them; the unfixed ones share the rest
  for (( j = i + 1; j < ${#names[@]}; j++ )); do
    reserved=$(( reserved + fixed[j] )); [ "${fixed[$j]}" -eq 0 ] && rest=$(( rest + 1 ))
  done
  free=$(( $(left) - reserved ))
  if [ "${fixed[$i]}" -gt 0 ]; then
    echo $(( fixed[i] < $(left) - 15 ? fixed[i] : $(left) - 15 ))
  elif [ "$rest" -eq 0 ]; then
    echo $(( free - 15 ))
  elif [ "${names[$i]}" = tests ]; then
    echo $(( free * 40 / 100 ))
  else
    echo $(( free / (rest + 1) ))
  fi
}

if [ "${GPU_CHECKS_DRY_RUN:-0}" = 1 ]; then
  # the plan as if each step took all of its share: the dry run's own seconds (a busy machine may cross one or two
  # before the last step) are no step's, and would make the plan differ from run to run
  left() { echo $(( total - simulated )); }
  for i in "${!names[@]}"; do
    share=$(share_of "$i"); [ "$share" -lt 1 ] && share=0
    echo "${names[$i]} ${share}s"
    if [ "${names[$i]}" = gate ]; then
      gate_args "$share"; echo "  $(printf '%q ' "${gate_cmd[@]}")"
      [ $(( share - 60 )) -lt "$FIRST_TRIAL_S" ] && echo "  its --budget is under one real trial" \
        "(about ${FIRST_TRIAL_S} s before one has run): it would start none and pass its time on"
    fi
    simulated=$(( simulated + share ))
  done
  files=1  # env.txt, and what each step writes to OUTDIR
  for n in "${names[@]}"; do case $n in variants) files=$(( files + 3 )) ;; tests | gate | peers | plugin | asv)
    files=$(( files + 2 )) ;; *) files=$(( files + 1 )) ;; esac; done
  [ "$files" -gt 8 ] && echo "  $files files in OUTDIR, more than the 8 a call brings back: all but env.txt" \
    "would come back in checks.tar.gz (tools/gpu_bundle.sh)"
  "$py" tools/gpu_wheels.py sizes --dest "$wheels" | sed 's/^/  /'  # what each call carries: tree + one folder
  exit 0
fi

if ! "$py" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "tools/gpu_checks.sh: $py's torch sees no CUDA device: nothing to check here (steps $steps within ${total} s)" >&2
  exit 2
fi

mkdir -p "$out" "$work"
{
  stamp "environment"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.sm,temperature.gpu --format=csv
  # the same record a sweep's report keeps (sdpa_impls.bench.machine); each peer's reasons are in the reports
  "$py" -c "import json; from sdpa_impls.bench.machine import machine_info; print(json.dumps(machine_info('cuda'), indent=1))"
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

for i in "${!names[@]}"; do
  share=$(share_of "$i")
  if [ "$share" -lt 1 ]; then
    stamp "${names[$i]}: no time left, skipped"
    continue
  fi
  case ${names[$i]} in
    tests) run_tests "$share" ;;
    serve) sweep serve "$share" --preset serve --budget 0.1 --max-reps 50 ;;
    masks) sweep masks "$share" --preset masks --budget 0.05 --max-reps 50 "$@" ;;
    llm) sweep llm "$share" --preset llm --impl "${GPU_CHECKS_IMPLS:-naive,chunked,fused,compiled,flex,torch_sdpa}" \
           --budget 0.1 --max-reps 50 ;;
    speed) sweep speed-long "$share" --preset llm-long \
             --impl "${GPU_CHECKS_IMPLS:-chunked,fused,compiled,flex,torch_sdpa}" --budget 0.1 --max-reps 30 ;;
    asv) asv_step "$share" ;;
    gate) gate "$share" ;;
    variants) variants "$share" ;;
    peers) peers "$share" ;;
    plugin) plugin "$share" ;;
  esac
done
bash "$(dirname "$0")/gpu_bundle.sh" "$out"  # at most 8 files come back from a call
stamp "done"
