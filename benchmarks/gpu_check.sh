#!/usr/bin/env bash
# The device check for a bare machine with one CUDA GPU (issue 37 item 6; docs/scale.md).
#
#   benchmarks/gpu_check.sh [OUT_DIR]          # from the repo root, on the GPU machine
#   DRY=1 benchmarks/gpu_check.sh [OUT_DIR]    # on a CPU: the same steps at toy sizes (checks the script only)
#
# It assumes what such a machine has: CUDA, a preinstalled PyTorch (any version, not the pinned one),
# transformers and peft; no vLLM, no network. It uses that torch: tracerl is installed with --no-deps into
# a venv that sees the system packages (or put on PYTHONPATH when pip cannot install it). Every model is
# built here — nothing downloads, and the repository is all it brings (well under 64 MiB; the built
# models go to WORK, default /tmp/gpu_check, not to OUT_DIR). Steps, stopping at the first failure:
#   1. the default recipe on cuda (the tiny model built locally: SFT -> eval -> RL -> eval),
#      DEFAULT_STEPS RL steps (default 10; the recipe's own 50 with DEFAULT_STEPS=50);
#   2. a randomly initialised ~0.5B Qwen2-architecture model from a config, a few RL steps in bf16 with
#      gradient checkpointing, the policy sharded by FSDP2 over NCCL at world size 1
#      (benchmarks/gpu_qwen_rl.py): tokens/s, step time, peak GPU memory and MFU.
# Each step runs under a timeout; the whole check is meant to take at most 8 minutes on one H100/H200.
# Missing pure-Python dependencies of tracerl (pydantic, jsonschema, ...) are named; with WHEELS=DIR they
# are installed offline from that folder of wheels (`pip download -d DIR pydantic jsonschema psutil`
# on a machine with network).
set -euo pipefail

OUT=${1:-runs/gpu_check-$(date +%Y%m%d-%H%M%S)}
WORK=${WORK:-/tmp/gpu_check}
PY=${PYTHON:-python3}
DRY=${DRY:-0}
DEFAULT_STEPS=${DEFAULT_STEPS:-10}
DEVICE=cuda
[ "$DRY" = 1 ] && DEVICE=cpu && DEFAULT_STEPS=1
START=$(date +%s)

die() { echo "gpu_check: FAILED: $*" >&2; exit 1; }
elapsed() { echo "$(( $(date +%s) - START )) s"; }

[ -f pyproject.toml ] && [ -d src/tracerl ] || die "run it from the tracerl repository root"
"$PY" -c 'import torch' 2>/dev/null || die "$PY has no torch; set PYTHON to the python with the machine's PyTorch"
if [ "$DRY" != 1 ]; then
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || die "no CUDA device visible to torch"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
"$PY" -c 'import torch, transformers; print(f"torch {torch.__version__} (cuda {torch.version.cuda}), transformers {transformers.__version__}")'
mkdir -p "$OUT" "$WORK"

echo "== 0/2 tracerl beside the machine's torch (--no-deps) =="
VENV="$WORK/venv"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv --system-site-packages "$VENV" || die "could not create a venv with $PY"
fi
if "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$WORK/pip.log" 2>&1 \
   && "$VENV/bin/python" -c 'import torch' 2>>"$WORK/pip.log"; then
  RUN=("$VENV/bin/python")
else  # no pip / setuptools in the venv, or $PY is itself a venv (whose packages a new venv does not see)
  echo "no venv install (see $WORK/pip.log); running tracerl from src/ on PYTHONPATH with $PY"
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
  RUN=("$PY")
fi
"${RUN[@]}" -c 'import torch; print("using torch", torch.__version__, "from", torch.__file__)'
MISSING=$("${RUN[@]}" - <<'PY'
import importlib.util
need = ["pydantic", "yaml", "safetensors", "tokenizers", "numpy", "tqdm", "sympy", "jsonschema", "psutil", "rich"]
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$MISSING" ]; then
  [ -n "${WHEELS:-}" ] || die "tracerl needs $MISSING, which this machine lacks; give WHEELS=DIR with their wheels"
  "${RUN[0]}" -m pip install -q --no-index --find-links "$WHEELS" $MISSING || die "installing $MISSING from $WHEELS"
fi

report() {  # tokens/s and step time of one run, from its metrics.jsonl
  "${RUN[@]}" - "$1" <<'PY' || exit 1
import json, statistics, sys
from pathlib import Path
run = Path(sys.argv[1])
rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
rl = [r for r in rows if r.get("stage") == "rl" and "throughput/tokens_per_s" in r]
if not rl:
    sys.exit(f"gpu_check: FAILED: {run} logged no RL step")
step = [r.get("time/rollout_s", 0.0) + r.get("time/learner_s", 0.0) for r in rl]
print(f"{run.name}: {len(rl)} RL steps | rollout tokens/s {statistics.mean(r['throughput/tokens_per_s'] for r in rl):.0f} | "
      f"step {statistics.mean(step):.2f} s (rollout {statistics.mean(r.get('time/rollout_s', 0) for r in rl):.2f} s, "
      f"learner {statistics.mean(r.get('time/learner_s', 0) for r in rl):.2f} s)")
for e in json.loads((run / "summary.json").read_text())["evals"]:
    print(f"  held-out after {e['after']}: {e['eval/success']:.3f}")
PY
}

echo "== 1/2 the default recipe on $DEVICE ($DEFAULT_STEPS RL steps) =="
DEF=(default "model.device=$DEVICE" "rl.steps=$DEFAULT_STEPS" run.progress=false "run.dir=$OUT/default")
[ "$DRY" = 1 ] && DEF+=(sft.epochs=1 eval.tasks=4 eval.samples=1 'eval.k=[1]')
timeout 240 "${RUN[@]}" -m tracerl.cli train "${DEF[@]}" >"$OUT/default.log" 2>&1 \
  || { tail -20 "$OUT/default.log" >&2; die "the default recipe on $DEVICE (exit $?)"; }
report "$OUT/default"
echo "elapsed $(elapsed)"

echo "== 2/2 random ~0.5B Qwen2, bf16, gradient checkpointing, FSDP2 world size 1 over $([ "$DRY" = 1 ] && echo gloo || echo NCCL) =="
Q=(benchmarks/gpu_qwen_rl.py --work "$WORK")
[ "$DRY" = 1 ] && Q+=(--dry)
timeout 220 "${RUN[@]}" "${Q[@]}" >"$OUT/qwen.log" 2>&1 || { tail -20 "$OUT/qwen.log" >&2; die "the Qwen2 RL steps (exit $?)"; }
grep -E "^(built|qwen2-)" "$OUT/qwen.log"
echo "gpu_check: OK in $(elapsed) ($OUT)"
