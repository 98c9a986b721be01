#!/usr/bin/env bash
# One GPU session's checks, each under its own time limit so one failure leaves the rest:
# the GPU tests (pytest -m gpu), the CUDA backend check (tools/gpu_check.py), measured
# profiles of the shipped H100 apps, and the same co-located runs on the GPU and on the
# simulator with those measured profiles (tools/gpu_pairs.yaml's grid).
#
#   BLESS_CACHE=DIR [PROFILES=DIR] tools/gpu_session.sh OUT
#
# BLESS_CACHE holds the build plans (`bless apps build APP --gpu h100`, made on any machine
# with TVM and nvcc).  PROFILES, a folder of profiles measured before, skips the profiling.
# OUT receives env.txt, the logs, gpu_check/, profiles/h100/, pairs/ and gpu_vs_sim.md.
set -u
out=${1:?usage: BLESS_CACHE=DIR [PROFILES=DIR] tools/gpu_session.sh OUT}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
apps=${APPS:-resnet50 vgg11 bert bert_base nasnet resnet101}

{ nvidia-smi; "$py" -c "import sys, cuda.bindings, numpy; print(sys.version); print('cuda.bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"; } >"$out/env.txt" 2>&1

timeout 120 "$py" -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_gpu.py 2>&1 | tee "$out/pytest_gpu.log"

m=${PROFILES:-}
if [ -z "$m" ]; then
    m=$out/profiles/h100
    for app in $apps; do
        timeout 90 "$py" -m bless.cli profile "$app" --gpu h100 --backend cuda --out "$out/profiles" 2>&1 | tee -a "$out/profile.log"
    done
fi
m=$(cd "$m" && pwd)

timeout 150 "$py" tools/gpu_check.py --out "$out/gpu_check" --run-seconds 6 --profiles "$m" 2>&1 | tee "$out/gpu_check.log"

# The grid of tools/gpu_pairs.yaml with the measured profiles, on the GPU and on the simulator.
sed "s#PROFILES#$m#g" tools/gpu_pairs.yaml >"$out/pairs.yaml"
# 54 runs on the GPU took over 290 s on an H200; a sweep stopped early keeps its runs in runs.partial.jsonl.
timeout "${PAIRS_TIMEOUT:-420}" "$py" -m bless.cli sweep "$out/pairs.yaml" --out "$out/pairs" --jobs 1 --no-plot 2>&1 | tee "$out/pairs.log"
"$py" tools/gpu_vs_sim.py "$out/pairs" 2>&1 | tee "$out/gpu_vs_sim.md"
