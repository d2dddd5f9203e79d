#!/usr/bin/env bash
# The demo: same setup as scripts/test.sh, then `python -m sskv_mapping.demo` (arguments passed on).
set -euo pipefail
# shellcheck source=scripts/_setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"

exec "$VENV_PYTHON" -m sskv_mapping.demo "$@"
