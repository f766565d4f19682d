"""Data quality for every stage output: Great Expectations suites, summaries, and browsable reports.

Entry point: ``validate_table(root, table_name, df_or_arrow, run_id, stage)``; reports land under
``<data root>/reports/`` with ``reports/index.html`` listing them all. Importing this package does not import
Great Expectations (that happens inside ``validate_table``).
"""

from datamind.quality.report_index import rebuild_index
from datamind.quality.suites import TABLE_NAMES, suite_for
from datamind.quality.summaries import consistency_stats, drop_reasons, summarize
from datamind.quality.validate import QualityError, QualityReport, validate_table

__all__ = [
    "TABLE_NAMES",
    "QualityError",
    "QualityReport",
    "consistency_stats",
    "drop_reasons",
    "rebuild_index",
    "suite_for",
    "summarize",
    "validate_table",
]
