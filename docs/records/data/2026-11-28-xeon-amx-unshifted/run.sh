#!/bin/sh
# Each case in 3 processes, one after another: python is the test environment's (.tox/py/bin/python)
PY=${PY:-python}
D=$(dirname "$0")
for p in 1 2 3; do
  $PY "$D/ab.py" 15 2048 64 fp32
  $PY "$D/ab.py" 7 4096 128 bf16
  $PY "$D/ab.py" 7 8192 64 fp32 window
  $PY "$D/ab.py" 15 2048 64 fp32 causal
  $PY "$D/ab.py" 41 512 64 fp32
  $PY "$D/ab.py" 41 512 64 fp32 causal
  $PY "$D/ab.py" 15 1024 128 fp32
  $PY "$D/ab.py" 21 1024 128 bf16 causal
done
