#!/bin/sh
# Installs the gateway from a source tree with the `python3` on PATH: the one install step of the
# container image (deploy/Dockerfile RUNs this script) and of a plain host (deploy/systemd/), and
# what tests/test_deploy.py runs into a fresh virtualenv.
#
#   deploy/install.sh [SOURCE_DIR]    # default: the checkout this script lives in
#
# It installs the package with its `tables` extra (fastavro and pyarrow, for `gateway load --table`
# and `--footers`, which the node plans), no other extras (the demo origin and the test tools stay
# out of production images), at the versions of constraints.txt, the ones the test suite passed with.
set -eu
# An absolute path, so that pip never takes the argument for the name of a package on an index.
src="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
python3 -m pip install --no-cache-dir --disable-pip-version-check -c "$src/constraints.txt" "$src[tables]"
# The command the image and the unit run must exist and start.
gateway --help >/dev/null
