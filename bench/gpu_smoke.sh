#!/usr/bin/env bash
# GPU smoke test (not run in CI): a `--limit 20` standard run of a small ungated model with a
# registered bfcl handler, generated through vLLM and scored; prints wall time and tokens/s.
#
# Needs one GPU, this project installed with the vllm extra (`pip install .[vllm]`, which also
# brings transformers for bfcl's tokenizer handling), and the model's weights downloadable or
# already in the Hugging Face cache (HF_HOME). Nothing here is needed by the test suite.
#
#   bench/gpu_smoke.sh                      # Qwen/Qwen3-0.6B (bfcl's QwenHandler), 20 base
#   MODEL=Salesforce/xLAM-2-1b-fc-r LIMIT=5 bench/gpu_smoke.sh
#
# Environment: MODEL, LIMIT (20), CATEGORY (multi_turn_base), RUNS_DIR (runs), RUN (a fresh
# name), PYTHON (python), EXTRA (more `careful generate` options, e.g. "--endpoint URL").
set -euo pipefail

MODEL="${MODEL:-Qwen/Qwen3-0.6B}"
LIMIT="${LIMIT:-20}"
CATEGORY="${CATEGORY:-multi_turn_base}"
RUNS_DIR="${RUNS_DIR:-runs}"
RUN="${RUN:-gpu-smoke-$(date +%Y%m%d-%H%M%S)}"
PYTHON="${PYTHON:-python}"
EXTRA="${EXTRA:-}"

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
else
  echo "warning: nvidia-smi not found" >&2
fi
"$PYTHON" -c "import vllm, transformers; print('vllm', vllm.__version__)" || {
  echo "vllm is not installed: pip install .[vllm]" >&2
  exit 2
}

careful() { "$PYTHON" -c 'from careful_cli import main; main()' "$@"; }

start=$(date +%s.%N)
gen_rc=0
# shellcheck disable=SC2086
careful generate --model "$MODEL" --backend vllm --condition standard \
  --categories "$CATEGORY" --limit "$LIMIT" --run "$RUN" --runs-dir "$RUNS_DIR" $EXTRA \
  || gen_rc=$?
end=$(date +%s.%N)
if [ "$gen_rc" -ne 0 ]; then
  echo "careful generate exited $gen_rc; logs: $RUNS_DIR/$RUN/*/generate.log," \
       "$RUNS_DIR/$RUN/*/vllm_serve.log" >&2
  exit "$gen_rc"
fi

score_rc=0
careful score "$RUNS_DIR/$RUN" --out "$RUNS_DIR/$RUN/careful-score" --quiet >/dev/null \
  || score_rc=$?
if [ "$score_rc" -gt 1 ]; then  # 1: the ids beyond --limit are missing, as expected
  echo "careful score failed (exit $score_rc)" >&2
  exit "$score_rc"
fi

"$PYTHON" - "$RUNS_DIR/$RUN" "$start" "$end" <<'EOF'
import json
import sys
from pathlib import Path

run, start, end = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
manifests = sorted(run.glob("*/careful_run.json"))
if not manifests:
    sys.exit(f"no manifest under {run}: generation failed (see {run}/*/generate.log)")
m = json.loads(manifests[0].read_text())
tokens = m.get("tokens", {})
session = m["sessions"][-1]
gen = max(float(session.get("seconds") or 0.0), 1e-3)
written = {line["id"] for f in run.glob("*/multi_turn/*_result.json")
           for line in map(json.loads, f.read_text().splitlines())}
scored = [json.loads(x) for x in (run / "careful-score" / "conversations.jsonl")
          .read_text().splitlines()]
ours = [s for s in scored if s["id"] in written]
print(f"model {m['model']} ({m['handler']}), {len(written)} conversations, status {m['status']}")
print(f"wall time {end - start:.1f} s (server start included), generation {gen:.1f} s (server start excluded)")
print(f"requests {tokens.get('requests', 0)}, prompt tokens {tokens.get('prompt', 0):,}, "
      f"output tokens {tokens.get('output', 0):,}")
print(f"output tokens/s {tokens.get('output', 0) / gen:,.1f}, "
      f"prompt tokens/s {tokens.get('prompt', 0) / gen:,.1f}")
if ours:
    ok = sum(s["official_valid"] for s in ours)
    safe = sum(bool(s.get("safe_valid")) for s in ours)
    print(f"BFCL accuracy {ok}/{len(ours)}, effect-safe {safe}/{len(ours)}")
EOF
