#!/usr/bin/env bash
# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").
#
# Regenerates the README's LLaMA-Board screenshots from the real web UI: runs the browser test
# (tests/webui/test_llamaboard_browser.py: LLaMA-Board in headless Chromium through Playwright, a 2-step arpo run of
# the tiny model, the rollout viewer), which writes a screenshot of every step, and copies the ones the README shows
# into docs/images/. Needs Debian's chromium (as `make test` does); about 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
shots=$(mktemp -d)
trap 'rm -rf "$shots"' EXIT
CUDA_VISIBLE_DEVICES= WANDB_DISABLED=true HF_HUB_OFFLINE=1 AGENTIC_WEBUI_SCREENS="$shots" \
  "$PYTHON" -m pytest -q -p no:cacheprovider -n 0 tests/webui/test_llamaboard_browser.py
mkdir -p docs/images
copy() {  # copy SHOT-PATTERN NAME: the newest screenshot matching the pattern
  local src
  src=$(ls -t "$shots"/*"$1"*.png 2>/dev/null | head -n 1 || true)
  if [ -z "$src" ]; then echo "no screenshot matching '$1' in $shots" >&2; exit 1; fi
  cp "$src" "docs/images/$2" && echo "docs/images/$2 <- $(basename "$src")"
}
copy _arpo_panel llamaboard_panel.png
copy _viewer rollout_viewer.png
