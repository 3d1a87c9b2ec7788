# Two commands on a fresh Debian/Ubuntu machine with Python 3.11:
#   make demo   - start the gateway in front of a demo origin on loopback
#   make test   - run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-engines typecheck install lock clean

# Every install takes the versions of constraints.txt: the ones the suite last passed with, so that a
# release upstream cannot change what a fresh machine (CI) tests or what a deployment runs.
$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[demo,test]'
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/gateway demo

test: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pytest $(PYTEST_ARGS)

# Real query engines against the gateway (tests/engines): Trino and the S3A jars from Maven Central, cached in
# ~/.cache/s3gw-engines ($S3GW_ENGINES_CACHE), and pyspark (the `engines` extra); left out of `make test` by the `engines` marker.
$(BIN)/.installed-engines: $(BIN)/.installed
	$(BIN)/pip install --quiet -c constraints.txt -e '.[demo,test,engines]'
	touch $@

test-engines: $(BIN)/.installed-engines
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pytest -m engines tests/engines $(PYTEST_ARGS)

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
