# Both entry points create .venv on first use.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
CHROMIUM ?= /usr/bin/chromium
USER_ID  ?= $(shell id -u)

.PHONY: serve test bench fuzz vendor docs-shots clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/kvscope serve $(ARGS)

test: $(CHROMIUM) $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The browser tests drive Debian's Chromium (Playwright cannot download its own here): installed when missing if
# we are root, otherwise one line says what to install.
$(CHROMIUM):
	@if [ "$(USER_ID)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	    echo "make test needs Chromium at $(CHROMIUM): install Debian's chromium package (sudo apt-get install chromium), then re-run" >&2; \
	    exit 1; \
	fi
	@test -x $@ || { echo "chromium was installed, but not at $@" >&2; exit 1; }

bench: $(STAMP)
	$(BIN)/python -m bench

# schemathesis against a local server for a bounded time (ARGS="--seconds 600"); fails on a 5xx or a slow answer.
fuzz: $(STAMP)
	$(BIN)/pip install --quiet -e '.[fuzz]'
	$(BIN)/python scripts/fuzz.py $(ARGS)

# Re-download the pinned npm releases (htmx, plotly.js, Swagger UI into static/vendor/; axe-core into tests/vendor/), checking their npm integrity; commit the result.
vendor: $(STAMP)
	$(BIN)/python scripts/vendor_assets.py

# The docs' screenshots from the real page (scripts/docs_shots.py lists the views): docs/img/VIEW-WIDTH.png.
docs-shots: $(CHROMIUM) $(STAMP)
	$(BIN)/python scripts/docs_shots.py

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
