#!/bin/bash
# real A/A comparisons of two environments with the same torch (CI's preset and implementations), every option at
# its default: the extra rounds' budget is the one for two environments
cd /work/main
for seed in 103 104; do
  .tox/py/bin/python -m sdpa_impls continuous --base-env /root/.cache/sdpa-bench/envs/a5730415df4b52ea/bin/python \
    --head-env /work/main/.tox/py/bin/python --seed $seed \
    --keep-runs /tmp/envaa-auto/runs-$seed --json /tmp/envaa-auto/verdict-$seed.json \
    > /tmp/envaa-auto/out-$seed.txt 2> /tmp/envaa-auto/err-$seed.txt
  echo "seed $seed exit $?" >> /tmp/envaa-auto/exits.txt
done
