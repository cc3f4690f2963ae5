export OMP_NUM_THREADS=1 SDPA_CONTINUOUS_REPEAT=1 SDPA_CONTINUOUS_NO_CEILINGS=1 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
P=/work/main/.tox/py/bin/python
ARGS="-q -p no:cacheprovider -p pytest_benchmark.plugin -p sdpa_bench_pytest --benchmark-only --pyargs sdpa_impls.suite.test_sdpa --noconftest --sdpa-preset ci --sdpa-impl torch_sdpa --sdpa-impl naive --sdpa-impl chunked --sdpa-impl fused --benchmark-max-time=0.1 --benchmark-min-rounds=8 --benchmark-timer=time.process_time"
cd /tmp
for i in 1 2 3 4; do
  for v in old main; do
    src=/tmp/old; [ $v = main ] && src=/work/main
    s=$(date +%s.%N); PYTHONPATH=$src $P -m pytest $ARGS --benchmark-json=/tmp/ana/cost-$v-$i.json --benchmark-save-data >/dev/null 2>&1; rc=$?
    echo "$v $i rc $rc $(echo "$(date +%s.%N) - $s" | bc)"
  done
done
