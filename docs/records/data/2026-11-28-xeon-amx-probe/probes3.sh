cd /work/main
for i in $(seq 1 20); do OMP_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864 .tox/py/bin/python /tmp/ana/probes3.py >> /tmp/ana/probes3.jsonl; done
echo done >> /tmp/ana/probes3.done
