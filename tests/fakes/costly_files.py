"""Staged files that are cheap to store and costly to read, and the parser child's own size: what the tests of
"a later stage re-reads a staged file under the parser's caps" (profiling, synthesis) build their case from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG = "http://schemas.openxmlformats.org/package/2006/relationships"
_CT = "application/vnd.openxmlformats-officedocument.spreadsheetml"


def shared_strings_workbook(path: Path, n_strings: int, rows: int = 30) -> None:
    """A small sheet (id, city, amount) over a shared-strings table of ``n_strings`` entries it never uses:
    a few MB zipped that a reader holds in memory whole (the issue's 4M-string workbook is 10.5 MB)."""
    cities = ["Lyon", "Graz", "Oslo", "Bern"]
    cells = ['<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c><c r="C1" t="s"><v>2</v></c></row>']
    cells += [f'<row r="{i}"><c r="A{i}"><v>{i}</v></c><c r="B{i}" t="s"><v>{3 + i % 4}</v></c>'
              f'<c r="C{i}"><v>{i * 1.5}</v></c></row>' for i in range(2, rows + 2)]  # fmt: skip
    strings = ["id", "city", "amount", *cities, *(f"s{i}" for i in range(n_strings))]
    parts = {
        "[Content_Types].xml": f'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        f'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        f'<Default Extension="xml" ContentType="application/xml"/>'
        f'<Override PartName="/xl/workbook.xml" ContentType="{_CT}.sheet.main+xml"/>'
        f'<Override PartName="/xl/worksheets/sheet1.xml" ContentType="{_CT}.worksheet+xml"/>'
        f'<Override PartName="/xl/sharedStrings.xml" ContentType="{_CT}.sharedStrings+xml"/></Types>',
        "_rels/.rels": f'<Relationships xmlns="{_PKG}"><Relationship Id="rId1" '
        f'Type="{_REL}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": f'<workbook xmlns="{_NS}" xmlns:r="{_REL}"><sheets>'
        f'<sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels": f'<Relationships xmlns="{_PKG}">'
        f'<Relationship Id="rId1" Type="{_REL}/worksheet" Target="worksheets/sheet1.xml"/>'
        f'<Relationship Id="rId2" Type="{_REL}/sharedStrings" Target="sharedStrings.xml"/></Relationships>',
        "xl/worksheets/sheet1.xml": f'<worksheet xmlns="{_NS}"><dimension ref="A1:C{rows + 1}"/>'
        f"<sheetData>{''.join(cells)}</sheetData></worksheet>",
        "xl/sharedStrings.xml": f'<sst xmlns="{_NS}" count="{len(strings)}" uniqueCount="{len(strings)}">'
        + "".join(f"<si><t>{s}</t></si>" for s in strings)
        + "</sst>",
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, xml in parts.items():
            zf.writestr(name, '<?xml version="1.0" encoding="UTF-8"?>' + xml)


def vm_mb(code: str) -> float:
    """The address space (VmSize) of a fresh ``python -I`` after ``code``: the parser child's before its cap."""
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"{code}\nprint([l for l in open('/proc/self/status') if 'VmSize' in l][0])"],
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "ARROW_NUM_THREADS": "1"},
        capture_output=True, text=True, check=True, cwd="/",
    )  # fmt: skip
    return int(out.stdout.split()[1]) / 1024


def parser_child_cap_mb(headroom_mb: int = 64) -> int:
    """A parse memory cap just above what the parser child needs to start (its loaders and workbook reader):
    the small files of a test fit in ``headroom_mb``, a costly one does not."""
    return int(vm_mb("from datamind.formats import load_tables\nimport python_calamine")) + headroom_mb


def run_under_parser_cap(argv: list[str], timeout: int) -> tuple[int, dict, float]:
    """Run a stage script whose last stdout line is JSON with its VmHWM ``before_kb`` and ``after_kb``, with the
    parser child capped at its own size plus headroom: (the cap in MB, that JSON, how many MB the peak grew)."""
    cap_mb = parser_child_cap_mb()
    env = {**os.environ, "DATAMIND_PARSE_MEMORY_MB": str(cap_mb)}
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-2000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    return cap_mb, measured, (measured["after_kb"] - measured["before_kb"]) / 1024
