#!/usr/bin/env bash
# One lent GPU, one call: what a session with a device runs (the device tool's limits: 15 minutes of device
# time, one command, at most 8 files back). The GPU machine has torch but none of monta's other packages and
# no network, so they travel as wheels built on this side (tools/gpu_wheels.sh writes them into .whl/).
#
#   here:   bash tools/gpu_wheels.sh            (once: .whl/ holds monta, DeepSpeed, pydantic, jsonschema, ...)
#   there:  OUT=DIR bash tools/gpu_session.sh   (carry .whl; DIR gets the files listed below)
#
# Writes into $OUT: nvidia-smi.txt; gpu-check.tar.gz (tools/gpu_check.py: every exchange's --check with 4
# ranks sharing the GPU over gloo on CUDA tensors, then one NCCL rank); steps.tar.gz (monta bench step, every
# variant of the mini model, 4 ranks sharing the GPU over gloo and one NCCL rank: records and logs);
# with COMPUTE=1 also compute-r1/r2.{json,md} (tools/gpu_compute_table.py twice, for the spread between runs);
# with HOSTOPS=1 host-ops-r1/r2.json (tools/gpu_host_ops.py twice: the host's time per eager op, and per op of a
# router replayed as one CUDA graph); STEPS=0 skips the steps; session.log. Exit status: 0 when the check and
# the steps run passed, else 1.
set -u
OUT=${OUT:?set OUT to the folder for the results}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
site=/tmp/monta-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
  || { echo "gpu_session: installing .whl/ failed (run tools/gpu_wheels.sh here and carry .whl)"; exit 1; }
export PYTHONPATH="$site" DS_BUILD_OPS=0 PYTHONUNBUFFERED=1 MONTA_WANDB=0 WANDB_MODE=offline
nvidia-smi | tee "$OUT/nvidia-smi.txt"
python3 -c 'import torch, deepspeed; print("torch", torch.__version__, "cuda", torch.version.cuda, "deepspeed", deepspeed.__version__, torch.cuda.get_device_name(0))'
rc=0
python3 tools/gpu_check.py --out /tmp/gpu-check --timeout 240 || rc=1
tar czf "$OUT/gpu-check.tar.gz" -C /tmp gpu-check
if [ "${HOSTOPS:-0}" = 1 ]; then
  for r in r1 r2; do python3 tools/gpu_host_ops.py --out "$OUT/host-ops-$r.json" || rc=1; done
fi
if [ "${STEPS:-1}" = 1 ]; then
mkdir -p /tmp/steps
step=(-m monta.cli bench step --launcher env --model moe-2x70b-mini --steps 3 --warmup 1 --no-wandb --force)
timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node 4 "${step[@]}" --backend gloo \
  --nodes 2 --gpus-per-node 2 --tp 2 --out /tmp/steps/step-gloo4.jsonl >/tmp/steps/step-gloo4.log 2>&1 || rc=1
timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node 1 "${step[@]}" --backend nccl \
  --nodes 1 --gpus-per-node 1 --tp 1 --out /tmp/steps/step-nccl1.jsonl >/tmp/steps/step-nccl1.log 2>&1 || rc=1
python3 - /tmp/steps/*.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:  # every variant's loss: the exchanges move the same numbers, so they agree
    loss = {json.loads(x)["params"]["variant"]: json.loads(x)["metrics"]["loss"] for x in open(f)}
    lo, hi = min(loss.values()), max(loss.values())
    print(f"{f}: {len(loss)} variants, loss {lo:.6f}-{hi:.6f} (spread {(hi - lo) / lo:.1e} relative)")
PY
tar czf "$OUT/steps.tar.gz" -C /tmp steps
fi
[ "${COMPUTE:-0}" = 1 ] || exit $rc
for r in r1 r2; do
  python3 tools/gpu_compute_table.py --out "/tmp/compute-$r" --cluster h100 \
    && cp "/tmp/compute-$r/gpu-compute.json" "$OUT/compute-$r.json" \
    && cp "/tmp/compute-$r/gpu-compute.md" "$OUT/compute-$r.md"
done
exit $rc
