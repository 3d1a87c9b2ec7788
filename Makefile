# Two commands on a fresh Debian/Ubuntu machine with Python 3.11:
#   make demo   - start the gateway in front of a demo origin on loopback
#   make test   - run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-engines typecheck install clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[demo,test]'
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/gateway demo

test: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pytest $(PYTEST_ARGS)

# Real query engines against the gateway (tests/engines): Trino and the S3A jars from Maven Central, cached in
# ~/.cache/s3gw-engines ($S3GW_ENGINES_CACHE), and pyspark (the `engines` extra); left out of `make test` by the `engines` marker.
$(BIN)/.installed-engines: $(BIN)/.installed
	$(BIN)/pip install --quiet -e '.[demo,test,engines]'
	touch $@

test-engines: $(BIN)/.installed-engines
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pytest -m engines tests/engines $(PYTEST_ARGS)

# mypy over gateway/ (configuration in pyproject.toml).
typecheck: install
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
