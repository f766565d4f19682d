"""Static policy check run on every chunk before it reaches the interpreter.

The runtime layers (namespaces, dedicated uid, rlimits, cgroup) are what actually contain hostile
code; this guard exists so that the *agent* gets a clear, early observation such as
"os.system is not allowed" instead of a confusing runtime failure, and so that trajectories that
try such things are easy to spot. It resolves import aliases (``import os as o; o.system``) and
refuses the usual escape hatches (eval/exec, __import__, __subclasses__, pickle).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_NETWORK = "network access"
_PROCESS = "process or signal control"
_DYNAMIC = "dynamic code execution or import tricks"
_FS = "file deletion or changes outside the working directory"

BLOCKED_MODULES: dict[str, str] = {
    **{
        m: _PROCESS
        for m in (
            "subprocess",
            "multiprocessing",
            "pty",
            "pexpect",
            "signal",
            "resource",
            "_posixsubprocess",
            "posix",
            "nt",
            "fcntl",
            "sh",
            "plumbum",
        )
    },
    **{
        m: _NETWORK
        for m in (
            "socket",
            "ssl",
            "http",
            "urllib",
            "urllib3",
            "requests",
            "httpx",
            "aiohttp",
            "ftplib",
            "smtplib",
            "poplib",
            "imaplib",
            "telnetlib",
            "xmlrpc",
            "socketserver",
            "webbrowser",
            "asyncio",
            "selectors",
            "paramiko",
            "websocket",
            "websockets",
        )
    },
    **{
        m: _DYNAMIC
        for m in (
            "ctypes",
            "cffi",
            "importlib",
            "imp",
            "builtins",
            "__builtin__",
            "code",
            "codeop",
            "runpy",
            "pickle",
            "_pickle",
            "cPickle",
            "marshal",
            "shelve",
            "dill",
            "cloudpickle",
            "gc",
            "inspect",
            "pdb",
            "sysconfig",
            "site",
        )
    },
}
# In SQL mode the database is reached only through the read-only tools.
SQL_MODE_BLOCKED_MODULES = {
    "sqlite3": "opening the database directly (use get_db_info()/execute_sql())",
    "_sqlite3": "opening the database directly (use get_db_info()/execute_sql())",
}

_OS_PROCESS = (
    "system",
    "popen",
    "fork",
    "forkpty",
    "vfork",
    "execl",
    "execle",
    "execlp",
    "execlpe",
    "execv",
    "execve",
    "execvp",
    "execvpe",
    "spawnl",
    "spawnle",
    "spawnlp",
    "spawnlpe",
    "spawnv",
    "spawnve",
    "spawnvp",
    "spawnvpe",
    "posix_spawn",
    "posix_spawnp",
    "kill",
    "killpg",
    "setsid",
    "setuid",
    "setgid",
    "seteuid",
    "setegid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "_exit",
    "abort",
    "startfile",
    "plock",
    "register_at_fork",
    "pidfd_open",
)
_OS_FS = (
    "remove",
    "unlink",
    "rmdir",
    "removedirs",
    "rename",
    "renames",
    "replace",
    "chmod",
    "lchmod",
    "fchmod",
    "chown",
    "lchown",
    "fchown",
    "chroot",
    "chdir",
    "fchdir",
    "symlink",
    "link",
    "truncate",
    "ftruncate",
    "mkfifo",
    "mknod",
    "putenv",
    "unsetenv",
    "open",
    "fdopen",
    "dup",
    "dup2",
    "memfd_create",
)
BLOCKED_NAMES: dict[str, str] = {
    **{f"os.{n}": _PROCESS for n in _OS_PROCESS},
    **{f"os.{n}": _FS for n in _OS_FS},
    **{f"shutil.{n}": _FS for n in ("rmtree", "move", "chown", "unpack_archive", "make_archive")},
    **{
        f"sys.{n}": _DYNAMIC
        for n in (
            "modules",
            "_getframe",
            "settrace",
            "setprofile",
            "addaudithook",
            "meta_path",
            "path_hooks",
            "__stdout__",
            "__stderr__",
            "breakpointhook",
        )
    },
    **{f"pandas.{n}": _DYNAMIC for n in ("read_pickle",)},
}
BLOCKED_BUILTINS: dict[str, str] = {
    **{
        n: _DYNAMIC
        for n in (
            "eval",
            "exec",
            "compile",
            "__import__",
            "breakpoint",
            "globals",
            "__builtins__",
            "__loader__",
            "__spec__",
        )
    },
}
# Attribute names refused on any object: sandbox-escape gadgets and destructive path methods.
BLOCKED_ATTRS: dict[str, str] = {
    **{
        n: _DYNAMIC
        for n in (
            "__subclasses__",
            "__globals__",
            "__builtins__",
            "__code__",
            "__closure__",
            "__getattribute__",
            "__import__",
            "__loader__",
            "__spec__",
            "__bases__",
            "__base__",
            "__mro__",
            "__reduce__",
            "__reduce_ex__",
            "__self__",
            "__func__",
            "__dict__",
            "f_globals",
            "f_locals",
            "f_builtins",
            "f_back",
            "gi_frame",
            "cr_frame",
            "ag_frame",
            "tb_frame",
            "tb_next",
            "read_pickle",
            "to_pickle",
            "system",
            "popen",
        )
    },
    **{
        n: _FS
        for n in (
            "unlink",
            "rmdir",
            "rmtree",
            "symlink_to",
            "hardlink_to",
            "link_to",
            "chmod",
            "lchmod",
            "chown",
            "lchown",
        )
    },
}
# Calls whose string arguments are paths: a literal path outside the working directory is refused.
_FILE_CALLS = {
    "open",
    "Path",
    "PurePath",
    "listdir",
    "scandir",
    "walk",
    "stat",
    "glob",
    "iglob",
    "rglob",
    "loadtxt",
    "savetxt",
    "genfromtxt",
    "fromfile",
    "tofile",
    "save",
    "savez",
    "connect",
    "copy",
    "copy2",
    "copyfile",
    "copytree",
    "makedirs",
    "mkdir",
    "ExcelFile",
    "ExcelWriter",
    "File",
    "write_text",
    "write_bytes",
    "read_text",
    "read_bytes",
    "exists",
    "isfile",
    "isdir",
    "realpath",
}
_URL = re.compile(r"^\s*(https?|ftps?|s3a?|gs|gcs|az|abfss?|hdfs|file|sftp|ssh|wss?)://", re.IGNORECASE)
_OUTSIDE_PATH = re.compile(r"^\s*(/[^/\s]|~[\w.-]*/|\\\\)|(^|[/\\])\.\.([/\\]|$)")


@dataclass(frozen=True)
class Violation:
    line: int
    what: str
    why: str


def check(code: str, language: str = "python") -> list[Violation]:
    """All policy violations in `code` (empty when it may run). Raises SyntaxError for unparsable code."""
    tree = ast.parse(code, filename="<cell>")
    blocked_modules = dict(BLOCKED_MODULES)
    if language == "sql":
        blocked_modules.update(SQL_MODE_BLOCKED_MODULES)
    aliases = _import_aliases(tree)
    found: list[Violation] = []

    def add(node: ast.AST, what: str, why: str) -> None:
        found.append(Violation(getattr(node, "lineno", 0), what, why))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for module in _imported_modules(node):
                why = _module_reason(module, blocked_modules)
                if why:
                    add(node, f"import {module}", why)
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if alias.name == "*" and node.module.split(".")[0] in ("os", "shutil", "sys"):
                        add(node, f"from {node.module} import *", _DYNAMIC)
                    elif full in BLOCKED_NAMES or _module_reason(full, blocked_modules):
                        add(
                            node,
                            f"from {node.module} import {alias.name}",
                            BLOCKED_NAMES.get(full) or _module_reason(full, blocked_modules),
                        )
        elif isinstance(node, ast.Name):
            if node.id in BLOCKED_BUILTINS and node.id not in aliases:
                add(node, node.id, BLOCKED_BUILTINS[node.id])
            resolved = aliases.get(node.id)
            if resolved in BLOCKED_NAMES:
                add(node, resolved, BLOCKED_NAMES[resolved])
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node, aliases)
            if dotted in BLOCKED_NAMES:
                add(node, dotted, BLOCKED_NAMES[dotted])
            elif node.attr in BLOCKED_ATTRS:
                add(node, f".{node.attr}", BLOCKED_ATTRS[node.attr])
        elif isinstance(node, ast.Call):
            _check_call(node, aliases, add)
    found.sort(key=lambda v: v.line)
    return found


def describe(violations: list[Violation]) -> str:
    """The observation the agent receives for a refused chunk."""
    lines = ["Blocked by the sandbox policy; the code was not executed."]
    seen: set[tuple[int, str]] = set()
    for v in violations:
        if (v.line, v.what) in seen:
            continue
        seen.add((v.line, v.what))
        lines.append(f"  line {v.line}: `{v.what}` is not allowed ({v.why}).")
    lines.append(
        "Work only with the data file(s) in the current working directory, using pandas/numpy and relative paths."
    )
    return "\n".join(lines)


def strip_prints(code: str) -> str:
    """The chunk as replayed before later chunks: same effects, but no print()/display() output."""
    tree = ast.parse(code, filename="<cell>")
    tree = _PrintStripper().visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree)


class _PrintStripper(ast.NodeTransformer):
    """Drops the printing but keeps the arguments' evaluation: ``print(execute_sql(...))`` must still
    write its CSV when replayed, and ``print(df.pop('a'))`` must still remove the column."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("print", "display"):
            effects = [*call.args, *(kw.value for kw in call.keywords)]
            if not any(isinstance(sub, ast.Call) for arg in effects for sub in ast.walk(arg)):
                return ast.copy_location(ast.Pass(), node)
            return ast.copy_location(ast.Expr(ast.Tuple(elts=effects, ctx=ast.Load())), node)
        return node


def _import_aliases(tree: ast.AST) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    # Common short names resolve to their modules so `pd.read_pickle` matches `pandas.read_pickle`.
    for short, full in (("pd", "pandas"), ("np", "numpy")):
        if aliases.get(short, full) == full:
            aliases.setdefault(short, full)
    return aliases


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


# Calls that import a package behind the code's back (pandas picks its Excel and Markdown engines lazily).
_IMPLIED_IMPORTS = {
    "read_excel": "openpyxl",
    "ExcelFile": "openpyxl",
    "to_excel": "openpyxl",
    "to_markdown": "tabulate",
}
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def imports_of(code: str) -> set[str]:
    """Absolute module names the code imports, submodules named in ``from x import y`` included (``x.y``, which
    may be an attribute rather than a module), and those pandas would import for the calls it makes."""
    try:
        tree = ast.parse(code, filename="<cell>")
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names if a.name != "*")
        elif isinstance(node, ast.Attribute) and node.attr in _IMPLIED_IMPORTS:
            out.add(_IMPLIED_IMPORTS[node.attr])
    return {m for m in out if _MODULE_NAME.fullmatch(m)}


def _imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:  # relative import: nothing sensible to import from inside a cell
        return [("." * node.level) + (node.module or "")]
    return [node.module] if node.module else []


def _module_reason(module: str, blocked: dict[str, str]) -> str | None:
    if module.startswith("."):
        return _DYNAMIC
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        why = blocked.get(".".join(parts[:i]))
        if why:
            return why
    if module in ("concurrent.futures.process",) or module.endswith("ProcessPoolExecutor"):
        return _PROCESS
    return None


def _check_call(node: ast.Call, aliases: dict[str, str], add) -> None:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    dotted = _dotted(func, aliases) or name
    if name in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
        target, attr = node.args[0], node.args[1]
        if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
            if (
                attr.value in BLOCKED_ATTRS
                or attr.value.startswith("__")
                or (f"{_dotted(target, aliases)}.{attr.value}" in BLOCKED_NAMES)
            ):
                add(node, f"{name}(..., {attr.value!r})", _DYNAMIC)
        elif isinstance(target, ast.Name) and target.id in aliases:
            add(node, f"{name}({target.id}, <computed name>)", _DYNAMIC)
    if name == "ProcessPoolExecutor":
        add(node, dotted, _PROCESS)
    literals = [a for a in node.args] + [k.value for k in node.keywords]
    for arg in literals:
        text = _literal_text(arg)
        if text is None:
            continue
        if _URL.match(text):
            add(node, f"{dotted}({text[:60]!r})", _NETWORK)
        elif _is_file_call(name, dotted) and _OUTSIDE_PATH.search(text):
            add(node, f"{dotted}({text[:60]!r})", "access to a path outside the working directory")


def _is_file_call(name: str, dotted: str) -> bool:
    root = dotted.split(".")[0]
    return (
        name in _FILE_CALLS
        or name.startswith(("read_", "to_", "load"))
        or root in ("os", "shutil", "glob", "pathlib", "io", "codecs")
    )


def _literal_text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal_text(node.left)
    return None
