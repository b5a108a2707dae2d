#!/usr/bin/env bash
# System packages the tests need: Debian's chromium for the real-browser test (Playwright drives it;
# no browser is downloaded) with a CJK font (fonts-noto-cjk: InternVL's default system prompt is Chinese),
# libtcmalloc-minimal4, which CPU engines preload (vLLM's CPU tip), and podman, runc
# and debootstrap for the container test (scripts/container.sh builds the CPU image with them).
# Skipped when already installed.
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
fc-list :lang=zh 2>/dev/null | grep -q . || missing+=(fonts-noto-cjk)
ldconfig -p | grep -q libtcmalloc_minimal.so.4 || missing+=(libtcmalloc-minimal4)
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian's ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
