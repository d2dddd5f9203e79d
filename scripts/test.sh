#!/usr/bin/env bash
# The test command: installs what is missing (mosquitto, .venv with the dev extra, Chromium for the inspector's
# browser tests), then runs pytest.
#
#   scripts/test.sh                      # the whole suite
#   scripts/test.sh tests/protocol -x    # any pytest arguments (replace the defaults below)
#
# Run from anywhere; it works in the repository root.
set -euo pipefail
# shellcheck source=scripts/_setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"
_sskv_ensure_chromium

if [ "$#" -eq 0 ]; then
    set -- -q -p no:cacheprovider
fi
exec "$VENV_PYTHON" -m pytest "$@"
