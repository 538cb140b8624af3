#!/usr/bin/env bash
# results/train: ragidx train on the QMSum **train** meetings, evaluated on the **val** meetings
# (never seen in training) and on passkey/needle. Resumable: a finished step is skipped, an
# interrupted training continues from its checkpoint, evaluations resume from their run files.
#
#   bash benchmarks/train/run.sh [WORK_DIR]      (default ~/.cache/ragidx/train; models stay there)
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${1:-$HOME/.cache/ragidx/train}
DATA=${RAGIDX_EVAL_DATA:-../shared/data}
OUT=results/train
PAIRS=$W/qmsum-train-minilm.jsonl
COMMON=(--steps 80 --batch-size 16 --negatives 1 --document-tokens 256 --device cpu --seed 0 --quiet)
mkdir -p "$W" "$OUT"

[ -f "$PAIRS" ] || python benchmarks/train/qmsum_pairs.py "$DATA/qmsum/raw/train" "$PAIRS" --mine 1

train() {  # NAME ARGS…: train into $W/NAME unless it is done; continue its checkpoint if one is there
  local name=$1; shift
  if [ -f "$W/$name/modules.json" ]; then return; fi
  local resume=()
  [ -d "$W/$name/training/checkpoint" ] && resume=(--resume)
  /usr/bin/time -f "$name: %e s" ragidx train "$PAIRS" -o "$W/$name" "${COMMON[@]}" "${resume[@]}" "$@"
}

qmsum() {  # NAME MODEL ARGS…: one vector per meeting (pcw) and chunk max-sim on QMSum val
  local name=$1 model=$2; shift 2
  ragidx eval --task qmsum:val --model "$model" --max-length none --data-dir "$DATA" --out "$OUT/qmsum-val-$name" --quiet "$@"
}

train mean --pooling mean --lr 5e-5
qmsum mean "$W/mean" --strategy pcw --strategy chunk
train lmk64 --pooling lmk --landmark-every 64 --lr 5e-5
qmsum lmk64 "$W/lmk64" --strategy pcw --strategy chunk
train lmkvar --pooling lmk --landmark-every variable --lr 5e-5
qmsum lmkvar "$W/lmkvar" --strategy pcw --strategy chunk
train pi4k --positions pi --target-length 4096
ragidx eval --task passkey --task needle --model "$W/pi4k" --strategy truncate --lengths 256,512,1024,2048,4096 \
  --data-dir "$DATA" --out "$OUT/synthetic-pi4k" --quiet
qmsum pi4k "$W/pi4k" --strategy pcw --strategy truncate
