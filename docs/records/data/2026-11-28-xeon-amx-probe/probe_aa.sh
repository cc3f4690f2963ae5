P=/work/main/.tox/py/bin/python
for i in 1 2; do
  cd /work/main && $P -m sdpa_impls continuous --base-env $P --head-env $P --rounds 8 --adaptive-budget 0 --seed $((910 + i)) --keep-runs /tmp/ana/pa/new-$i --json /tmp/ana/pa/new-$i.json > /tmp/ana/pa/new-$i.out 2>&1
  cd /tmp/old && $P -m sdpa_impls continuous HEAD HEAD --rounds 8 --adaptive-budget 0 --seed $((920 + i)) --keep-runs /tmp/ana/pa/old-$i --json /tmp/ana/pa/old-$i.json > /tmp/ana/pa/old-$i.out 2>&1
done
echo done > /tmp/ana/pa/done
