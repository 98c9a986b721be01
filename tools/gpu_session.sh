#!/usr/bin/env bash
# One GPU session's checks, in the order they matter, each in its own time limit so
# one failure leaves the rest: the CUDA backend check (tools/gpu_check.py), measured
# profiles of the shipped H100 apps, and the same co-located runs on the GPU and on the
# simulator with those measured profiles.
#
#   BLESS_CACHE=DIR tools/gpu_session.sh OUT
#
# DIR holds the build plans (`bless apps build APP --gpu h100`, made on any machine with
# TVM and nvcc); OUT receives env.txt, the logs, gpu_check/, profiles/h100/ and pairs/.
set -u
out=${1:?usage: BLESS_CACHE=DIR tools/gpu_session.sh OUT}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
apps=${APPS:-resnet50 vgg11 bert bert_base nasnet resnet101}

{ nvidia-smi; "$py" -c "import sys, cuda.bindings, numpy; print(sys.version); print('cuda.bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"; } >"$out/env.txt" 2>&1

timeout 150 "$py" tools/gpu_check.py --out "$out/gpu_check" --run-seconds 6 2>&1 | tee "$out/gpu_check.log"

for app in $apps; do
    timeout 90 "$py" -m bless.cli profile "$app" --gpu h100 --backend cuda --out "$out/profiles" 2>&1 | tee -a "$out/profile.log"
done

# The same pairs on the GPU and on the simulator, both with the measured profiles.
m=$out/profiles/h100
cat >"$out/pairs.yaml" <<YAML
name: gpu_vs_sim_pairs
description: Two apps at 50/50, closed loops at load B, on the GPU and on the simulator (measured profiles).
base:
  gpu: h100
  duration: ${PAIR_SECONDS:-4}
  warmup: 1
  seed: 0
  apps:
    - {app: $m/resnet50.json, quota: 0.5, load: B}
    - {app: $m/bert.json, quota: 0.5, load: B}
grid:
  backend: [cuda, sim]
  policy: [iso, gslice, unbound, bless]
zip:
  - apps.0.app: [$m/resnet50.json, $m/vgg11.json, $m/resnet50.json]
    apps.1.app: [$m/bert.json, $m/nasnet.json, $m/resnet50.json]
YAML
timeout 240 "$py" -m bless.cli sweep "$out/pairs.yaml" --out "$out/pairs" --jobs 1 --no-plot 2>&1 | tee "$out/pairs.log"
