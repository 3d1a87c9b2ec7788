#!/usr/bin/env bash
# The programs the test suite drives beyond the Python packages of `pip install -e '.[test]'`:
# installed from Debian's packages when one is missing. `make test`, `make test-engines` and
# .ci/run call it first; when everything is there it costs a few milliseconds.
#
#   bash scripts/install-test-tools.sh
#
# As root on Debian/Ubuntu (apt-get) it installs what is missing. Otherwise it prints one line
# naming the command to run and exits 1 (`make test INSTALL_TOOLS=no` runs the suite anyway, the
# tests of what is missing skipping and saying so).
#
# Not installed here, because no Debian package can give them; their tests skip saying why:
# - s3fs: every s3fs release that speaks to S3 through aiobotocore needs an older botocore than
#   the one constraints.txt pins (tests/integration/test_clients.py).
# - docker compose: the compose plugin is Docker's own package, not Debian's (tests/test_deploy.py
#   still checks the compose file against the compose-spec schema).
# - Go 1.21 or newer where the distribution has an older one (Debian 12 has 1.19): minio-go's test
#   (tests/integration/test_sdk_clients.py) needs it; https://go.dev/doc/install puts one in
#   /usr/local/go. Where Debian's golang-go is new enough, it is installed.
set -euo pipefail
# Where Debian puts nginx (/usr/sbin, not on a user's PATH) and where Go's own install puts go;
# `make test` gives the tests the same PATH.
PATH="$PATH:/usr/sbin:/sbin:/usr/local/go/bin"

packages=()
# need PROGRAM PACKAGE...: PACKAGE... when PROGRAM is not on PATH.
need() {
    command -v "$1" >/dev/null 2>&1 || packages+=("${@:2}")
}

python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || packages+=(python3-venv)  # make's .venv
# The compiled SigV4 check, which `pip install` builds (gateway/s3api/auth/_sigv4check.c) and `make test`
# requires: a C compiler, the headers of the Python that makes the .venv, OpenSSL's libcrypto headers.
need gcc gcc
python3 -c 'import os, sysconfig; raise SystemExit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' \
    >/dev/null 2>&1 || packages+=(python3-dev)
[ -e /usr/include/openssl/sha.h ] || packages+=(libssl-dev)
need redis-server redis-server     # shared metadata, fleets, Sentinel and Cluster (tests/redis_fixtures.py)
need redis-cli redis-tools         # creating the Redis Cluster of tests/redis_fixtures.py
need rclone rclone                 # client tests (tests/integration/test_clients.py, test_docs_clients.py)
need s3cmd s3cmd
need openssl openssl               # test certificates for TLS; the fleet walk-through (docs/fleet.md)
need curl curl                     # the fleet walk-through
need nginx nginx                   # the smoke run of bench/cache_serving.py --hits; the fleet's balancer
need wrk wrk
need systemd-analyze systemd       # deploy/systemd's unit verified and rated (tests/test_deploy.py)
# The admin dashboard and the demo in a real browser (tests/admin/); the tests use these paths.
[ -x /usr/bin/chromium ] || packages+=(chromium)
[ -x /usr/bin/chromedriver ] || packages+=(chromium-driver)
# The SDK clients of tests/clients/ (built by tests/clients/build.sh) and the engines' Maven downloads.
{ command -v node && command -v npm; } >/dev/null 2>&1 || packages+=(nodejs npm)
need mvn maven
need javac default-jdk-headless

go_note=""
if ! command -v go >/dev/null 2>&1; then
    candidate="$(apt-cache policy golang-go 2>/dev/null | sed -n 's/^ *Candidate: \(.*:\)\{0,1\}\([0-9.]*\).*/\2/p')"
    if [ -n "$candidate" ] && [ "$(printf '%s\n1.21\n' "$candidate" | sort -V | head -1)" = "1.21" ]; then
        packages+=(golang-go)
    else
        go_note="no Go 1.21 or newer here (${candidate:+the distribution has $candidate; }minio-go's test skips): see https://go.dev/doc/install"
    fi
fi

if [ ${#packages[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "install-test-tools: apt-get install ${packages[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
    else
        how="sudo apt-get install -y ${packages[*]}"
        command -v apt-get >/dev/null 2>&1 || how="install the programs of these Debian packages: ${packages[*]}"
        echo "install-test-tools: the tests drive programs missing here; run: $how (or make test INSTALL_TOOLS=no to run without them, their tests skipping)" >&2
        exit 1
    fi
fi
if [ -n "$go_note" ]; then
    echo "install-test-tools: $go_note" >&2
fi
