#!/usr/bin/env bash
# Third call: BERT-base beside VGG11 under four BLESS variants (variants.yaml), then the default
# traced at loads A and exponential A (bb_vgg_exp.yaml): where BERT-base's time goes on the GPU.
set -u
o=${OUT:?}
D=tools/gpu_check_results/2026-11-27-h200-4
export BLESS_CACHE=$PWD/.gpucache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
git log -1 --format=%H >$o/env3.txt
t0=$(date +%s)
timeout 120 python3 -m bless.cli sweep $D/variants.yaml --out $o/v --no-plot --jobs 1 >$o/var.log 2>&1; echo "sweep rc $? $(( $(date +%s)-t0 )) s"
[ -f $o/v/apps.csv ] && mv $o/v/apps.csv $o/var_apps.csv; rm -rf $o/v
for l in A exp; do
  set_load=(); [ $l = A ] && set_load=(--set apps.0.load=A --set apps.1.load=A)
  timeout 60 python3 -m bless.cli run $D/bb_vgg_exp.yaml "${set_load[@]}" --out $o/r$l --no-plot --trace $o/trace_$l.json >>$o/var.log 2>&1; echo "run $l rc $?"
  [ -f $o/r$l/apps.csv ] && mv $o/r$l/apps.csv $o/run_${l}_apps.csv; rm -rf $o/r$l; gzip -f $o/trace_$l.json 2>/dev/null
done
cut -d, -f2,3,6,11,14 $o/var_apps.csv 2>/dev/null; cat $o/run_*_apps.csv 2>/dev/null | cut -d, -f1,6,9
ls -la $o
