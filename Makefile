# queuewire: `make run` runs the main job, `make test` the test suite. Both set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Real JavaScript peers for the interop tests (msgpackr, as bunqueue uses it). Not `npm ci`:
# npm 11 rejects every lock file for msgpackr's nested optional platform packages; versions
# are pinned exactly in package.json, and --omit=optional keeps msgpackr on its pure-JS path.
# bun 1.4.4 (needed to run the Bun-only bunqueue client) ships its binary in an optional
# platform package (@oven/bun-<os>-<arch>) that --omit=optional drops; bun's postinstall
# script then downloads that package from registry.npmjs.org itself. So install scripts must
# not be disabled (--ignore-scripts), and the recipe checks that the binary runs.
NODE_PEERS := tests/interop/node_modules/.package-lock.json

.PHONY: all setup run test docs docs-browser docs-deps bench lint clean vectors generate client-reports mutation releases version-matrix learned tshark

all: test

# The trace extra brings pyspark (the Spark engine of `queuewire trace analyze`), which needs
# Java 17 or later: the recipe says what to install when it is missing, and the Spark tests
# then fail with the same message (they are part of the suite).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench,lint,trace]'
	@java -version >/dev/null 2>&1 || echo "Java 17+ not found: the Spark engine of 'queuewire trace' \
		needs it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: brew install \
		openjdk@17; or set JAVA_HOME). Everything else works without it."
	touch $(STAMP)

$(NODE_PEERS): tests/interop/package.json tests/interop/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd tests/interop && npm install --no-save --omit=optional --no-audit --no-fund \
			--loglevel=error && node_modules/.bin/bun --version >/dev/null || exit 1; \
	else \
		echo "npm not found: the interop tests will be skipped"; \
	fi

# The bunqueue releases the version tests start (2.8.39: protocol 2; 2.9.5: protocol 3), each
# in its own prefix of the release cache outside the repository ($QUEUEWIRE_RELEASES, default
# ~/.cache/queuewire/bunqueue-releases; tests/interop/releases.py); a cached one is skipped.
TEST_RELEASES := 2.8.39 2.9.5

releases: $(STAMP) $(NODE_PEERS)
	$(BIN)/python tests/interop/releases.py install $(TEST_RELEASES)

setup: $(STAMP) $(NODE_PEERS) releases

# Conformance of both reference servers, embedded (in process, ephemeral ports): a summary
# per protocol on the terminal and one HTML report per protocol in reports/ (quicx: both
# profiles side by side). Both suites always run; the target fails if either run fails.
# JOBS cases run at once (cases marked exclusive alone: the verdicts are those of a serial
# run, tests/conformance/test_*_suite.py check it); `make run JOBS=1` runs them one by one.
REPORTS := reports
JOBS    ?= 8

run: $(STAMP)
	$(BIN)/queuewire spec lint
	$(BIN)/queuewire vectors check
	@mkdir -p $(REPORTS)
	@status=0; \
	$(BIN)/queuewire conform server --protocol bunqueue --target embedded --jobs $(JOBS) \
		--html $(REPORTS)/conformance-bunqueue.html --json $(REPORTS)/conformance-bunqueue.json \
		--junit $(REPORTS)/conformance-bunqueue.xml || status=1; \
	$(BIN)/queuewire conform server --protocol quicx --target embedded --jobs $(JOBS) \
		--profile quicx/v1 --profile quicx/1.0.3 \
		--html $(REPORTS)/conformance-quicx.html --json $(REPORTS)/conformance-quicx.json \
		--junit $(REPORTS)/conformance-quicx.xml || status=1; \
	echo "HTML reports: $(REPORTS)/conformance-bunqueue.html $(REPORTS)/conformance-quicx.html"; \
	exit $$status

# The suite runs in TEST_WORKERS processes (pytest-xdist), a test file per worker at a time
# (--dist loadfile: a file's module fixtures, such as the quicx audit's daemon runs, are made
# once); half its time is spent waiting on sockets and servers, so two workers halve it on two
# cores. `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 2

test: $(STAMP) $(NODE_PEERS) releases docs-deps tshark
	$(BIN)/queuewire spec lint
	$(BIN)/lint-imports
	$(BIN)/queuewire vectors check
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

vectors: $(STAMP)
	$(BIN)/queuewire vectors generate

# The generated modules (*_generated.py beside the module whose function writes them: the quicx
# decoding plans and frame loops from spec/quicx, the bare-push Job constructor from the Job
# class), re-emitted; tests/test_generated_code.py fails while one is stale. `--check` after
# a module name only lists the stale ones.
generate: $(STAMP)
	$(BIN)/python -m queuewire.codecs.codegen
	$(BIN)/python -m queuewire.reference_server.bunqueue.codegen

bench: $(STAMP)
	$(BIN)/python benchmarks/codec_bench.py
	$(BIN)/python benchmarks/quicx_bench.py

# The site (Sphinx, furo, MyST; -W: a warning fails the build) into docs/_build/html. The
# protocol reference is generated from spec/ at build time (queuewire.docs). Mermaid diagrams
# are drawn in the browser by mermaid's classic build (dist/mermaid.min.js, one file, a plain
# <script>: ES modules do not load from file://, so the site works opened from disk too),
# unpacked from the npm tarball (pinned: sphinxcontrib-mermaid's default version) into
# docs/_vendor/mermaid, so the site needs no CDN; without npm the site falls back to the CDN.
# The docs tests (tests/docs/) build the site and open it in headless Chromium, over HTTP and
# from file://: `docs-browser` installs Debian's chromium where missing.
MERMAID_VERSION := 11.12.1
MERMAID_JS      := docs/_vendor/mermaid/mermaid.min.js
DOCS_STAMP      := $(VENV)/.docs-installed

$(MERMAID_JS):
	@if command -v npm >/dev/null 2>&1; then \
		tmp=$$(mktemp -d); \
		( cd $$tmp && npm pack --silent mermaid@$(MERMAID_VERSION) >/dev/null && \
		  tar xzf mermaid-$(MERMAID_VERSION).tgz package/dist/mermaid.min.js ) && \
		mkdir -p docs/_vendor/mermaid && cp $$tmp/package/dist/mermaid.min.js $(MERMAID_JS) || \
		echo "could not fetch mermaid $(MERMAID_VERSION) from npm: the docs load it from its CDN"; \
		rm -rf $$tmp; \
	else \
		echo "npm not found: the docs load mermaid from its CDN (the browser test needs it local)"; \
	fi

# Wireshark's CLI for the dissector tests (tests/dissector/: tshark -X lua_script on captures
# the tests make): Debian's tshark (4.0, built with Lua) where missing; without it those tests
# fail, they never skip.
tshark:
	@command -v tshark >/dev/null 2>&1 || \
		{ command -v apt-get >/dev/null 2>&1 && apt-get update -qq && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >/dev/null; } || \
		echo "tshark not found and could not be installed: the dissector tests fail"

docs-browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		{ command -v apt-get >/dev/null 2>&1 && apt-get update -qq && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "chromium not found and could not be installed: the docs browser test fails"

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

# What the docs tests need beside the test extra (`make test` depends on it).
docs-deps: $(DOCS_STAMP) docs-browser $(MERMAID_JS)

docs: docs-deps
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html

# ruff, then the import contracts in pyproject.toml ([tool.importlinter]: the layers, and no
# import cycles between sibling modules), then mypy over src/queuewire as [tool.mypy] configures it
# (strict on spec, codecs and the judge; the stubs come with the lint extra).
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/mypy

clean:
	rm -rf $(VENV) docs/_build .pytest_cache tests/interop/node_modules $(REPORTS)

# Client conformance reports (issue 12): queuewire's own bunqueue client, the PyPI
# bunqueue-client and the npm bunqueue 2.9.5 client (under bun) against `queuewire conform
# client`, side by side, into docs/conformance/clients/, and queuewire's quicx producer and
# worker under each quicx profile into docs/conformance/clients/quicx-<profile>/: index.md
# with each deviation's wire evidence, report.html with every transcript, report.json and
# junit.xml (docs/conformance/client-testee.md says what is judged). Exit status 1 (a client
# deviates) still writes the reports and is not an error here; 2 (a usage error) is.
CLIENT_REPORTS := docs/conformance/clients

# Every published bunqueue release (the ones spec/profiles.yaml names), installed into the
# release cache, probed with `conform detect` and judged with `conform server` under its own
# profile and under bunqueue/v2, into docs/conformance/versions/ (index.md, index.html,
# matrix.json): ~15 min on 2 cores. Exit 1 when detect names another profile for a release
# than the spec does.
version-matrix: $(STAMP) $(NODE_PEERS)
	$(BIN)/python tests/interop/version_matrix.py

# The state machines of the real bunqueue 2.9.5 and of the quicx reference daemon, learned
# from outside (queuewire learn), into docs/conformance/learned/ (about a minute).
learned: $(STAMP) $(NODE_PEERS) releases
	$(BIN)/python tests/interop/learned_pages.py

client-reports: $(STAMP) $(NODE_PEERS)
	@for run in bunqueue/2.9.5: bunqueue/v3:/v3; do \
		profile=$${run%%:*}; dir=$(CLIENT_REPORTS)$${run#*:}; status=0; \
		$(BIN)/queuewire conform client --protocol bunqueue --profile $$profile \
			--testee-cwd tests/interop \
			--testee '../../$(BIN)/python -m queuewire.conformance.client.adapters.queuewire_client' \
			--testee-name queuewire-client \
			--testee '../../$(BIN)/python -m queuewire.conformance.client.adapters.bunqueue_pypi' \
			--testee-name bunqueue-client-pypi \
			--testee 'node_modules/.bin/bun bunqueue_js_testee.mjs' --testee-name bunqueue-npm-2.9.5 \
			--html $$dir/report.html --json $$dir/report.json \
			--junit $$dir/junit.xml --markdown $$dir/index.md || status=$$?; \
		test $$status -le 1 || exit $$status; \
	done
	@status=0; for profile in quicx/v1 quicx/1.0.3; do \
		dir=$(CLIENT_REPORTS)/quicx-$$(echo $$profile | cut -d/ -f2); \
		$(BIN)/queuewire conform client --protocol quicx --profile $$profile \
			--testee '$(BIN)/python -m queuewire.conformance.client.adapters.queuewire_quicx' \
			--testee-name queuewire-quicx --html $$dir/report.html --json $$dir/report.json \
			--junit $$dir/junit.xml --markdown $$dir/index.md || status=$$?; \
		test $$status -le 1 || exit $$status; \
	done

# Mutation testing of the core (issue 31; not part of `make test`): each module of
# tests/mutation/modules.toml mutated by mutmut against its own test files, in a temporary copy
# of the repository, within its time budget, niced, 2 workers. Score and every survivor (file,
# line, diff) in reports/mutation/<module>.txt and .json; scores recorded in tests/README.md.
# `make mutation MODULE=codecs/validation.py` runs one module; MUTATION_ARGS='--ref HEAD'
# mutates the last commit instead of the working tree.
MODULE ?=
MUTATION_ARGS ?=

mutation: $(STAMP)
	$(BIN)/pip install --quiet -e '.[mutation]'
	$(BIN)/python tests/mutation/run.py $(MUTATION_ARGS) $(MODULE)
