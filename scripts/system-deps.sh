#!/usr/bin/env bash
# The system packages twin and its tests need: bubblewrap (the sandbox), git (candidate repositories),
# libseccomp2 (the sandbox's syscall filter), tmux (the `human` model's tests) and Python's venv module.
# As root with apt, installs what is missing; otherwise prints the one command to run and exits 1.
# Quiet and immediate when everything is there.
set -euo pipefail
PY=${PYTHON:-python3}
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v git >/dev/null 2>&1 || need+=(git)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
compgen -G "/usr/lib/*-linux-gnu/libseccomp.so.2" >/dev/null || compgen -G "/lib/*-linux-gnu/libseccomp.so.2" >/dev/null \
  || [ -e /usr/lib64/libseccomp.so.2 ] || need+=(libseccomp2)
if ! "$PY" -c "import ensurepip, venv" >/dev/null 2>&1; then
  need+=("$("$PY" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}-venv")' 2>/dev/null \
    || echo python3-venv)")
fi
[ "${#need[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${need[*]} (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  # apt's own chatter (debconf without apt-utils, …) only when the install fails
  log=$(mktemp)
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    rm -f "$log"
    echo "apt-get install ${need[*]} failed (above: its last lines)" >&2
    exit 1
  fi
  rm -f "$log"
  exit 0
fi
if command -v apt-get >/dev/null 2>&1; then
  echo "twin needs ${need[*]}; install them first: sudo apt-get install -y ${need[*]}" >&2
else
  echo "twin needs ${need[*]}; install them first with your system's package manager" >&2
fi
exit 1
