#!/usr/bin/env bash
# Keep a folder of results within what the device tool brings back from a call (at most 8 files): where OUTDIR
# holds more than 8 files, every one but env.txt goes into OUTDIR/checks.tar.gz (gzip), and the originals are
# removed once it is written. Subfolders are left as they are. tools/gpu_checks.sh calls it last.
#
#   tools/gpu_bundle.sh OUTDIR
set -eu
out=${1:?usage: tools/gpu_bundle.sh OUTDIR}
limit=8
count=$(find "$out" -maxdepth 1 -type f | wc -l)
[ "$count" -le "$limit" ] && exit 0
cd "$out"
find . -maxdepth 1 -type f ! -name env.txt ! -name checks.tar.gz -printf '%f\0' | sort -z \
  | tar --null -T - -czf checks.tar.gz.part
find . -maxdepth 1 -type f ! -name env.txt ! -name checks.tar.gz ! -name checks.tar.gz.part -delete
mv checks.tar.gz.part checks.tar.gz
echo "$count files in $out, more than the $limit a call brings back: all but env.txt are in checks.tar.gz"
