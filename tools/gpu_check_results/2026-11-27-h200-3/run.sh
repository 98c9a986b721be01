#!/usr/bin/env bash
# Session 22's GPU checks, under one deadline. First, before anything else touches the GPU: the
# first-run stall's diagnosis (first_run_diag.py). Then isolation pairs with item 21's BLESS and
# item 21's own cell at seeds 1-2 (seed_cells.py).
set -u
o=${OUT:?}
D=tools/gpu_check_results/2026-11-27-h200-3
P=tools/gpu_check_results/2026-11-26-h200/profiles
export BLESS_CACHE=$PWD/.gpucache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
t0=$(date +%s); end=$((t0 + ${BUDGET:-360}))
left() { local l=$((end - $(date +%s))); [ $l -gt $1 ] && echo $1 || echo $l; }
timeout $(left 80) python3 $D/first_run_diag.py cuda $o 2 >$o/diag.txt 2>&1; echo "diag $(( $(date +%s)-t0 )) s"; cut -c1-900 $o/diag.txt
{ nvidia-smi; python3 -c "import sys, cuda.bindings, numpy; print(sys.version); print('cuda.bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"; git log -1 --oneline 2>/dev/null; } >$o/env.txt 2>&1
timeout $(left 190) python3 experiments/isolation_pairs.py --backend cuda --gpu h100 --mechanism green --profiles $P --apps resnet50,bert,vgg11 --times 5 --policies bless --jobs 1 >$o/isolation_bless.txt 2>&1; echo "isolation $(( $(date +%s)-t0 )) s"; grep -E "^(resnet50|bert|vgg11) |victims|\|" $o/isolation_bless.txt | head -20
timeout $(left 90) python3 $D/seed_cells.py cuda 1,2 >$o/seed_cells.txt 2>&1; echo "seeds $(( $(date +%s)-t0 )) s"; cat $o/seed_cells.txt | tail -8
echo "total $(( $(date +%s)-t0 )) s"
