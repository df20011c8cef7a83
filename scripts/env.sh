#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv.
# Usage: bash scripts/env.sh [extras]   e.g. "test" or "" (runtime only); scripts/demo and scripts/test
# source it. It sets -euo pipefail: do not source it in an interactive shell (use .venv/bin/activate).
# Re-installs only when pyproject.toml, the torch pin or the extras change (a stamp file records
# them); the runtime alone ("") is satisfied by an environment installed with any extras.
# torch: the package asks for a range (pyproject.toml); this script installs exactly the tested CPU
# build, and keeps it pinned while the package and its extras are installed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
extras="${1:-}"
venv="$root/.venv"
python="${PYTHON:-python3}"
torch_pin="torch==2.13.0"
if [ ! -x "$venv/bin/python" ]; then
    echo "smoothrank: creating virtual environment in $venv" >&2
    "$python" -m venv "$venv"
fi
stamp="$venv/.smoothrank-stamp"
pip_quiet() {
    # pip's warnings about this machine's local package index are noise; its exit status is not.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
        | { grep -v "is ignored: it is neither" || true; } >&2
    return "${PIPESTATUS[0]}"
}
hash="$({ cat "$root/pyproject.toml"; echo "$torch_pin"; } | sha256sum | cut -c1-16)"
want="$hash-${extras}"
have="$(cat "$stamp" 2>/dev/null || true)"
# Every extra includes the runtime: the demo ("") takes an environment the tests made as it is.
if [ -z "$extras" ] && [ "${have%%-*}" = "$hash" ]; then
    want="$have"
fi
if [ "$have" != "$want" ]; then
    echo "smoothrank: installing dependencies ($torch_pin CPU build, extras: ${extras:-none})" >&2
    spec="$root"
    [ -n "$extras" ] && spec="$root[$extras]"
    # torch is installed first, alone, so that nothing else can pull a CUDA build, then pinned again
    # beside the package so that no dependency can move it within the package's range
    pip_quiet "$torch_pin"
    pip_quiet -e "$spec" "$torch_pin"
    "$venv/bin/python" -c "import torch, smoothrank" || { echo "smoothrank: install failed" >&2; exit 1; }
    echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
