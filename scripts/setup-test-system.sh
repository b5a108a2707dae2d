#!/usr/bin/env bash
# System packages the tests need: Debian's chromium for the real-browser test (Playwright drives it;
# no browser is downloaded). Skipped when already installed.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  echo "setup: installing Debian's chromium for the browser test" >&2
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq chromium >/dev/null
fi
