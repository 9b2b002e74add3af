#!/usr/bin/env bash
# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").
#
# The Debian packages the test suite uses for real: redis-server (the Redis cache backend's tests start their own
# loopback server; not needed when REDIS_URL names one), bubblewrap (`bwrap`, the python tool's sandbox) and chromium
# (the evaluation report and LLaMA-Board tests drive a real headless browser through Playwright, which never downloads
# its own; AGENTIC_CHROMIUM names another binary).
#
# Run by `make test` and `make test-fast` before pytest. All present: exits 0 and prints nothing. Some missing: as
# root with apt-get, installs exactly those (`apt-get update`, then `apt-get install`) and checks again; otherwise
# exits 1 at once with the one command to run. Uses only bash built-ins, `id` and `apt-get`
# (tests/integration/test_system_deps.py runs it with a fake PATH).
set -u

find_missing() {
  missing=()
  if [ -z "${REDIS_URL:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
    missing+=(redis-server)
  fi
  command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
  if [ -z "${AGENTIC_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
    missing+=(chromium)
  fi
}

if [ -n "${AGENTIC_CHROMIUM:-}" ] && [ ! -x "$AGENTIC_CHROMIUM" ]; then
  echo "AGENTIC_CHROMIUM=$AGENTIC_CHROMIUM is not an executable file: fix it, or unset it to use Debian's chromium" >&2
  exit 1
fi
find_missing
[ ${#missing[@]} -eq 0 ] && exit 0

command_line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u 2>/dev/null)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "The tests need these system packages, which are not installed: ${missing[*]}." >&2
  if command -v apt-get >/dev/null 2>&1; then
    echo "Install them, then run make again:  sudo $command_line" >&2
  else
    echo "Install them with your system's package manager (Debian/Ubuntu: sudo $command_line), then run make again." >&2
  fi
  exit 1
fi

echo "Installing the system packages the tests need (apt-get, as root): ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -qq || ! apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  echo "apt-get could not install ${missing[*]}; run it yourself, then make again:  $command_line" >&2
  exit 1
fi
installed=("${missing[@]}")
find_missing
if [ ${#missing[@]} -ne 0 ]; then
  echo "apt-get installed ${installed[*]} but ${missing[*]} is still not on PATH ($PATH)" >&2
  exit 1
fi
