"""Column roles and the grounding rules, on the cases real files showed: CamelCase keys, rates and
temperatures, aliased names, "the table" in a database, a column two tables share."""

from __future__ import annotations

import sqlite3

import pytest

from datamind import grounding as G
from datamind import roles as R


def _profile(name, kind="integer", **kw):
    return {"name": name, "kind": kind, "n_unique": kw.pop("n_unique", 100), **kw}


@pytest.mark.parametrize(
    ("profile", "keys", "want"),
    [
        (_profile("EmployeeID"), (), R.IDENTIFIER),  # CamelCase keys escaped the old rule
        (_profile("OrderID"), (), R.IDENTIFIER),
        (_profile("customer_id"), (), R.IDENTIFIER),
        (_profile("ZipCode", "categorical", n_unique=80), (), R.IDENTIFIER),
        (_profile("Quantity"), ("Quantity",), R.IDENTIFIER),  # a declared key, whatever its name
        (_profile("Temperatur (°C)", "numeric", min="-5", max="31"), (), R.NONADDITIVE),
        (_profile("Wind (km/h)", "numeric", min="0", max="60"), (), R.NONADDITIVE),
        (_profile("UnitPrice", "numeric", min="0.99", max="1.99"), (), R.NONADDITIVE),
        (_profile("discount", "numeric", min="0.0", max="0.3"), (), R.NONADDITIVE),  # a fraction by its range
        (_profile("score", "numeric", min="1", max="90", description=None), (), R.NONADDITIVE),
        (_profile("total", "numeric", min="3", max="900", description="amount charged in euros"), (), R.ADDITIVE),
        (_profile("Quantity"), (), R.ADDITIVE),
        (_profile("Niederschlag (mm)", "numeric", min="0", max="40"), (), R.ADDITIVE),  # rain adds up
        (_profile("year", min="1990", max="2020"), (), R.DATE),
        (_profile("IndepYear", min="-1523", max="1994"), (), R.DATE),  # a year, even before 1800
        (_profile("unabhängiges_jahr", min="-1523", max="1994"), (), R.DATE),
        (_profile("YearsAtCompany", min="0", max="40"), (), R.ADDITIVE),  # a count of years, not a year
        (_profile("region", "categorical", n_unique=4), (), R.CATEGORY),
        (_profile("comment", "text"), (), R.TEXT),
    ],
)
def test_an_analyst_role_for_each_column(profile, keys, want):
    assert R.column_role(profile, keys) == want


def test_corrections_win_by_table_then_column_and_reject_unknown_roles():
    roles = {"Pclass": R.ADDITIVE, "Fare": R.ADDITIVE}
    over = R.parse_overrides(["Pclass=category", "titanic.Fare=nonadditive_measure", "other.Fare=identifier"])
    assert R.apply_overrides("titanic", roles, over) == {"Pclass": R.CATEGORY, "Fare": R.NONADDITIVE}
    with pytest.raises(ValueError, match="unknown column role"):
        R.parse_overrides(["Fare=money"])
    with pytest.raises(ValueError, match="not 'Table.Column=role'"):
        R.parse_overrides(["Fare"])


@pytest.fixture
def atlas(tmp_path):
    """City and Country both have Name and Population; ID is City's key."""
    path = tmp_path / "atlas.sqlite"
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE Country (Code TEXT PRIMARY KEY, Name TEXT, Population INTEGER, LifeExpectancy REAL);
        CREATE TABLE City (ID INTEGER PRIMARY KEY, Name TEXT, CountryCode TEXT REFERENCES Country (Code),
                           Population INTEGER, Temperature REAL);
        CREATE TABLE Genre (GenreId INTEGER PRIMARY KEY, Name TEXT);
        """
    )
    con.close()
    return G.schema_of_database(str(path), "atlas.sqlite")


@pytest.mark.parametrize(
    ("question", "code"),
    [
        ("Which Genre_Name value has the most records?", G.UNGROUNDED),  # an alias no table has
        ("How many records have MediaType.Name equal to 'Protected AAC audio file'?", G.UNGROUNDED),
        ("How many rows and columns does the table have?", G.UNGROUNDED),  # "the table" of three
        ("Which ID has the highest Population?", G.UNGROUNDED),  # Population: City's or Country's?
        ("In the City table, what is the median ID?", G.IDENTIFIER_AS_MEASURE),
        ("In the City table, what is the correlation between Population and ID?", G.IDENTIFIER_AS_MEASURE),
        ("In the City table, what is the standard deviation of ID?", G.IDENTIFIER_AS_MEASURE),
        ("In the City table, what is the total Temperature of cities with CountryCode 'ABC'?", G.NONADDITIVE_SUMMED),
        ("In the City table, which ID has the highest Population?", None),
        ("In the City table, how many rows have Country.Name equal to 'Peru'?", None),
        ("What is the average LifeExpectancy?", None),  # only Country has it
        ("What is the sum of Country.Population over countries named 'Porul_x'?", None),  # values are not names
    ],
)
def test_questions_the_agent_cannot_answer_or_should_not_ask(atlas, question, code):
    problem = G.check_question(question, atlas)
    assert (problem[0] if problem else None) == code, problem


def test_the_schema_print_of_a_session_is_read_back_with_its_keys():
    text = (
        "Database: shop.sqlite\n\nTable orders (3 rows)\n  - order_id INTEGER PRIMARY KEY\n  - qty INTEGER\n"
        "  - customer_id INTEGER NOT NULL\n  foreign key customer_id -> customers.id\n\n"
        "Table customers (2 rows)\n  - id INTEGER PRIMARY KEY\n  - name TEXT\n"
    )
    schema = G.schema_from_db_print(text, "shop.sqlite")
    assert schema.tables == {"orders": ["order_id", "qty", "customer_id"], "customers": ["id", "name"]}
    assert schema.keys == {"orders.order_id", "orders.customer_id", "customers.id"}
    assert G.check_question("In the orders table, what is the mean customer_id?", schema)[0] == G.IDENTIFIER_AS_MEASURE
    assert G.schema_from_db_print("shape: (3, 2)\nqty  int64") is None


def test_a_column_name_with_spaces_and_underscores_is_known_as_a_whole():
    schema = G.Schema({"data": ["No. of cases_max", "Year", "WHO Region"]}, file_name="cases.csv")
    assert G.unknown_names("What is the median No. of cases_max in cases.csv?", schema) == []
    assert G.unknown_names("What is the median No. of cases_mean?", schema) == ["cases_mean"]
