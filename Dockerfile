# The project's image for every Airflow service in docker-compose.yaml.
# Built from the same pinned requirements.txt the local install uses, so what runs in the cluster
# is what the tests ran.
FROM apache/airflow:3.3.2-python3.11

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
