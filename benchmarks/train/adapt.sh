#!/usr/bin/env bash
# results/adapt: adaptation to the corpus being indexed, without labels (issue 41, item 3).
# `ragidx train FOLDER` turns the documents into inverse-cloze pairs (8 per document, one mined hard
# negative each) and fine-tunes the default model on them; no query, summary or answer is used.
#   qmsum-val: the 35 QMSum **val** meetings' text (exactly what `--task qmsum:val` indexes), one
#              .txt per meeting; evaluated on qmsum:val (same meetings, their queries never seen)
#              and on passkey/needle.
#   essays:    the Paul Graham essays passkey/needle documents are made of; evaluated on
#              passkey/needle (seed 0).
# Same budget as results/train (benchmarks/train/run.sh): 80 steps of 16, documents cut to 256
# tokens, lr 5e-5, seed 0, CPU. Resumable: a finished step is skipped, an interrupted training
# continues from its checkpoint, evaluations resume from their run files. Models and run files stay
# in WORK_DIR; only results.md/json and plots are copied to results/adapt/.
#
#   OMP_NUM_THREADS=1 bash benchmarks/train/adapt.sh [WORK_DIR]    (default ~/.cache/ragidx/adapt)
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${1:-$HOME/.cache/ragidx/adapt}
DATA=${RAGIDX_EVAL_DATA:-../shared/data}
OUT=results/adapt
COMMON=(--model default --steps 80 --batch-size 16 --negatives 1 --document-tokens 256 --lr 5e-5 --seed 0
  --device cpu --quiet --json)
SYNTH=(--task passkey --task needle --lengths 256,512,1024,2048,4096 --max-length 4096 --data-dir "$DATA")
mkdir -p "$W/eval" "$OUT"

# The val meetings' text only: the `text` of corpus.jsonl's "split": "val" records, as qmsum:val reads
# them (no queries, no summaries, no topics).
if [ ! -f "$W/qmsum-val-docs/.done" ]; then
  python - "$DATA/qmsum/longembed_style/corpus.jsonl" "$W/qmsum-val-docs" <<'EOF'
import json, sys
from pathlib import Path
corpus, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
n = 0
for line in corpus.open(encoding="utf-8"):
    record = json.loads(line)
    if record.get("split") == "val":
        (out / f"{record['id']}.txt").write_text(record["text"], encoding="utf-8")
        n += 1
if n != 35:
    sys.exit(f"{corpus}: expected 35 val meetings, found {n}")
(out / ".done").write_text(f"{n}\n")
EOF
fi

train() {  # NAME DOCS [ARGS…]: train into $W/NAME-model unless it is done; continue its checkpoint if one is there
  local name=$1 docs=$2
  shift 2
  if [ -f "$W/$name-model/modules.json" ]; then return; fi
  local resume=()
  [ -d "$W/$name-model/training/checkpoint" ] && resume=(--resume)
  /usr/bin/time -f "$name: %e s wall, %U s user, %S s system, %M KB peak" \
    ragidx train "$docs" -o "$W/$name-model" "${COMMON[@]}" "$@" "${resume[@]}" | tee "$W/$name-train.json"
}

publish() {  # NAME: copy an evaluation's results (not its runs/) to results/adapt/NAME
  local name=$1
  mkdir -p "$OUT/$name"
  cp "$W/eval/$name/results.md" "$W/eval/$name/results.json" "$OUT/$name/"
  rm -rf "$OUT/$name/plots"
  mkdir -p "$OUT/$name/plots"
  # the score-per-length plots (the index-size trade-off plots are left out: same chunking here)
  find "$W/eval/$name/plots" -name '*.png' ! -name '*__tradeoff.png' -exec cp {} "$OUT/$name/plots/" \;
  mkdir -p "$OUT/records"
  for model in qmsum-val qmsum-val-160 essays; do
    [ -f "$W/$model-model/training/record.json" ] && cp "$W/$model-model/training/record.json" "$OUT/records/$model.json"
    [ -f "$W/$model-model/training/loss.png" ] && cp "$W/$model-model/training/loss.png" "$OUT/records/$model-loss.png"
  done
  return 0
}

train qmsum-val "$W/qmsum-val-docs"
# QMSum val: untuned and adapted side by side, dense max-sim chunks, the hybrid and BM25 in one run
ragidx eval --task qmsum:val --max-length none --data-dir "$DATA" --model default --model "$W/qmsum-val-model" \
  --strategy chunk --strategy chunk+bm25:auto --strategy bm25 --out "$W/eval/qmsum-val" --quiet
publish qmsum-val
# passkey/needle with the QMSum-adapted model (a corpus it was not adapted to)
ragidx eval "${SYNTH[@]}" --model default --model "$W/qmsum-val-model" \
  --strategy chunk --strategy chunk+bm25:auto --strategy bm25 --out "$W/eval/synthetic-qmsum-val" --quiet
publish synthetic-qmsum-val
# twice the steps (160; a later option wins over COMMON's --steps 80): is the +5 target a matter of budget?
train qmsum-val-160 "$W/qmsum-val-docs" --steps 160
ragidx eval --task qmsum:val --max-length none --data-dir "$DATA" --model "$W/qmsum-val-160-model" \
  --strategy chunk --strategy chunk+bm25:auto --out "$W/eval/qmsum-val-160" --quiet
publish qmsum-val-160
# adapted to the essays the passkey/needle documents are made of
train essays "$DATA/paul_graham_essays/essays"
ragidx eval "${SYNTH[@]}" --model default --model "$W/essays-model" \
  --strategy chunk --strategy chunk+bm25:auto --strategy bm25 --out "$W/eval/synthetic-essays" --quiet
publish synthetic-essays
