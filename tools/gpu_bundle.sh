#!/usr/bin/env bash
# Keep a folder of results within what the device tool brings back from a call (at most 8 files, 16 MiB each,
# 64 MiB in all): where OUTDIR holds more than 8 files, or one over 15 MiB, every file but env.txt goes into
# OUTDIR/checks.tar.gz (gzip), and the originals are removed once it is written; an archive over 15 MiB is cut into
# checks.tar.gz.00, .01, ... (join them with `cat checks.tar.gz.?? > checks.tar.gz`). Subfolders are left as they are.
# tools/gpu_checks.sh calls it last.
#
#   tools/gpu_bundle.sh OUTDIR
set -eu
out=${1:?usage: tools/gpu_bundle.sh OUTDIR}
limit=8
piece=$((15 * 1024 * 1024))  # under the 16 MiB a file may have, with room to spare
count=$(find "$out" -maxdepth 1 -type f | wc -l)
large=$(find "$out" -maxdepth 1 -type f ! -name env.txt -size +"$piece"c | wc -l)
[ "$count" -le "$limit" ] && [ "$large" -eq 0 ] && exit 0
cd "$out"
# not the archive being written: the shell may create it before find lists the folder (and it may be left from a
# bundling that was stopped)
find . -maxdepth 1 -type f ! -name env.txt ! -name checks.tar.gz ! -name checks.tar.gz.part -printf '%f\0' | sort -z \
  | tar --null -T - -czf checks.tar.gz.part
find . -maxdepth 1 -type f ! -name env.txt ! -name checks.tar.gz ! -name checks.tar.gz.part -delete
mv checks.tar.gz.part checks.tar.gz
echo "$count files in $out, $large of them over 15 MiB (a call brings back 8, of 16 MiB at most): all but env.txt" \
     "are in checks.tar.gz"
size=$(stat -c %s checks.tar.gz)
if [ "$size" -gt $((60 * 1024 * 1024)) ]; then
  echo "warning: checks.tar.gz is over 60 MiB; a call brings back 64 MiB in all, so some pieces will stay behind:" \
       "keep fewer samples or write less" >&2
fi
if [ "$size" -gt "$piece" ]; then
  split -b "$piece" -d -a 2 checks.tar.gz checks.tar.gz.
  rm checks.tar.gz
  echo "checks.tar.gz ($size bytes) is cut in $(ls checks.tar.gz.?? | wc -l) pieces of at most 15 MiB: join them" \
       "with cat checks.tar.gz.?? > checks.tar.gz"
fi
