#!/usr/bin/env bash
# One lent GPU, one call: what a session with a device runs (the device tool's limits: 15 minutes of device
# time, one command, at most 8 files back). The GPU machine has torch but none of monta's other packages and
# no network, so they travel as wheels built on this side (tools/gpu_wheels.sh writes them into .whl/).
#
#   here:   bash tools/gpu_wheels.sh            (once: .whl/ holds monta, DeepSpeed, pydantic, jsonschema, ...)
#   there:  OUT=DIR bash tools/gpu_session.sh   (carry .whl; DIR gets the files listed below)
#
# Writes into $OUT: nvidia-smi.txt; gpu-check.tar.gz (tools/gpu_check.py: every exchange's --check with 4
# ranks sharing the GPU over gloo on CUDA tensors, then one NCCL rank); compute-r1/r2.{json,md}
# (tools/gpu_compute_table.py twice, for the spread between runs); session.log. Exit status: gpu_check's.
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
python3 tools/gpu_check.py --out /tmp/gpu-check --timeout 240
rc=$?
tar czf "$OUT/gpu-check.tar.gz" -C /tmp gpu-check
for r in r1 r2; do
  python3 tools/gpu_compute_table.py --out "/tmp/compute-$r" --cluster h100 \
    && cp "/tmp/compute-$r/gpu-compute.json" "$OUT/compute-$r.json" \
    && cp "/tmp/compute-$r/gpu-compute.md" "$OUT/compute-$r.md"
done
exit $rc
