# shellcheck shell=bash
# Shared setup for scripts/test.sh and scripts/demo.sh; sourced, not run.
#
# Makes sure that mosquitto is installed (tests and the demo start private brokers on loopback ports)
# and that .venv holds an editable install of this project with its dev extra. Leaves the caller in
# the repository root with VENV_PYTHON set. Works on a fresh Debian/Ubuntu machine that has only
# Python 3.11+ and pip: as root it installs what is missing with apt-get, otherwise it says what to run.
#
# Environment: PYTHON (default python3) is the interpreter the venv is made from.

set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

PYTHON="${PYTHON:-python3}"
VENV_DIR="$REPO_ROOT/.venv"
VENV_PYTHON="$VENV_DIR/bin/python"
# Holds the hash of what the last successful `pip install` saw; equal hash -> skip pip (fast reruns).
INSTALL_STAMP="$VENV_DIR/.sskv-dev-install"

_sskv_is_root() { [ "$(id -u)" -eq 0 ]; }

_sskv_have_mosquitto() {
    # Same search as sskv_mapping.emulator.broker.find_mosquitto: PATH, then /usr/sbin (where Debian puts
    # it; not on a normal user's PATH) and /usr/local/sbin. Not `command -v`: bash reports a
    # non-executable file when it finds no executable one.
    local dir IFS=:
    for dir in $PATH /usr/sbin /usr/local/sbin; do
        if [ -f "${dir:-.}/mosquitto" ] && [ -x "${dir:-.}/mosquitto" ]; then
            return 0
        fi
    done
    return 1
}

_sskv_apt_install() {
    # Installing a server package starts its system service on Debian; the tests never use that broker
    # (and it would listen on port 1883), so service starts are refused while we install, via the
    # standard policy-rc.d hook -- unless the machine already has a policy of its own.
    local own_policy=0 status=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        own_policy=1
    fi
    {
        apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    } || status=$?
    if [ "$own_policy" -eq 1 ]; then
        rm -f /usr/sbin/policy-rc.d
    fi
    return "$status"
}

_sskv_ensure_mosquitto() {
    if _sskv_have_mosquitto; then
        return 0
    fi
    if _sskv_is_root && command -v apt-get >/dev/null 2>&1; then
        echo "mosquitto not found: installing it with 'apt-get install mosquitto'"
        _sskv_apt_install mosquitto
        if _sskv_have_mosquitto; then
            return 0
        fi
    fi
    echo "mosquitto is required: run 'sudo apt-get install mosquitto'" >&2
    exit 1
}

_sskv_ensure_chromium() {
    # Called by scripts/test.sh only (not the demo). The inspector's browser tests (tests/emulator/inspector)
    # drive Debian's headless Chromium through its chromedriver. Installed like mosquitto when we are root;
    # otherwise (or if apt cannot) those tests skip, saying why. SSKV_NO_BROWSER=1 skips the install.
    if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
        return 0
    fi
    if [ "${SSKV_NO_BROWSER:-0}" = "1" ]; then
        return 0
    fi
    if _sskv_is_root && command -v apt-get >/dev/null 2>&1; then
        echo "chromium not found: installing it with 'apt-get install chromium chromium-driver' (browser tests)"
        _sskv_apt_install chromium chromium-driver ||
            echo "could not install chromium: the inspector's browser tests will be skipped" >&2
    fi
}

_sskv_ensure_python() {
    if ! command -v "$PYTHON" >/dev/null 2>&1; then
        echo "$PYTHON not found: Python 3.11 or newer is required (set PYTHON=/path/to/python3.11)" >&2
        exit 1
    fi
    if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "$PYTHON is Python $("$PYTHON" -c 'import platform; print(platform.python_version())');" \
            "3.11 or newer is required (set PYTHON=/path/to/python3.11)" >&2
        exit 1
    fi
    # Debian's python3 ships venv without ensurepip; `python3 -m venv` then fails half-way.
    if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        if _sskv_is_root && command -v apt-get >/dev/null 2>&1; then
            echo "python venv support not found: installing it with 'apt-get install python3-venv'"
            _sskv_apt_install python3-venv
        fi
        if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
            echo "python venv support is required: run 'sudo apt-get install python3-venv'" >&2
            exit 1
        fi
    fi
}

_sskv_ensure_venv() {
    # A venv whose base interpreter is gone (Python upgraded or removed) has a dangling bin/python.
    if [ -L "$VENV_PYTHON" ] && [ ! -e "$VENV_PYTHON" ]; then
        echo "recreating .venv (the python it was made from is gone)"
        rm -rf "$VENV_DIR"
    fi
    if [ ! -e "$VENV_PYTHON" ]; then
        echo "creating .venv with $PYTHON"
        "$PYTHON" -m venv "$VENV_DIR"
    fi
    local stamp
    stamp="$("$VENV_PYTHON" - <<'PY'
import hashlib, sys
h = hashlib.sha256(sys.version.encode())
h.update(open("pyproject.toml", "rb").read())
print(h.hexdigest())
PY
)"
    if [ -f "$INSTALL_STAMP" ] && [ "$(cat "$INSTALL_STAMP")" = "$stamp" ] &&
        "$VENV_PYTHON" -c 'import sskv_mapping, pytest, aiomqtt' >/dev/null 2>&1; then
        return 0
    fi
    echo "installing sskv-mapping[dev] into .venv (pip install -e '.[dev]')"
    rm -f "$INSTALL_STAMP"
    "$VENV_PYTHON" -m pip install -q --disable-pip-version-check -e '.[dev]'
    printf '%s\n' "$stamp" >"$INSTALL_STAMP"
}

_sskv_ensure_mosquitto
_sskv_ensure_python
_sskv_ensure_venv
