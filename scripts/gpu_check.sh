#!/usr/bin/env bash
# The GPU check: whoever gets a GPU machine runs this first (under 8 minutes on one H200), then pastes its table.
#
#   bash scripts/gpu_check.sh            # on a CUDA machine: everything at the sizes below
#   COG_PL_GPU_CHECK_TINY=1 bash scripts/gpu_check.sh   # tiny sizes (a smoke run; on a CPU the GPU parts skip)
#
# Steps, each under its own time limit, each logged to $OUT/<step>.log:
#   1. every test marked gpu (pytest -m gpu; they skip without CUDA)
#   2. benchmarks/bench_probe_gpu.py: one probe at the protocol's full scale (1.1M x 2048, 30 x 100) -- CUDA only
#   3. benchmarks/bench_extract.py: extraction images/s for ResNet-50 and ViT-B/16, per decode path, on JPEGs of
#      ImageNet's size distribution (bf16 autocast, channels-last)
#   4. one domain's whole probe protocol (5 seeds x all data and 1..128 shots) at reduced scale, --probe-workers auto
#   5. benchmarks/bench_probe_kinds.py: a full-scale attentive and MLP cell's training step against the linear's
#      (ViT-L width 1024, 1000 classes, batch 1024 (vjepa2: 128), 1 and 197 tokens, 10/5/1 heads per pass,
#      bf16-mixed) and the cells projected to a level's train images -- CUDA only
#   6. benchmarks/bench_zeroshot.py: the zero-shot text classifier of 1,000 concepts x 80 templates by CLIP RN50's
#      text tower (float32 and bf16 autocast) and the zero-shot evaluation's images/s
# and prints one summary table (step, status, seconds, the figure lines of its log).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${GPU_CHECK_OUT:-gpu_check_out}
mkdir -p "$OUT"
export NLTK_DATA=${NLTK_DATA:-$PWD/.venv/nltk_data} HF_HUB_OFFLINE=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
CUDA=$($PY -c "import torch; print(int(torch.cuda.is_available()))")
TINY=${COG_PL_GPU_CHECK_TINY:-0}
[ "$CUDA" = 1 ] || TINY=1  # no GPU: the smoke run, GPU parts skipped
export COG_PL_BENCH_TINY=$TINY
SUMMARY=()

step() {  # step NAME LIMIT_S FIGURE_PATTERN COMMAND...
  local name=$1 limit=$2 pattern=$3; shift 3
  local t0=$SECONDS status
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  case $? in 0) status=ok ;; 124) status="TIMEOUT (${limit} s)" ;; *) status=FAILED ;; esac
  local figures
  figures=$(grep -E "$pattern" "$OUT/$name.log" | tail -n 12 | sed 's/^/      /')
  SUMMARY+=("$(printf '%-14s %-18s %5d s\n%s' "$name" "$status" $((SECONDS - t0)) "$figures")")
}

skip() { SUMMARY+=("$(printf '%-14s %-18s' "$1" "skipped ($2)")"); }

step gpu-tests 150 "passed|failed|skipped|error" $PY -m pytest -q -m gpu tests -p no:cacheprovider

if [ "$CUDA" = 1 ] && [ "$TINY" = 0 ]; then
  step probe-gpu 200 "seconds|top1|wall|heads" $PY benchmarks/bench_probe_gpu.py --workdir "$OUT/probe_gpu"
else
  skip probe-gpu "no CUDA or tiny mode"
fi

if [ "$CUDA" = 1 ]; then
  N=$([ "$TINY" = 1 ] && echo 64 || echo 4096)
  step extract-r50 150 "JPEGs|raw PIL|^decode|^(pil|cpu|gpu) " $PY benchmarks/bench_extract.py --device cuda \
    --precision bf16-mixed --model torchvision:resnet50 --images "$N" --batch-size 256 --concepts 8
  step extract-vitb16 150 "JPEGs|raw PIL|^decode|^(pil|cpu|gpu) " $PY benchmarks/bench_extract.py --device cuda \
    --precision bf16-mixed --model torchvision:vit_b_16 --images "$N" --batch-size 256 --concepts 8
else
  step extract-cpu 120 "JPEGs|raw PIL|^decode|^(pil|cpu|gpu) " $PY benchmarks/bench_extract.py --device cpu \
    --precision 32-true --model torchvision:resnet18 --images 24 --batch-size 8 --paths pil cpu gpu --no-end-to-end
fi

if [ "$TINY" = 1 ]; then
  GRID=(--classes 10 --dim 32 --per-class 40 --test-per-class 10 --seeds 22 37 --shots all 2 --trials 4 --epochs 3)
  DEV=cpu
else
  GRID=(--classes 1000 --dim 2048 --per-class 100 --test-per-class 20 --seeds 22 37 45 77 93
        --shots all 1 2 4 8 16 32 64 128 --trials 10 --epochs 10)
  DEV=cuda
fi
step probe-grid 150 "cells|speed-up|rows" $PY benchmarks/bench_probe_grid.py "${GRID[@]}" --device "$DEV"

if [ "$CUDA" = 1 ] && [ "$TINY" = 0 ]; then
  step probe-kinds 150 "^device|s/image|x linear|^(linear|mlp|vjepa|vjepa2|capi|ep) " $PY \
    benchmarks/bench_probe_kinds.py --device cuda --precision bf16-mixed --dim 1024 --classes 1000 --batch 1024 \
    --block-batch 128 --tokens 1 197 --presets vjepa vjepa2 capi ep --steps 5 --limit-s 10 --linear-images 262144
else
  skip probe-kinds "no CUDA or tiny mode"
fi
if [ "$CUDA" = 1 ]; then
  step zeroshot-fp32 120 "classifier|evaluation" $PY benchmarks/bench_zeroshot.py --device cuda --precision 32-true
  step zeroshot-bf16 120 "classifier|evaluation" $PY benchmarks/bench_zeroshot.py --device cuda --precision bf16-mixed
else
  step zeroshot-cpu 120 "classifier|evaluation" $PY benchmarks/bench_zeroshot.py --device cpu --concepts 1
fi

echo
echo "GPU check ($( [ "$CUDA" = 1 ] && $PY -c 'import torch; print(torch.cuda.get_device_name())' || echo 'no CUDA: smoke run' ),"\
     "tiny=$TINY); logs in $OUT/"
printf '%-14s %-18s %7s\n' step status time
for s in "${SUMMARY[@]}"; do echo "$s"; done
