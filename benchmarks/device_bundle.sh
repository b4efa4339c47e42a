#!/bin/bash
# Build ./.whl for the lent GPU machine (CPython 3.12, reaches no registry) within the 64 MiB a call
# may carry: the project's wheels (../shared/device/wheels.sh) plus Ray, minus the large packages the
# GPU image already has, and Ray itself slimmed (no Java jars, dashboard web build, or rllib/serve/
# train/tune/data/llm libraries, none of which `egg bench --ray` imports) into .whl/ray.tar.xz.
# Usage, from the project root:  benchmarks/device_bundle.sh
# On the device, start each command with:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && tar xJf .whl/ray.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PWD || exit;
set -euo pipefail
../shared/device/wheels.sh ray >/dev/null
cd .whl
# on the image already (KINDS.md's package list), and large
rm -f matplotlib-* pillow-* fonttools-* kiwisolver-* contourpy-* cycler-* pyparsing-* cuda_bindings-* \
  cuda_pathfinder-* cuda_toolkit-* tiktoken-* regex-* protobuf-* pyyaml-* msgpack-* xxhash-*
tmp=$(mktemp -d)
unzip -q ray-*.whl -d "$tmp"
rm -rf "$tmp"/ray/{jars,dashboard/client/build,rllib,serve,train,tune,data,llm}
tar -C "$tmp" -cf - . | xz -T0 -6 > ray.tar.xz
rm -rf "$tmp" ray-*.whl
du -sh .
