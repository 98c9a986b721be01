#!/usr/bin/env bash
# Second call: BLESS with this session's deadline-pacing changes on nine pairs at loads A, B and
# exponential A (bless_check.yaml), one sweep, the first thing the machine runs.
set -u
o=${OUT:?}
D=tools/gpu_check_results/2026-11-27-h200-4
export BLESS_CACHE=$PWD/.gpucache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
git log -1 --format=%H >$o/env2.txt
t0=$(date +%s)
timeout 330 python3 -m bless.cli sweep $D/bless_check.yaml --out $o/bc --no-plot --jobs 1 >$o/bc.log 2>&1; echo "sweep rc $? $(( $(date +%s)-t0 )) s"; tail -2 $o/bc.log
[ -f $o/bc/apps.csv ] && mv $o/bc/apps.csv $o/bc_apps.csv; [ -f $o/bc/runs.csv ] && mv $o/bc/runs.csv $o/bc_runs.csv; rm -rf $o/bc
cut -d, -f3,6,11,14 $o/bc_apps.csv 2>/dev/null | sed 's#tools/gpu_check_results/2026-11-26-h200/profiles/##g'
