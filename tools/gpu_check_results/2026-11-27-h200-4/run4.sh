#!/usr/bin/env bash
# Fourth call: BLESS with the drain-aware pacing (the same sweep as run2.sh) on nine pairs at loads A, B and
# exponential A (bless_check.yaml), one sweep, the first thing the machine runs.
set -u
o=${OUT:?}
D=tools/gpu_check_results/2026-11-27-h200-4
export BLESS_CACHE=$PWD/.gpucache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
git log -1 --format=%H >$o/env4.txt
t0=$(date +%s)
timeout 190 python3 -m bless.cli sweep $D/bless_check.yaml --out $o/bd --no-plot --jobs 1 >$o/bd.log 2>&1; echo "sweep rc $? $(( $(date +%s)-t0 )) s"; tail -2 $o/bd.log
[ -f $o/bd/apps.csv ] && mv $o/bd/apps.csv $o/bd_apps.csv; [ -f $o/bd/runs.csv ] && mv $o/bd/runs.csv $o/bd_runs.csv; rm -rf $o/bd
cut -d, -f3,6,11,14 $o/bd_apps.csv 2>/dev/null | sed 's#tools/gpu_check_results/2026-11-26-h200/profiles/##g'
