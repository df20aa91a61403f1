#!/usr/bin/env bash
# Wheels for a GPU machine that has torch and no network (tools/gpu_session.sh installs them there): monta
# itself (with monta_baselines, monta_analysis and the exchange entry points), DeepSpeed built without ops,
# and the packages monta imports that such an image lacks, for CPython 3.12 on x86-64.
# Run from the checkout: bash tools/gpu_wheels.sh [DIR]   (default .whl, which .git/info/exclude should name)
set -eu
dir=${1:-.whl}
py=${PYTHON:-.venv/bin/python}
mkdir -p "$dir"
plat=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do plat+=(--platform "$p"); done
pin() { "$py" -m pip show "$1" | sed -n 's/^Version: //p'; }
binary=()
for name in pydantic pydantic_core annotated-types typing-inspection hjson jsonschema referencing \
  jsonschema-specifications rpds-py; do
  binary+=("$name==$(pin "$name")")
done
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
  -d "$dir" "${binary[@]}"
DS_BUILD_OPS=0 "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$dir" "deepspeed==$(pin deepspeed)"
rm -f "$dir"/monta-*.whl
"$py" -m pip wheel -q --no-deps --no-build-isolation -w "$dir" .
ls "$dir"
