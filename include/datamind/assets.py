"""Names of the data products that chain the DAGs (Airflow Assets are built from these URIs).

Kept free of Airflow imports so the package stays importable anywhere; the DAG files wrap them
in ``airflow.sdk.Asset``.
"""

CATALOG_FILES = "datamind://catalog/files"
CATALOG_TABLES = "datamind://catalog/tables"
QUERIES = "datamind://queries"
TRAJECTORIES = "datamind://trajectories"
JUDGED = "datamind://judged"
DATASET = "datamind://dataset"
CHECKPOINTS = "datamind://checkpoints"

# Relative directories under the data root, one per table.
DIRS = {
    "catalog_files": "catalog/files",
    "catalog_tables": "catalog/tables",
    "raw": "raw",
    "queries": "queries",
    "trajectories": "trajectories",
    "judged": "judged",
    "dataset": "dataset",
    "rejections": "rejections",
    "reports": "reports",
    "llm_cache": "cache/llm",
    "llm_batches": "cache/llm_batches",  # batch mode: submissions, held answers, failed requests
    "exports": "exports",
    "runs": "runs",
}
