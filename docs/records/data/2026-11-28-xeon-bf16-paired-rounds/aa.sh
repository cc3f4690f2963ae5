#!/bin/bash
# A/A comparisons of HEAD with itself, ci preset, defaults; paired and separate in turn
cd /work/main
for i in 1 2; do
  for mode in paired separate; do
    extra=""; [ $mode = separate ] && extra="--separate-processes"
    /usr/bin/time -f "%e s" .tox/py/bin/sdpa-bench continuous HEAD HEAD --seed $((700+i)) $extra \
      --keep-runs /tmp/ev/$mode-$i --json /tmp/ev/$mode-$i.json > /tmp/ev/$mode-$i.txt 2> /tmp/ev/$mode-$i.err
    echo "$mode-$i exit $? $(tail -1 /tmp/ev/$mode-$i.err)" >> /tmp/ev/log.txt
  done
done
echo done >> /tmp/ev/log.txt
