# pair.py is docs/records/data/2026-11-28-xeon-bf16-pairs/pair.py; A and B are two worktrees of one commit.
# 8 rounds, one tree (A) on both sides: one process timing both copies in turn (pair.py), two processes alive at
# once timing in turn (twin.py), the same pinned to one vCPU (TWIN_PIN=0). Nothing else runs.
PY=/work/main/.tox/py/bin/python
export OMP_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864
for i in $(seq 8); do
  $PY pair.py /tmp/twin/A /tmp/twin/B >> aa-pair.jsonl
  $PY twin.py /tmp/twin/A /tmp/twin/B >> aa-twin.jsonl
  TWIN_PIN=0 $PY twin.py /tmp/twin/A /tmp/twin/B >> aa-twin-pinned.jsonl
  echo round $i $(date +%T)
done
