"""BIRD layout discovery: databases, robustly decoded descriptions, questions, deterministic sampling."""

from __future__ import annotations

import shutil

import pytest
from ingest_builders import make_sqlite, zip_with

from datamind.ingest.bird import discover_bird, parse_description_csv
from datamind.settings import REPO_ROOT

BIRD = REPO_ROOT / "samples" / "bird"


def test_sample_bird_layout_carries_descriptions_and_questions():
    found = {f.rel_path: f for f in discover_bird(str(BIRD))}
    assert set(found) == {"retail_shop/retail_shop.sqlite", "world_atlas/world_atlas.sqlite"}
    assert found["world_atlas/world_atlas.sqlite"].provenance.get("n_questions", 0) == 0  # no questions name it
    f = found["retail_shop/retail_shop.sqlite"]
    prov = f.provenance
    assert prov["db_id"] == "retail_shop" and prov["n_questions"] == 3
    assert set(prov["column_descriptions"]) == {"customers", "orders", "products"}
    # products.csv is cp1252: the euro sign must survive decoding.
    assert "€" in prov["column_descriptions"]["products"]["list_price"]
    assert prov["column_descriptions"]["customers"]["segment"].endswith(
        "Values: consumer: private person; business: company account"
    )


def test_description_csv_in_any_encoding():
    text = (
        "original_column_name,column_name,column_description,data_format,value_description\n"
        "prix,prix unitaire,montant en €,real,\nqté,,quantité commandée,integer,entier positif\n"
    )
    for enc in ("utf-8", "utf-8-sig", "cp1252"):
        d = parse_description_csv(text.encode(enc))
        assert d == {"prix": "prix unitaire | montant en €", "qté": "quantité commandée | Values: entier positif"}


@pytest.fixture
def bird_tree(tmp_path):
    root = tmp_path / "train_databases"
    for i in range(6):
        db = root / f"db{i}"
        db.mkdir(parents=True)
        make_sqlite(db / f"db{i}.sqlite", {"t": ("a INTEGER", [(j,) for j in range(25)])})
    (root / "db0" / "notes.sqlite").write_bytes(b"not part of the layout")
    return root


def test_sampling_is_deterministic_and_a_subset(bird_tree):
    all_ids = [f.provenance["db_id"] for f in discover_bird(str(bird_tree))]
    assert all_ids == [f"db{i}" for i in range(6)]
    a = [f.provenance["db_id"] for f in discover_bird(str(bird_tree), sample_size=3, seed=7)]
    b = [f.provenance["db_id"] for f in discover_bird(str(bird_tree), sample_size=3, seed=7)]
    c = [f.provenance["db_id"] for f in discover_bird(str(bird_tree), sample_size=3, seed=8)]
    assert a == b and len(a) == 3 and set(a) <= set(all_ids) and a == sorted(a)
    assert len(c) == 3 and set(c) <= set(all_ids) and c == sorted(c)
    assert len(discover_bird(str(bird_tree), sample_size=50)) == 6


def test_bird_layout_inside_a_zip(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(BIRD, src)
    members = {str(p.relative_to(src)): p.read_bytes() for p in src.rglob("*") if p.is_file()}
    z = zip_with(tmp_path / "bird.zip", members)
    f = next(f for f in discover_bird(str(z)) if f.rel_path == "retail_shop/retail_shop.sqlite")
    assert f.source_uri == f"zip://retail_shop/retail_shop.sqlite::{z}"
    assert f.read_bytes() == (BIRD / "retail_shop" / "retail_shop.sqlite").read_bytes()
    assert f.provenance["column_descriptions"]["orders"]["status"].startswith("fulfilment status")


def test_no_databases_is_an_error(tmp_path):
    (tmp_path / "x.csv").write_text("a\n1\n")
    with pytest.raises(FileNotFoundError):
        discover_bird(str(tmp_path))
