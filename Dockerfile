# The project's image for every Airflow service in docker-compose.yaml.
# Built from the same pinned requirements.txt the local install uses, so what runs in the cluster
# is what the tests ran.
FROM apache/airflow:3.3.2-python3.11 AS base

USER root
# sqlite3 CLI for inspecting BIRD databases; libgomp for torch on CPU workers.
RUN apt-get update \
 && apt-get install -y --no-install-recommends sqlite3 libgomp1 \
 && rm -rf /var/lib/apt/lists/*
USER airflow

COPY --chown=airflow:root requirements.txt pyproject.toml /opt/datamind/
COPY --chown=airflow:root include /opt/datamind/include
RUN pip install --no-cache-dir -r /opt/datamind/requirements.txt \
 && pip install --no-cache-dir --no-deps -e /opt/datamind

COPY --chown=airflow:root prompts /opt/datamind/prompts
COPY --chown=airflow:root samples /opt/datamind/samples
ENV DATAMIND_PROMPTS_DIR=/opt/datamind/prompts

# The GPU worker (train_agent's queue) also carries the training engines' own environment: LLaMA-Factory pins
# an older transformers/datasets than the pipeline, so it lives in its own venv, which the engine runs.
FROM base AS gpu-worker
COPY --chown=airflow:root requirements-train.txt /opt/datamind/
RUN python -m venv /opt/venv-train \
 && /opt/venv-train/bin/pip install --no-cache-dir -r /opt/datamind/requirements-train.txt
ENV DATAMIND_TRAIN_ENV=/opt/venv-train
# verl (SFT+RL at scale) in a third environment: its transformers range differs from both others. The project
# is installed into it without dependencies, so verl loads the project's tool, turn format and reward; vLLM is
# verl's rollout engine on this CUDA image.
COPY --chown=airflow:root requirements-verl.txt /opt/datamind/
RUN python -m venv /opt/venv-verl \
 && /opt/venv-verl/bin/pip install --no-cache-dir -r /opt/datamind/requirements-verl.txt \
 && /opt/venv-verl/bin/pip install --no-cache-dir vllm -c /opt/datamind/requirements-verl.txt \
 && /opt/venv-verl/bin/pip install --no-cache-dir --no-deps -e /opt/datamind
ENV DATAMIND_VERL_ENV=/opt/venv-verl
