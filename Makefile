# Both entry points create .venv on first use.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: serve test bench vendor clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/kvscope serve $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench

# Re-download the pinned htmx release into static/vendor/ (checks its npm integrity); commit the result.
vendor: $(STAMP)
	$(BIN)/python scripts/vendor_assets.py

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
