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

qmsum() {  # NAME MODEL ARGS…: ragidx eval on QMSum val (whole meetings unless ARGS say --max-length)
  local name=$1 model=$2; shift 2
  local whole=(--max-length none)
  [[ " $* " == *" --max-length "* ]] && whole=()
  ragidx eval --task qmsum:val --model "$model" "${whole[@]}" --data-dir "$DATA" --out "$OUT/qmsum-val-$name" --quiet "$@"
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
# the untuned model on the same synthetic documents: PI at L_t 4,096 (the tuned model's window) and
# max-sim chunking; QMSum val with the first 4,096 tokens of each meeting in one PI pass
ragidx eval --task passkey --task needle --model default --strategy extend:pi --strategy chunk --max-length 4096 \
  --lengths 256,512,1024,2048,4096 --data-dir "$DATA" --out "$OUT/synthetic-untuned" --quiet
qmsum untuned-pi4k default --strategy extend:pi --max-length 4096
# LMK + positions: the LMK-64 model, then its position rows tuned
train lmk64-pi4k --model "$W/lmk64" --pooling lmk --landmark-every 64 --positions pi --target-length 4096
ragidx eval --task passkey --task needle --model "$W/lmk64-pi4k" --strategy truncate --lengths 256,512,1024,2048,4096 \
  --data-dir "$DATA" --out "$OUT/synthetic-lmk64-pi4k" --quiet
# the fine-tuned models with one vector per document (pcw) on passkey and needle
for name in mean lmk64 lmkvar; do
  ragidx eval --task passkey --task needle --model "$W/$name" --strategy pcw --lengths 256,512,1024,2048,4096 \
    --max-length 4096 --data-dir "$DATA" --out "$OUT/synthetic-$name" --quiet
done
# the untuned model on QMSum val: one vector per meeting (pcw, and LMK-64 over PCW windows off the
# shelf), max-sim chunks, the first 512 tokens, and BM25 (the strongest simple peer; nothing trained)
qmsum untuned default --strategy pcw --strategy lmk:64 --strategy chunk --strategy truncate --strategy bm25
