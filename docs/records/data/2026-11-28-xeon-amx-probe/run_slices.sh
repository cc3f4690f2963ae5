cd /work/main
for i in $(seq 1 16); do
  for k in 1 4 8; do
    echo "{\"k\": $k, \"i\": $i, \"v\": $(OMP_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864 .tox/py/bin/python /tmp/ana/slices.py $k)}" >> /tmp/ana/slices.jsonl
  done
done
