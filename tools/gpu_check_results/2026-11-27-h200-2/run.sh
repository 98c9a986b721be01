#!/usr/bin/env bash
# Session 21's GPU checks, under one deadline: the GPU tests, isolation pairs with the current
# BLESS, GSLICE after its whole-request launch fix, tools/gpu_check.py (launch queue depth), UNBOUND.
set -u
o=${OUT:?}
export BLESS_CACHE=$PWD/.gpucache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
P=tools/gpu_check_results/2026-11-26-h200/profiles
t0=$(date +%s); end=$((t0 + ${BUDGET:-560}))
left() { local l=$((end - $(date +%s))); [ $l -gt $1 ] && echo $1 || echo $l; }
{ nvidia-smi; python3 -c "import sys, cuda.bindings, numpy; print(sys.version); print('cuda.bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"; git log -1 --oneline 2>/dev/null; } >$o/env.txt 2>&1
timeout $(left 45) python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_gpu.py >$o/pytest_gpu.log 2>&1; echo "pytest $(( $(date +%s)-t0 )) s"; tail -2 $o/pytest_gpu.log
iso() { timeout $(left $2) python3 experiments/isolation_pairs.py --backend cuda --gpu h100 --mechanism green --profiles $P --apps resnet50,bert,vgg11 --times 5 --policies $1 --jobs 1 >$o/isolation_$1.txt 2>&1; echo "isolation $1 $(( $(date +%s)-t0 )) s"; grep -E "^(resnet50|bert|vgg11) |victims" $o/isolation_$1.txt; }
iso bless 200
iso gslice 170
timeout $(left 110) python3 tools/gpu_check.py --out $o/gpu_check --run-seconds 3 --profiles $P >$o/gpu_check.log 2>&1; echo "gpu_check $(( $(date +%s)-t0 )) s"; grep -E "PASS|FAIL|SKIP" $o/gpu_check.log | cut -c1-300
iso unbound 200
echo "total $(( $(date +%s)-t0 )) s"
