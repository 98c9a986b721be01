#!/usr/bin/env bash
# Second call, on a fresh machine: the first-run diagnosis again with run_config's warm-up
# (bless/harness/warm.py), then item 21's cell at seed 3.
set -u
o=${OUT:?}
D=tools/gpu_check_results/2026-11-27-h200-3
export BLESS_CACHE=$PWD/.gpucache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 90 python3 $D/first_run_diag.py cuda $o 2 >$o/diag_warm.txt 2>&1; echo "diag $(( $(date +%s)-t0 )) s"; cut -c1-700 $o/diag_warm.txt
for i in 0 1; do mv $o/diag_$i.json $o/diag_warm_$i.json; done
timeout 70 python3 $D/seed_cells.py cuda 3 >$o/seed_cells_3.txt 2>&1; echo "seeds $(( $(date +%s)-t0 )) s"; tail -3 $o/seed_cells_3.txt
