#!/usr/bin/env bash
# The GPU check, as one script: the exactness suites on CUDA (TEVVIZ_TEST_DEVICE=cuda), then the verifier stage (TEV
# against predraw at B = 32-256), the end-to-end table (the few-row path is CPU-only, so off there by construction),
# the plain baseline's ways, and a scan under torchrun on cuda, all on the embedded pair. Results go to $OUT (default
# benchmarks/results/device); name the card when copying them into benchmarks/results/.
# On a machine without transformers >= 5.24 (5.0-5.23 leave the KV caches empty), put its wheels in .whl/ first.
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/device}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 3
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
  torch.cuda.get_device_name(0))"

# Greedy = generate, caches in line, the laws and the planted faults, with every tiny model on the GPU.
TEVVIZ_TEST_DEVICE=cuda timeout "${TEST_S:-210}" python3 -m pytest -p no:cacheprovider -n 8 -rfE --tb=short \
  tests/engine/verify/test_exactness.py tests/engine/verify/test_laws.py tests/engine/verify/test_faults.py \
  tests/engine/draft/test_eagle3_drafting.py tests/engine/verify/test_eagle3_law.py 2>&1 | tee "$OUT/tests_cuda.log" | tail -60

cd benchmarks
timeout "${STAGE_S:-100}" python3 verifier_stage.py --device cuda --limit 4 --budgets 32,64,128,256 \
  --out "$OUT/verifier_stage_cuda.json" 2>&1 | tail -8
timeout 60 python3 verifier_stage.py --device cuda --limit 4 --block ../assets/models/tevviz-stdlib-block-draft \
  --budgets 16,64,256 --out "$OUT/verifier_stage_block_cuda.json" 2>&1 | tail -5
[ "${E2E:-1}" = 0 ] || timeout 110 python3 end_to_end.py --device cuda --baselines --limit 4 --temperatures 0,1 \
  --out "$OUT/end_to_end_cuda.json" 2>&1 | tail -26
# Which plain way is fastest on the card (engine/decode/plain.py), on one prompt.
timeout 60 python3 -m tevviz decode --device cuda --prompt "def read_lines(path):" --max-new-tokens 64 --ignore-eos \
  --baseline --json 2>/dev/null | tail -1 > "$OUT/baseline_ways_cuda.json"
# A scan under torchrun on the card (one rank per visible GPU), merged.
cd ..
rm -rf "$OUT/scan_torchrun"
head -8 assets/scan_prompts/stdlib.jsonl > "$OUT/scan_prompts.jsonl"
timeout 120 python3 -m torch.distributed.run --standalone --nproc_per_node "$(nvidia-smi -L | wc -l)" -m tevviz scan \
  "$OUT/scan_prompts.jsonl" --device cuda --max-new-tokens 16 --shard auto -o "$OUT/scan_torchrun" 2>&1 | tail -4
timeout 60 python3 -m tevviz scan merge "$OUT/scan_torchrun" -o "$OUT/scan_torchrun_merged" 2>&1 | tail -2
