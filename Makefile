# Two commands on a fresh Debian/Ubuntu machine with Python 3.11 (its venv module) and make:
#   make demo   - start the gateway in front of a demo origin on loopback
#   make test   - run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The tests' PATH: the virtualenv's programs (aws, gateway) first; nginx lives in /usr/sbin, Go's own
# install in /usr/local/go (scripts/install-test-tools.sh looks there too).
TEST_PATH = $(abspath $(BIN)):$$PATH:/usr/sbin:/usr/local/go/bin
# INSTALL_TOOLS=no: run the tests without installing the programs they drive (those tests skip).
INSTALL_TOOLS ?= yes

.PHONY: demo test test-engines typecheck install tools lock clean

# Every install takes the versions of constraints.txt: the ones the suite last passed with, so that a
# release upstream cannot change what a fresh machine (CI) tests or what a deployment runs.
# The demo's install is the package, moto and the AWS CLI alone; the tests' adds the test extra (and so
# counts as the demo's too). pip builds the compiled SigV4 check (gateway/s3api/auth/_sigv4check.c) where
# gcc, Python's headers and libssl-dev are, and leaves it out elsewhere (the gateway then runs its
# pure-Python twin): a change to the C source installs again, which builds it again.
SIGV4_C := gateway/s3api/auth/_sigv4check.c
$(BIN)/.installed-demo: pyproject.toml constraints.txt $(SIGV4_C)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[demo]'
	touch $@

$(BIN)/.installed: pyproject.toml constraints.txt $(SIGV4_C)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[demo,test]'
	touch $@ $(BIN)/.installed-demo

install: $(BIN)/.installed

demo: $(BIN)/.installed-demo
	$(BIN)/gateway demo

# The programs the tests drive (redis-server, chromium, rclone, ...), from Debian's packages when missing:
# see scripts/install-test-tools.sh. First, since it also brings python3-venv for the virtualenv.
tools:
ifneq ($(INSTALL_TOOLS),no)
	bash scripts/install-test-tools.sh
endif

# S3GW_REQUIRE_COMPILED: the tests fail when the compiled SigV4 check was not built (scripts/install-test-tools.sh
# brings what builds it), so that CI cannot test the pure-Python twin alone without saying so; with
# INSTALL_TOOLS=no its tests skip instead, as the others of what is missing do.
REQUIRE_COMPILED ?= $(if $(filter no,$(INSTALL_TOOLS)),,1)
test: tools install
	PATH="$(TEST_PATH)" S3GW_REQUIRE_COMPILED=$(REQUIRE_COMPILED) $(BIN)/pytest $(PYTEST_ARGS)

# Real query engines against the gateway (tests/engines): Trino and the S3A jars from Maven Central, cached in
# ~/.cache/s3gw-engines ($S3GW_ENGINES_CACHE), and pyspark (the `engines` extra); left out of `make test` by the `engines` marker.
$(BIN)/.installed-engines: $(BIN)/.installed
	$(BIN)/pip install --quiet -c constraints.txt -e '.[demo,test,engines]'
	touch $@

test-engines: tools $(BIN)/.installed-engines
	PATH="$(TEST_PATH)" $(BIN)/pytest -m engines tests/engines $(PYTEST_ARGS)

# mypy over gateway/ (configuration in pyproject.toml).
typecheck: install
	$(BIN)/mypy

# constraints.txt from the newest releases of every dependency of every extra, resolved in a throwaway
# virtualenv. Then run `make test test-engines` (with `make clean` first) before committing it.
LOCK_VENV ?= /tmp/s3gw-lock-venv
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/pip install --quiet -e '.[demo,test,engines,advisor]'
	{ sed -n '/^#/p' constraints.txt; $(LOCK_VENV)/bin/pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(LOCK_VENV)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
