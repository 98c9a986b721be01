#!/usr/bin/env bash
# One call on a fresh machine: BERT-base's four pairs under BLESS, UNBOUND and GSLICE
# (bert_base_pairs.yaml), then session 17's five pairs under the same three with this
# session's code (../2026-11-27-h200-3/pairs_policies.yaml).
set -u
o=${OUT:?}
D=tools/gpu_check_results
export BLESS_CACHE=$PWD/.gpucache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >$o/env.txt 2>&1
git log -1 --format=%H >>$o/env.txt
t0=$(date +%s)
timeout 230 python3 -m bless.cli sweep $D/2026-11-27-h200-4/bert_base_pairs.yaml --out $o/bb --no-plot --jobs 1 >$o/bb.log 2>&1; echo "bert_base sweep rc $? $(( $(date +%s)-t0 )) s"; tail -2 $o/bb.log
t0=$(date +%s)
timeout 150 python3 -m bless.cli sweep $D/2026-11-27-h200-3/pairs_policies.yaml --out $o/pp --no-plot --jobs 1 >$o/pp.log 2>&1; echo "pairs sweep rc $? $(( $(date +%s)-t0 )) s"; tail -2 $o/pp.log
for d in bb pp; do [ -f $o/$d/apps.csv ] && mv $o/$d/apps.csv $o/${d}_apps.csv; [ -f $o/$d/runs.csv ] && mv $o/$d/runs.csv $o/${d}_runs.csv; rm -rf $o/$d; done
cut -d, -f2,3,6,11,14 $o/bb_apps.csv 2>/dev/null | sed 's#tools/gpu_check_results/2026-11-26-h200/profiles/##g'
