#!/usr/bin/env bash
# Idempotent set-up: builds the project's Python environment once in a cache folder (keyed by the
# hash of the pinned requirements) and links it as .venv. A second call with nothing changed takes
# about a second. VLM_DEMO_INSTALL=cpu|gpu|auto picks the path (auto: gpu when nvidia-smi sees one).
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${VLM_DEMO_CACHE:-$HOME/.cache/vlm-demo}"
uv_version=0.13.9
mode="${VLM_DEMO_INSTALL:-auto}"
if [ "$mode" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then mode=gpu; else mode=cpu; fi
fi
case "$mode" in
  cpu) reqs=(requirements-cpu.lock) ;;
  gpu) reqs=(requirements.txt requirements-test.txt) ;;
  *) echo "VLM_DEMO_INSTALL must be cpu, gpu or auto (got '$mode')" >&2; exit 2 ;;
esac
hash=$(cat "${reqs[@]}" scripts/setup.sh | sha256sum | cut -c1-12)
env="$cache/envs/$mode-$hash"
if [ ! -f "$env/.complete" ]; then
  echo "setup: building the $mode environment in $env (once; a few minutes)" >&2
  uv="$cache/uv-$uv_version/bin/uv"
  if [ ! -x "$uv" ]; then
    python3 -m venv "$cache/uv-$uv_version"
    "$cache/uv-$uv_version/bin/pip" install -q "uv==$uv_version"
  fi
  rm -rf "$env"
  "$uv" venv -q -p "$(command -v python3)" "$env"
  if [ "$mode" = cpu ]; then
    # uv ignores pip's find-links, so it takes PyPI's torch (which has a matching torchvision).
    "$uv" pip sync -q --compile-bytecode -p "$env/bin/python" requirements-cpu.lock
  else
    "$uv" pip install -q --compile-bytecode -p "$env/bin/python" -r requirements.txt -r requirements-test.txt
  fi
  touch "$env/.complete"
fi
ln -sfn "$env" .venv
