"""The paper's 18 fine-grained data-analysis task categories (DATAMIND, section 3.1), in the paper's order.

The snake_case ``id`` is what every table stores; ``name`` is what prompts and reports show.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Category:
    id: str
    name: str


CATEGORIES: tuple[Category, ...] = (
    Category("aggregation", "Aggregation"),
    Category("ranking", "Ranking"),
    Category("counting", "Counting"),
    Category("comparison", "Comparison"),
    Category("domain_specific", "Domain Specific"),
    Category("causal_analysis", "Causal Analysis"),
    Category("statistical_analysis", "Statistical Analysis"),
    Category("correlation_analysis", "Correlation Analysis"),
    Category("arithmetic_calculation", "Arithmetic Calculation"),
    Category("descriptive_analysis", "Descriptive Analysis"),
    Category("impact_analysis", "Impact Analysis"),
    Category("fact_checking", "Fact Checking"),
    Category("anomaly_detection", "Anomaly Detection"),
    Category("multi_hop_numerical_reasoning", "Multi-hop Numerical Reasoning"),
    Category("time_based_calculation", "Time-based Calculation"),
    Category("distribution_analysis", "Distribution Analysis"),
    Category("feature_engineering", "Feature Engineering"),
    Category("comprehensive_data_preprocessing", "Comprehensive Data Preprocessing"),
)

CATEGORY_IDS: tuple[str, ...] = tuple(c.id for c in CATEGORIES)
BY_ID: dict[str, Category] = {c.id: c for c in CATEGORIES}


def get(category_id: str) -> Category:
    try:
        return BY_ID[category_id]
    except KeyError:
        raise KeyError(f"unknown category {category_id!r}; known: {', '.join(CATEGORY_IDS)}") from None
