#!/usr/bin/env bash
# The device check for a machine with one CUDA GPU (docs/engines.md; issue 15 item 6).
#
#   benchmarks/gpu_check.sh /models/Qwen2.5-0.5B-Instruct [OUT_DIR]
#
# MODEL: a local Hugging Face causal-LM directory with a chat template (~0.5B parameters; nothing is
# downloaded). Needs `pip install -e '.[test,vllm]'` on the GPU machine. It runs, and stops with a
# non-zero exit at the first failure:
#   1. the engine conformance suite including the vLLM engine (tests marked gpu);
#   2. SFT -> eval -> RL (a few steps) -> eval with vLLM rollouts in bfloat16, full fine-tuning;
#   3. the same with LoRA r=8 on the torch engine (vLLM + LoRA is not wired yet);
# and prints tokens/s and seconds per RL step of each run, plus the engine probe's largest
# |vLLM - learner| log-prob. Expected wall time on one H100/H200: well under 10 minutes.
#
set -euo pipefail

MODEL=${1:?usage: benchmarks/gpu_check.sh MODEL_DIR [OUT_DIR]}
OUT=${2:-runs/gpu_check-$(date +%Y%m%d-%H%M%S)}
PY=${PYTHON:-.venv/bin/python}
TRACERL=("${TRACERL:-$(dirname "$PY")/tracerl}")

die() { echo "gpu_check: FAILED: $*" >&2; exit 1; }

[ -x "${TRACERL[0]}" ] || die "${TRACERL[0]} is not the tracerl command (set PYTHON to the venv's python)"
[ -d "$MODEL" ] || die "$MODEL is not a directory (give a local Hugging Face model directory)"
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || die "no CUDA device visible to torch"
"$PY" -c 'import vllm' || die "vLLM is not importable; pip install -e '.[vllm]'"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

echo "== 1/3 engine conformance (torch, hf, remote, vllm) =="
"$PY" -m pytest tests/rollout/test_engine_conformance.py -m "gpu or not gpu" -q -p no:cacheprovider \
  || die "engine conformance suite"

COMMON=(
  "model.path=$MODEL" model.dtype=bfloat16 model.device=cuda
  engine.name=vllm engine.gpu_memory_utilization=0.3
  env.train_tasks=300 env.heldout_tasks=32 sft.demos=128 sft.epochs=1 sft.batch_size=8 sft.lr=1e-5
  rl.steps=4 rl.prompts_per_step=8 rl.group_size=4 rl.lr=1e-6 rl.minibatches=1 rl.eval_every=0
  rl.checkpoint_every=0 eval.tasks=32 eval.samples=2 'eval.k=[1, 2]'
  gates.probe_logprob_diff_max=1.0 run.threads=4 run.progress=false
)

report() {  # tokens/s and step time of one run, from its metrics.jsonl
  "$PY" - "$1" <<'PY' || exit 1
import json, statistics, sys
from pathlib import Path
run = Path(sys.argv[1])
rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
rl = [r for r in rows if r.get("stage") == "rl" and "throughput/tokens_per_s" in r]
if not rl:
    sys.exit(f"gpu_check: FAILED: {run} logged no RL step")
step_s = [r.get("time/rollout_s", 0.0) + r.get("time/learner_s", 0.0) for r in rl]
probe = [r["probe/logprob_absdiff_max"] for r in rows if "probe/logprob_absdiff_max" in r]
print(f"{run.name}: {len(rl)} RL steps | tokens/s {statistics.mean(r['throughput/tokens_per_s'] for r in rl):.0f} | "
      f"step {statistics.mean(step_s):.1f} s (rollout {statistics.mean(r.get('time/rollout_s', 0) for r in rl):.1f} s) | "
      f"probe max |vllm - learner| log-prob {max(probe) if probe else float('nan'):.3g} over {len(probe)} probes")
for e in json.loads((run / "summary.json").read_text())["evals"]:
    print(f"  held-out after {e['after']}: {e['eval/success']:.3f}")
PY
}

echo "== 2/3 SFT -> RL, vLLM rollouts, bfloat16, full fine-tuning =="
t0=$(date +%s)
"${TRACERL[@]}" train default "${COMMON[@]}" "run.dir=$OUT/full" || die "full fine-tuning run (exit $?)"
echo "wall $(( $(date +%s) - t0 )) s"
report "$OUT/full"

echo "== 3/3 SFT -> RL, bfloat16, LoRA r=8 (torch engine on the GPU) =="
# LoRA rollouts run on the torch engine: vLLM would need the adapter merged into the weights it is sent,
# which the sync does not do yet (engine.name vllm with model.lora is refused at load).
LORA=()
for kv in "${COMMON[@]}"; do case "$kv" in engine.*) ;; *) LORA+=("$kv") ;; esac; done
t0=$(date +%s)
"${TRACERL[@]}" train default "${LORA[@]}" model.lora.r=8 rl.lr=1e-5 "run.dir=$OUT/lora" || die "LoRA run (exit $?)"
echo "wall $(( $(date +%s) - t0 )) s"
report "$OUT/lora"

echo "gpu_check: OK ($OUT)"
