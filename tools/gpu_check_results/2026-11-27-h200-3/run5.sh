#!/usr/bin/env bash
# Fifth call: the five pairs of session 17 (load A, 3 s) under BLESS, GSLICE and UNBOUND, one sweep.
set -u
o=${OUT:?}
D=tools/gpu_check_results/2026-11-27-h200-3
export BLESS_CACHE=$PWD/.gpucache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 280 python3 -m bless.cli sweep $D/pairs_policies.yaml --out $o/pp --no-plot --jobs 1 >$o/pp.log 2>&1; echo "sweep rc $? $(( $(date +%s)-t0 )) s"; tail -2 $o/pp.log
cut -d, -f3,7,12,15 $o/pp/apps.csv 2>/dev/null | head -40
