#!/usr/bin/env bash
# Third call, on a fresh machine: the diagnosis with the collector's passes timed, run 1 without
# the replay loop's frozen heap (bless/core/heap.py), run 2 with it.
set -u
o=${OUT:?}
D=tools/gpu_check_results/2026-11-27-h200-3
export BLESS_CACHE=$PWD/.gpucache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 120 python3 $D/first_run_diag.py cuda $o 3 >$o/diag_gc.txt 2>&1; echo "diag $(( $(date +%s)-t0 )) s"; cut -c1-900 $o/diag_gc.txt
for i in 0 1 2; do mv $o/diag_$i.json $o/diag_gc_$i.json; done
