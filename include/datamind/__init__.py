"""DATAMIND data factory: the pipeline logic behind the Airflow DAGs.

Stages, in pipeline order, each a subpackage that imports no Airflow:
``ingest`` -> ``profile`` -> ``synth`` -> ``rollout`` -> ``judge`` -> ``publish`` -> ``train``.
"""

__version__ = "0.1.0"
