#!/usr/bin/env bash
# bench/soak.sh: a long data-parallel training run of the default model, killed again and again.
#
# Trains configs/sotu.json under `mpirun -np NP` (1 thread per rank) for about SECONDS of training,
# checkpointing every CKPT_EVERY steps. A killer SIGKILLs one random rank at a random moment (every
# MIN_GAP..MAX_GAP seconds, also during checkpoint writes); mpirun then ends the job, and the script
# starts it again with --resume, until the run completes. Then the same run goes once more without
# interruptions, and the two metrics.jsonl are compared step by step: every loss and gradient norm
# must be equal to the bit (resume is bit-exact), and so must the final validation loss.
#   bash bench/soak.sh [SECONDS=3600] [NP=2]      (hold /tmp/shardlm-build.lock around it)
# Environment: STEPS (default: 5 steps a second, the default run's speed on 2 cores), CKPT_EVERY (50),
# MIN_GAP (20), MAX_GAP (120), OUT (runs/soak), MICRO (16 / NP: sequences per micro-batch),
# BIN (build/shardlm; copied to OUT.bin first, so rebuilding during the soak does not change it).
set -uo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3600}; NP=${2:-2}
STEPS=${STEPS:-$(( 5 * SECS ))}
CKPT_EVERY=${CKPT_EVERY:-50}; MIN_GAP=${MIN_GAP:-20}; MAX_GAP=${MAX_GAP:-120}
OUT=${OUT:-runs/soak}
unset OPENBLAS_CORETYPE
MPI=(mpirun -np "$NP" --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
# the config's 16 sequences per step, split over the NP data-parallel ranks
MICRO=${MICRO:-$(( 16 / NP ))}
ARGS=(--config configs/sotu.json --threads 1 --steps "$STEPS" --micro-batch "$MICRO" --ckpt-every "$CKPT_EVERY"
      --keep-ckpts 2 --sample-tokens 0)
[ -f data/sotu/sotu_train.bin ] || { echo "soak: data/sotu/sotu_train.bin missing: run tools/quickstart.sh first"; exit 2; }
rm -rf "$OUT" "$OUT-ref"
mkdir -p "$(dirname "$OUT")"
cp "${BIN:-build/shardlm}" "$OUT.bin" || exit 2
LOG="$OUT.log"; : > "$LOG"

restarts=0; start=$(date +%s)
echo "soak: $STEPS steps of configs/sotu.json on $NP ranks, a random rank killed every $MIN_GAP-$MAX_GAP s"
while :; do
  resume=(); [ -d "$OUT" ] && resume=(--resume)
  "${MPI[@]}" "./$OUT.bin" train "${ARGS[@]}" --out "$OUT" "${resume[@]}" >> "$LOG" 2>&1 &
  job=$!
  gap=$(( MIN_GAP + RANDOM % (MAX_GAP - MIN_GAP + 1) ))
  for _ in $(seq "$gap"); do kill -0 "$job" 2>/dev/null || break; sleep 1; done
  if kill -0 "$job" 2>/dev/null; then
    ranks=($(pgrep -P "$job" -f "train --config" || true))
    if [ ${#ranks[@]} -gt 0 ]; then
      victim=${ranks[$(( RANDOM % ${#ranks[@]} ))]}
      kill -9 "$victim" 2>/dev/null && restarts=$((restarts + 1))
      step=$(grep -o '"step": [0-9]*' "$OUT/metrics.jsonl" 2>/dev/null | tail -1 | grep -o '[0-9]*$')
      echo "soak: $(( $(date +%s) - start )) s: SIGKILL to rank pid $victim after step ${step:-?} (restart $restarts)"
    fi
    wait "$job" 2>/dev/null
  else
    wait "$job"; rc=$?
    [ "$rc" -eq 0 ] || { echo "soak: the run failed on its own (exit $rc): see $LOG"; tail -20 "$LOG"; exit 1; }
    break
  fi
done
soak_s=$(( $(date +%s) - start ))
echo "soak: finished $STEPS steps in $soak_s s with $restarts kills survived; now the uninterrupted reference"
"${MPI[@]}" "./$OUT.bin" train "${ARGS[@]}" --out "$OUT-ref" > "$OUT-ref.log" 2>&1 ||
  { echo "soak: the reference run failed: see $OUT-ref.log"; exit 1; }
/usr/bin/python3 - "$OUT/metrics.jsonl" "$OUT-ref/metrics.jsonl" "$restarts" "$soak_s" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
steps_a, steps_b = [r["step"] for r in a], [r["step"] for r in b]
assert steps_a == steps_b == list(range(len(b))), "the metrics do not hold every step once"
diff = [k for k in ("loss", "grad_norm", "val_loss") for x, y in zip(a, b) if x.get(k) != y.get(k)]
vals = [r["val_loss"] for r in a if "val_loss" in r]
print(f"soak: {len(a)} steps, {sys.argv[3]} restarts in {sys.argv[4]} s; losses, gradient norms and "
      f"validation losses equal to the uninterrupted run at every step: {'yes' if not diff else 'NO'}; "
      f"final validation loss {vals[-1] if vals else None}")
sys.exit(1 if diff else 0)
EOF
