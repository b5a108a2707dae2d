#!/usr/bin/env bash
# Re-pin the CPU environment: requirements-cpu.in -> requirements-cpu.lock (needs uv).
set -euo pipefail
cd "$(dirname "$0")/.."
uv pip compile requirements-cpu.in --override requirements-cpu.overrides \
  --excludes requirements-cpu.excludes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --no-header -o requirements-cpu.lock
