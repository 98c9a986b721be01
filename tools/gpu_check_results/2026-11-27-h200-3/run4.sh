#!/usr/bin/env bash
# Fourth call, on a fresh machine: session 17's five BLESS pairs as one `bless sweep`, the first
# thing the machine runs (before the warm-up, a sweep's first run on a fresh machine stalled).
set -u
o=${OUT:?}
D=tools/gpu_check_results/2026-11-27-h200-3
export BLESS_CACHE=$PWD/.gpucache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 -m bless.cli sweep $D/pairs.yaml --out $o/pairs --no-plot --jobs 1 >$o/pairs.log 2>&1; echo "sweep rc $? $(( $(date +%s)-t0 )) s"; tail -3 $o/pairs.log
cut -d, -f7,10,12,15 $o/pairs/apps.csv 2>/dev/null || ls $o/pairs
