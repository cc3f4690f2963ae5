#!/bin/sh
# 10 fresh processes per setting (30 for the warmed one); counts of each line of three errors
PY=${PY:-python}
D=$(dirname "$0")
for mode in none sdpa softmax; do
  echo "== $mode"; for i in $(seq 10); do $PY "$D/first_exp.py" $mode; done | sort | uniq -c
done
echo "== sdpa warm"; for i in $(seq 30); do $PY "$D/first_exp.py" sdpa warm; done | sort | uniq -c
