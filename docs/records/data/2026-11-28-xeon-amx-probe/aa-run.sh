P=/work/main/.tox/py/bin/python
for i in 1 2 3; do
  for v in old new; do
    cd /tmp/$v && $P -m sdpa_impls continuous HEAD HEAD --seed $((800 + i)) --json /tmp/ana/ev/$v-$i.json --keep-runs /tmp/ana/ev/$v-$i > /tmp/ana/ev/$v-$i.out 2> /tmp/ana/ev/$v-$i.err
    echo "$v $i exit $?" >> /tmp/ana/ev/log
  done
done
