"""The AST policy: ordinary analysis code passes, escape hatches are refused with a reason."""

from __future__ import annotations

import pytest

from datamind.sandbox import guard
from datamind.sandbox.truncate import truncate_head_tail

ALLOWED = [
    "import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df.groupby('region')['amount'].sum())",
    "import numpy as np\nx = np.arange(10)\nprint(x.mean(), np.percentile(x, 90))",
    "df = df.dropna()\ndf.to_csv('clean.csv', index=False)\nopen('notes.txt', 'w').write('ok')",
    "import os\nprint(os.listdir('.'), os.path.exists('sales.csv'), os.getcwd())",
    "from collections import Counter\nimport math, statistics, re, json\nprint(Counter('aab'))",
    "items = [1, 2, 3]\nitems.remove(2)\nprint(getattr(df, col).mean())",
    "s = df['date'].str.split('/')\nprint(s.str[0])",
    "with open('out/result.json', 'w') as fh:\n    fh.write('{}')",
    "df = pd.read_csv('sales.csv', sep='~')\nd = pd.to_datetime(df['d'], format='%d/%m/%Y')",
    "import numpy as np\nnp.save('arr.npy', np.arange(3))\nprint(np.load('arr.npy'))",
]

BLOCKED = [
    ("import subprocess\nsubprocess.run(['ls'])", "subprocess"),
    ("import os\nos.system('ls')", "os.system"),
    ("import os as o\no.popen('id')", "os.popen"),
    ("from os import system as s\ns('id')", "from os import system"),
    ("import os\nos.fork()", "os.fork"),
    ("import os\nos.remove('sales.csv')", "os.remove"),
    ("from pathlib import Path\nPath('sales.csv').unlink()", ".unlink"),
    ("import shutil\nshutil.rmtree('.')", "shutil.rmtree"),
    ("import socket\nsocket.socket()", "import socket"),
    ("import urllib.request\nurllib.request.urlopen('http://x')", "import urllib.request"),
    ("import pandas as pd\npd.read_csv('https://example.com/a.csv')", "https://example.com/a.csv"),
    ("eval('1+1')", "eval"),
    ("exec('x=1')", "exec"),
    ("__import__('os').system('id')", "__import__"),
    ("().__class__.__bases__[0].__subclasses__()", ".__subclasses__"),
    ("f = lambda: 0\nf.__globals__['__builtins__']", ".__globals__"),
    ("getattr(__builtins__, 'eval')", "__builtins__"),
    ("import importlib\nimportlib.import_module('os')", "import importlib"),
    ("import ctypes", "import ctypes"),
    ("import pickle\npickle.loads(b'')", "import pickle"),
    ("open('/etc/passwd').read()", "/etc/passwd"),
    ("open('../../secret.txt', 'w')", "../../secret.txt"),
    ("open('~/.netrc').read()", "~/.netrc"),
    ("df.to_csv('/tmp/out.csv')", "/tmp/out.csv"),
    ("import os\nos.chdir('/')", "os.chdir"),
    ("import sys\nsys.modules['os']", "sys.modules"),
    ("import os\ngetattr(os, 'sys' + 'tem')('id')", "getattr(os, <computed name>)"),
    ("from concurrent.futures import ProcessPoolExecutor", "ProcessPoolExecutor"),
    ("import multiprocessing", "import multiprocessing"),
]


@pytest.mark.parametrize("code", ALLOWED)
def test_ordinary_analysis_code_passes(code):
    assert guard.check(code) == []


@pytest.mark.parametrize(("code", "needle"), BLOCKED)
def test_escape_hatches_are_refused_with_the_offending_call_named(code, needle):
    violations = guard.check(code)
    assert violations, code
    text = guard.describe(violations)
    assert text.startswith("Blocked by the sandbox policy")
    assert needle in text


def test_sql_mode_refuses_a_direct_sqlite_connection_but_python_mode_allows_it():
    code = "import sqlite3\ncon = sqlite3.connect('shop.sqlite')"
    assert guard.check(code, "python") == []
    assert "execute_sql" in guard.describe(guard.check(code, "sql"))


def test_unparsable_code_raises_syntax_error_for_the_session_to_report():
    with pytest.raises(SyntaxError):
        guard.check("def f(:\n  pass")


def test_strip_prints_removes_output_calls_but_keeps_effects():
    code = "x = 1\nprint('hello')\nif x:\n    print(x)\n    y = x + 1\ndf.info()\n"
    stripped = guard.strip_prints(code)
    assert "print" not in stripped
    namespace: dict = {"df": type("D", (), {"info": lambda self: None})()}
    exec(stripped, namespace)
    assert namespace["y"] == 2


def test_strip_prints_keeps_calls_inside_the_printed_arguments():
    """Replaying `print(execute_sql(...))` must still write the CSV a later turn reads."""
    code = "print(items.pop())\nprint('done', sep=note('sep'))\nprint(len(items))\n"
    stripped = guard.strip_prints(code)
    calls: list[str] = []
    namespace: dict = {"items": [1, 2, 3], "note": lambda v: calls.append(v) or " "}
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(stripped, namespace)
    assert out.getvalue() == ""
    assert namespace["items"] == [1, 2]  # pop() ran exactly once
    assert calls == ["sep"]


@pytest.mark.parametrize(
    ("text", "head", "tail", "expected"),
    [
        ("short", 3, 3, "short"),
        ("abcdefghij", 3, 2, "abc\n... [5 characters truncated] ...\nij"),
        ("abcdefghij", 4, 0, "abcd\n... [6 characters truncated] ...\n"),
        ("abcdef", 3, 3, "abcdef"),
    ],
)
def test_truncate_keeps_head_and_tail(text, head, tail, expected):
    assert truncate_head_tail(text, head, tail) == expected
