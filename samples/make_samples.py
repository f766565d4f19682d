"""Generate the bundled sample inputs the demo ingests offline (deterministic: same bytes on every run).

    .venv/bin/python samples/make_samples.py        # rewrites samples/files and samples/bird

samples/files/ (for ingest_files):
  sales_orders.csv            accepted: 240 orders, dates + categoricals + numerics (UTF-8, comma)
  wetter_muenchen.csv         accepted: 180 daily weather rows, ';' delimiter, decimal commas, dd.mm.yyyy dates
  employees_latin1.csv        accepted: 120 employees, Latin-1 encoded accented names, hire dates, salaries
  store_report.xlsx           accepted: sheet "Q1 Sales" (title row + blank row above the header, 150 rows),
                              sheet "Targets" (48 rows), sheet "Notes" (3 rows: rejected as too_few_rows)
  survey_pilot.csv            rejected: 6 rows (too_few_rows)
  broken_export.xlsx          rejected: truncated workbook (unloadable)
  sensor_dump.csv             rejected: 60 rows whose columns are almost all empty (null_dominated)
samples/bird/ (for ingest_bird, BIRD layout):
  retail_shop/retail_shop.sqlite             customers (60), products (40), orders (2,400) with foreign keys
  retail_shop/database_description/*.csv     column descriptions (products.csv is cp1252-encoded)
  world_atlas/world_atlas.sqlite             country (12), city (360), countrylanguage (~36): two tables
                                             with a Name and a Population column, text keys (country Code)
  questions.json                             a few questions with db_id
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import json
import math
import os
import random
import sqlite3
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = HERE / "files"
BIRD = HERE / "bird"
FIXED_ZIP_TIME = (2024, 1, 1, 0, 0, 0)

REGIONS = ["North", "South", "East", "West"]
PRODUCTS = [
    ("Espresso Machine", "Kitchen", 249.0),
    ("Blender", "Kitchen", 59.9),
    ("Toaster", "Kitchen", 34.5),
    ("Desk Lamp", "Office", 27.0),
    ("Office Chair", "Office", 189.0),
    ("Monitor Arm", "Office", 79.0),
    ("Running Shoes", "Sports", 99.0),
    ("Yoga Mat", "Sports", 25.0),
    ("Water Bottle", "Sports", 12.5),
    ("Headphones", "Electronics", 149.0),
    ("Power Bank", "Electronics", 39.0),
    ("Webcam", "Electronics", 64.0),
]
FIRST = [
    "José",
    "Zoë",
    "François",
    "Jürgen",
    "Ana",
    "Łukasz",
    "Søren",
    "Chloé",
    "Mateo",
    "Inés",
    "Björn",
    "Amélie",
    "Noah",
    "Emma",
    "Lucas",
    "Mia",
    "Élodie",
    "Renée",
    "Çelik",
    "Agnès",
]
LAST = [
    "Müller",
    "García",
    "Lefèvre",
    "Núñez",
    "Schröder",
    "Dubois",
    "Håkansson",
    "Peña",
    "Weiß",
    "Moreau",
    "Smith",
    "Rossi",
    "Jensen",
    "Fernández",
    "Gómez",
]
FIRST_LATIN1 = [n for n in FIRST if n.encode("latin-1", errors="ignore").decode("latin-1") == n]


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _csv_text(header: list[str], rows: list[list], delimiter: str = ",") -> str:
    buf = io.StringIO()
    w = csv.writer(buf, delimiter=delimiter, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def sales_orders(rng: random.Random) -> bytes:
    start = dt.date(2023, 1, 2)
    rows = []
    for i in range(240):
        name, category, price = rng.choice(PRODUCTS)
        units = rng.randint(1, 12)
        discount = rng.choice([0.0, 0.0, 0.05, 0.1, 0.15])
        day = start + dt.timedelta(days=int(i * 1.5) + rng.randint(0, 1))
        channel = rng.choice(["Online", "Store", "Online", "Phone"])
        revenue = round(units * price * (1 - discount), 2)
        rows.append(
            [
                f"SO-{10001 + i}",
                day.isoformat(),
                rng.choice(REGIONS),
                channel,
                name,
                category,
                units,
                price,
                discount,
                revenue,
            ]
        )
    header = [
        "order_id",
        "order_date",
        "region",
        "channel",
        "product",
        "category",
        "units",
        "unit_price",
        "discount",
        "revenue",
    ]
    return _csv_text(header, rows).encode("utf-8")


def weather(rng: random.Random) -> bytes:
    rows = []
    day = dt.date(2023, 3, 1)
    for i in range(180):
        d = day + dt.timedelta(days=i)
        season = -6 * math.cos((d.timetuple().tm_yday - 15) / 365 * 2 * 3.14159)
        temp = round(9 + season + rng.gauss(0, 3), 1)
        rain = round(max(0.0, rng.gauss(1.5, 3)), 1)
        hum = rng.randint(45, 98)
        wind = round(abs(rng.gauss(12, 6)), 1)
        station = rng.choice(["München-Stadt", "Flughafen MUC"])
        fmt = lambda x: f"{x}".replace(".", ",")  # noqa: E731 - German decimal comma
        rows.append([d.strftime("%d.%m.%Y"), station, fmt(temp), fmt(rain), hum, fmt(wind)])
    header = ["Datum", "Station", "Temperatur (°C)", "Niederschlag (mm)", "Luftfeuchte (%)", "Wind (km/h)"]
    return _csv_text(header, rows, delimiter=";").encode("utf-8")


def employees(rng: random.Random) -> bytes:
    rows = []
    for i in range(120):
        dept = rng.choice(["Sales", "Engineering", "Finance", "Support", "Marketing"])
        base = {"Sales": 52000, "Engineering": 71000, "Finance": 64000, "Support": 43000, "Marketing": 56000}[dept]
        hired = dt.date(2012, 1, 1) + dt.timedelta(days=rng.randint(0, 4000))
        age = rng.randint(22, 63)
        rows.append(
            [
                1000 + i,
                f"{rng.choice(FIRST_LATIN1)} {rng.choice(LAST)}",
                dept,
                rng.choice(["Zürich", "Genève", "Köln", "Málaga", "Besançon"]),
                hired.isoformat(),
                age,
                round(base + (age - 22) * 650 + rng.gauss(0, 4000), 0),
                rng.choice(["yes", "no"]),
            ]
        )
    header = ["employee_id", "full_name", "department", "city", "hire_date", "age", "salary_eur", "remote"]
    return _csv_text(header, rows).encode("latin-1")


def _deterministic_zip(data: bytes) -> bytes:
    """Rewrite a zip with fixed member timestamps so the workbook's bytes do not depend on when it was built."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            zi = zipfile.ZipInfo(info.filename, FIXED_ZIP_TIME)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = info.external_attr
            dst.writestr(zi, src.read(info.filename))
    return out.getvalue()


def store_report(rng: random.Random) -> bytes:
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "Q1 Sales"
    ws.append(["Regional store sales report, Q1 2024 (all amounts in EUR)"])
    ws.merge_cells(start_row=1, start_column=1, end_row=1, end_column=7)
    ws.append([])
    ws.append(["Date", "Store", "Region", "Category", "Transactions", "Revenue", "Returns"])
    day = dt.date(2024, 1, 1)
    for i in range(150):
        d = day + dt.timedelta(days=i % 90)
        region = rng.choice(REGIONS)
        tx = rng.randint(40, 400)
        ws.append(
            [
                dt.datetime(d.year, d.month, d.day),
                f"Store {rng.randint(1, 12):02d}",
                region,
                rng.choice(["Kitchen", "Office", "Sports", "Electronics"]),
                tx,
                round(tx * rng.uniform(18, 45), 2),
                rng.randint(0, 9),
            ]
        )
    ws.append([])
    ws.append(["Source: store POS exports, refreshed weekly."])
    targets = wb.create_sheet("Targets")
    targets.append(["Region", "Month", "Revenue target", "Stores"])
    for region in REGIONS:
        for m in range(1, 13):
            targets.append([region, f"2024-{m:02d}", rng.randint(80, 160) * 1000, rng.randint(2, 5)])
    notes = wb.create_sheet("Notes")
    notes.append(["Note", "Owner"])
    notes.append(["Q1 numbers are provisional", "Finance"])
    notes.append(["Store 07 closed in February", "Ops"])
    fixed = dt.datetime(2024, 1, 1)
    wb.properties.created = fixed
    wb.properties.modified = fixed
    buf = io.BytesIO()
    wb.save(buf)
    return _deterministic_zip(buf.getvalue())


def rejects(rng: random.Random, report: bytes) -> dict[str, bytes]:
    pilot = _csv_text(
        ["respondent", "score", "comment"],
        [[i, rng.randint(1, 5), rng.choice(["ok", "good", "slow"])] for i in range(1, 7)],
    )
    sensor_rows = [
        [f"2024-02-01 {h:02d}:{m:02d}", "", "", "", round(rng.uniform(19, 23), 2) if i % 10 == 0 else ""]
        for i, (h, m) in enumerate((h, m) for h in range(5) for m in range(0, 60, 5))
    ]
    sensor = _csv_text(["timestamp", "co2_ppm", "pm25", "noise_db", "temp_c"], sensor_rows)
    return {
        "survey_pilot.csv": pilot.encode("utf-8"),
        "broken_export.xlsx": report[: len(report) // 3],
        "sensor_dump.csv": sensor.encode("utf-8"),
    }


# Over the 1,000-row flat-file cap on purpose: a database keeps its large fact table.
N_ORDERS = 2400


@contextlib.contextmanager
def _fresh_database(path: Path, ddl: str):
    """A new SQLite file at ``path`` with ``ddl`` run (rollback journal, so no -wal file is left beside it);
    committed and compacted on leaving, so a rerun writes the same bytes."""
    if path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript("PRAGMA journal_mode = DELETE;\n" + ddl)
    yield con
    con.commit()
    con.execute("VACUUM")
    con.close()


def bird_db(rng: random.Random, path: Path) -> None:
    with _fresh_database(
        path,
        """
        CREATE TABLE customers (
            customer_id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, segment TEXT, signup_date TEXT);
        CREATE TABLE products (
            product_id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT, list_price REAL);
        CREATE TABLE orders (
            order_id INTEGER PRIMARY KEY,
            customer_id INTEGER NOT NULL REFERENCES customers (customer_id),
            product_id INTEGER NOT NULL REFERENCES products (product_id),
            order_date TEXT, quantity INTEGER, total REAL, status TEXT);
        """,
    ) as con:
        _fill_shop(rng, con)


def _fill_shop(rng: random.Random, con: sqlite3.Connection) -> None:
    cities = ["Lyon", "Porto", "Graz", "Turin", "Ghent", "Bergen"]
    for i in range(1, 61):
        signup = dt.date(2021, 1, 1) + dt.timedelta(days=rng.randint(0, 900))
        con.execute(
            "INSERT INTO customers VALUES (?,?,?,?,?)",
            (
                i,
                f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                rng.choice(cities),
                rng.choice(["consumer", "business"]),
                signup.isoformat(),
            ),
        )
    catalog = PRODUCTS + [(f"{n} Pro", c, round(p * 1.6, 2)) for n, c, p in PRODUCTS]
    catalog += [(f"{n} Mini", c, round(p * 0.7, 2)) for n, c, p in PRODUCTS]
    catalog += [(f"{n} Refurbished", c, round(p * 0.8, 2)) for n, c, p in PRODUCTS[:4]]
    for i, (name, cat, price) in enumerate(catalog[:40], start=1):
        con.execute("INSERT INTO products VALUES (?,?,?,?)", (i, name, cat, price))
    for i in range(1, N_ORDERS + 1):
        pid = rng.randint(1, 40)
        price = con.execute("SELECT list_price FROM products WHERE product_id = ?", (pid,)).fetchone()[0]
        qty = rng.randint(1, 5)
        day = dt.date(2023, 1, 1) + dt.timedelta(days=rng.randint(0, 364))
        con.execute(
            "INSERT INTO orders VALUES (?,?,?,?,?,?,?)",
            (
                i,
                rng.randint(1, 60),
                pid,
                day.isoformat(),
                qty,
                round(qty * price, 2),
                rng.choice(["shipped", "shipped", "delivered", "returned", "cancelled"]),
            ),
        )


# Invented places: syllables put together, so no real atlas is copied and every name is pronounceable.
_SYLLABLES = ["ka", "lo", "ri", "mes", "tan", "vo", "dra", "len", "sa", "por", "ul", "bri", "ta", "nor", "ve", "gal"]
_CONTINENTS = {"Northland": ["North Reach", "Frost Coast"], "Southmere": ["Sun Basin", "Palm Shore"],
               "Eastwold": ["High Steppe", "River Delta"], "Westmark": ["Lake Country"]}  # fmt: skip
_LANGUAGES = ["Kalo", "Vessic", "Drann", "Orel", "Tamu", "Sarish", "Nordic Low", "Palmic"]


def _place(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()


# Few enough countries that a city's Country.Name is something to group by (a join the question names).
N_COUNTRIES = 12
CITIES_PER_COUNTRY = 30


def world_db(rng: random.Random, path: Path) -> None:
    """A small atlas: two tables both have Name and Population, so a question must say which it means."""
    with _fresh_database(
        path,
        """
        CREATE TABLE country (
            Code TEXT PRIMARY KEY, Name TEXT NOT NULL, Continent TEXT, Region TEXT, SurfaceArea REAL,
            Population INTEGER, LifeExpectancy REAL, GNP REAL);
        CREATE TABLE city (
            ID INTEGER PRIMARY KEY, Name TEXT NOT NULL, CountryCode TEXT NOT NULL REFERENCES country (Code),
            District TEXT, Population INTEGER);
        CREATE TABLE countrylanguage (
            CountryCode TEXT NOT NULL REFERENCES country (Code), Language TEXT NOT NULL, IsOfficial TEXT,
            Percentage REAL, PRIMARY KEY (CountryCode, Language));
        """,
    ) as con:
        _fill_atlas(rng, con)


def _fill_atlas(rng: random.Random, con: sqlite3.Connection) -> None:
    codes, names = [], set()
    while len(codes) < N_COUNTRIES:
        name = _place(rng, rng.choice([2, 3]))
        code = name[:3].upper()
        if name in names or code in codes:
            continue
        names.add(name)
        codes.append(code)
        continent = rng.choice(sorted(_CONTINENTS))
        area = round(rng.lognormvariate(11, 1.2), 1)
        con.execute(
            "INSERT INTO country VALUES (?,?,?,?,?,?,?,?)",
            (code, name, continent, rng.choice(_CONTINENTS[continent]), area, int(area * rng.uniform(5, 300)),
             round(rng.uniform(52, 84), 1), round(rng.lognormvariate(9, 1.5), 1)),
        )  # fmt: skip
    city_id = 0
    for code in codes:
        for _ in range(CITIES_PER_COUNTRY):
            city_id += 1
            con.execute(
                "INSERT INTO city VALUES (?,?,?,?,?)",
                (city_id, _place(rng, rng.choice([2, 3])), code, _place(rng, 2) + " District",
                 int(rng.lognormvariate(11, 1.1))),
            )  # fmt: skip
        spoken = rng.sample(_LANGUAGES, rng.randint(2, 4))
        shares = [rng.uniform(1, 10) for _ in spoken]
        for i, (lang, share) in enumerate(zip(spoken, shares, strict=True)):
            con.execute(
                "INSERT INTO countrylanguage VALUES (?,?,?,?)",
                (code, lang, "T" if i == 0 else "F", round(100 * share / sum(shares), 1)),
            )


DESCRIPTIONS = {
    "customers": [
        ("customer_id", "customer id", "unique identifier of the customer", "integer", ""),
        ("name", "customer name", "full name of the customer", "text", ""),
        ("city", "", "city of the billing address", "text", ""),
        ("segment", "", "customer segment", "text", "consumer: private person; business: company account"),
        ("signup_date", "sign-up date", "day the account was created", "date", "YYYY-MM-DD"),
    ],
    "products": [
        ("product_id", "product id", "unique identifier of the product", "integer", ""),
        ("name", "product name", "name shown in the catalogue", "text", ""),
        ("category", "", "product category", "text", "Kitchen, Office, Sports or Electronics"),
        ("list_price", "list price", "catalogue price in euros (€), before discounts", "real", ""),
    ],
    "orders": [
        ("order_id", "order id", "unique identifier of the order", "integer", ""),
        ("customer_id", "customer id", "customer who placed the order", "integer", "refers to customers"),
        ("product_id", "product id", "product ordered", "integer", "refers to products"),
        ("order_date", "order date", "day the order was placed", "date", "YYYY-MM-DD"),
        ("quantity", "", "units ordered", "integer", ""),
        ("total", "", "amount charged in euros", "real", "quantity times list price"),
        ("status", "", "fulfilment status", "text", "shipped, delivered, returned or cancelled"),
    ],
}


def bird(rng: random.Random) -> None:
    db_dir = BIRD / "retail_shop"
    bird_db(rng, db_dir / "retail_shop.sqlite")
    header = ["original_column_name", "column_name", "column_description", "data_format", "value_description"]
    for table, rows in DESCRIPTIONS.items():
        text = _csv_text(header, [list(r) for r in rows])
        # BIRD's description files come in mixed encodings; keep one in cp1252 to exercise detection.
        data = text.encode("cp1252") if table == "products" else text.encode("utf-8-sig")
        _write(db_dir / "database_description" / f"{table}.csv", data)
    questions = [
        {
            "db_id": "retail_shop",
            "question": "Which city's customers spent the most in 2023?",
            "evidence": "spent refers to SUM(total)",
        },
        {
            "db_id": "retail_shop",
            "question": "What share of orders in each category was returned?",
            "evidence": "returned refers to status = 'returned'",
        },
        {"db_id": "retail_shop", "question": "How many business customers ordered Office products?", "evidence": ""},
    ]
    _write(BIRD / "questions.json", (json.dumps(questions, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def main() -> None:
    rng = random.Random(20240101)
    report = store_report(rng)
    outputs = {
        "sales_orders.csv": sales_orders(rng),
        "wetter_muenchen.csv": weather(rng),
        "employees_latin1.csv": employees(rng),
        "store_report.xlsx": report,
        **rejects(rng, report),
    }
    for name, data in outputs.items():
        _write(FILES / name, data)
    bird(rng)
    world_db(random.Random(20240202), BIRD / "world_atlas" / "world_atlas.sqlite")  # own seed: other files unchanged
    for path in sorted(p for p in HERE.rglob("*") if p.is_file() and p.name != os.path.basename(__file__)):
        print(f"{path.relative_to(HERE)}  {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
