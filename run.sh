#!/usr/bin/env bash
# One-step set-up and run for attn-theory on a fresh machine.
#   ./run.sh report [ARGS]   install if needed, then the main job: regenerate reports/
#   ./run.sh test [ARGS]     install if needed, then the test suite (pytest -n auto, ci profile)
#   ./run.sh zoo [ARGS]      install if needed, then check the pinned released implementations
#                            (tests/zoo: each release pip-installed on its own, network needed)
#   ./run.sh env             install if needed and print the activation command
# The environment lives in .venv (override with ATTN_VENV). Installation uses constraints.txt,
# which pins the tested versions (torch 2.13.0 CPU build: an unpinned torch pulls a CUDA build).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
venv="${ATTN_VENV:-$here/.venv}"
py="${PYTHON:-python3}"

install() {
  if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv"
  fi
  stamp="$venv/.attn-theory-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -c constraints.txt -e ".[adapters,dev]"
    touch "$stamp"
  fi
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  report)
    install
    exec "$venv/bin/attn-theory" report "$@" ;;
  test)
    install
    export ATTN_THEORY_PROFILE="${ATTN_THEORY_PROFILE:-ci}"
    exec "$venv/bin/python" -m pytest -n auto "$@" ;;
  zoo)
    install
    export ATTN_THEORY_ZOO=1
    exec "$venv/bin/python" -m pytest tests/zoo -p no:xdist -p no:cacheprovider -rA --durations=0 "$@" ;;
  env)
    install
    echo "source $venv/bin/activate" ;;
  *)
    echo "usage: ./run.sh report [--check|--quick|...] | test [pytest args] | zoo [pytest args] | env" >&2
    exit 2 ;;
esac
