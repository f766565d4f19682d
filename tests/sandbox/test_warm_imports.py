"""The zygote imports what cells import from the warm-on-demand packages, so later interpreters inherit them:
without changing what a cell may do, how much memory it has, or whether forking stays safe."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sandbox_helpers import TEST_LIMITS

from datamind.sandbox import Sandbox, SandboxLimits
from datamind.sandbox.guard import imports_of

# The probe reads sys.modules, which the AST guard refuses; the guard is not what these tests are about.
LIMITS = {**TEST_LIMITS, "guard": False}
PROBE = "import sys\nprint(sorted(m for m in {mods!r} if m in sys.modules))"


def _loaded(sb: Sandbox, data, mods: list[str], mode: str = "live") -> list[str]:
    """Which of ``mods`` a fresh interpreter of ``sb`` already has before its cell imports anything."""
    with sb.session([str(data)], mode=mode) as s:
        obs = s.run(PROBE.format(mods=mods))
        assert obs.ok, obs.output
        return eval(obs.output.strip())  # noqa: S307 - a list of str literals this test printed


def test_imports_of_names_modules_submodules_and_what_pandas_imports_lazily():
    code = (
        "import duckdb, numpy as np\nfrom scipy import stats\nfrom scipy.stats import norm\nfrom . import x\n"
        "df = pd.read_excel('a.xlsx')\nprint(df.to_markdown())"
    )
    assert imports_of(code) == {
        "duckdb", "numpy", "scipy", "scipy.stats", "scipy.stats.norm", "openpyxl", "tabulate",
    }  # fmt: skip
    assert imports_of("SELECT 1 FROM t") == set()  # SQL sessions: not Python, nothing to warm
    assert imports_of("def broken(:") == set()


@pytest.mark.parametrize("mode", ["live", "chunked"])
def test_a_successful_cells_imports_reach_later_interpreters_and_nothing_else_does(mode, csv_file):
    wanted = ["scipy.stats", "duckdb", "xml.dom.minidom", "tabulate"]
    with Sandbox(SandboxLimits(**LIMITS), mode=mode) as sb:
        assert _loaded(sb, csv_file, wanted, mode) == []
        with sb.session([str(csv_file)], mode=mode) as s:
            # xml is not a warm-on-demand package; a failed cell's imports are not warmed either
            assert s.run("from scipy import stats, no_such_module\nimport xml.dom.minidom\nimport duckdb").ok is False
            assert s.run("from scipy import stats\nimport xml.dom.minidom\nimport duckdb\nprint(1)").ok
            assert not s.run("import tabulate\nraise ValueError('no')").ok
        assert _loaded(sb, csv_file, wanted, mode) == ["duckdb", "scipy.stats"]
        with sb.session([str(csv_file)], mode=mode) as s:  # a warmed module still works in the cell
            obs = s.run("from scipy import stats\nprint(round(float(stats.norm.cdf(0)), 3))")
            assert obs.ok and obs.output.strip() == "0.5", obs.output


def test_the_zygote_warms_the_heavy_analysis_modules_before_the_first_cell_asks(csv_file):
    """A sandbox lives for one shard: its very first interpreter already has scipy.stats, polars and duckdb,
    and they work there; the first cell's headroom is the same as without them."""
    eager = ["scipy.stats", "polars", "duckdb"]
    limits = SandboxLimits(**{**LIMITS, "wall_s": 20.0, "cpu_s": 10, "warm_at_start": tuple(eager)})
    alloc = "import numpy as np\nx = np.ones({mb} * 2**20 // 8)\nprint(x.nbytes // 2**20)"
    with Sandbox(limits, mode="live") as sb:
        assert _loaded(sb, csv_file, [*eager, "openpyxl"]) == sorted(eager)
        with sb.session([str(csv_file)], mode="live") as s:
            obs = s.run(
                "from scipy import stats\nimport polars as pl, duckdb\n"
                "print(round(float(stats.norm.cdf(0)), 3), pl.DataFrame({'a': [1, 2]}).height,"
                " duckdb.sql('select 41 + 1').fetchall()[0][0])"
            )
            assert obs.ok and obs.output.split() == ["0.5", "2", "42"], obs.output
            # the warm imports' ~500 MB of address space is not the cell's: it may still take most of its cap
            big = s.run(alloc.format(mb=limits.memory_mb // 2))
            assert big.ok, big.output
    with pytest.raises(ValueError, match="warm_at_start"):
        SandboxLimits(warm_at_start=("xml.dom",))  # only what warming on demand may import


def test_a_deployment_sets_or_empties_the_eager_warm_list_from_the_environment(monkeypatch):
    monkeypatch.setenv("DATAMIND_SANDBOX_WARM_AT_START", "")
    assert SandboxLimits.from_env().warm_at_start == ()
    monkeypatch.setenv("DATAMIND_SANDBOX_WARM_AT_START", "polars")
    assert SandboxLimits.from_env().warm_at_start == ("polars",)
    monkeypatch.setenv("DATAMIND_SANDBOX_MEMORY_MB", "")  # an empty number still means the default
    monkeypatch.delenv("DATAMIND_SANDBOX_WARM_AT_START")
    assert SandboxLimits.from_env() == SandboxLimits()


def test_cells_start_from_a_zygote_that_has_already_used_pandas(csv_file):
    """The zygote runs a little analysis before it forks (warmup.py), so a cell does not pay pandas' first
    use again in every trajectory: what that first use imports lazily is already there, nothing failed."""
    lazily = ["pandas.io.formats.string", "pandas.core.reshape.reshape"]  # imported by to_string, pivot_table
    with Sandbox(SandboxLimits(**LIMITS), mode="live") as sb:
        assert not [n for n in sb.notes if "warm-up" in n], sb.notes
        assert _loaded(sb, csv_file, lazily) == sorted(lazily)
        with sb.session([str(csv_file)], mode="live") as s:
            obs = s.run("print(sorted(k for k in globals() if not k.startswith('__')))")
            assert obs.ok and obs.output.strip() == "[]", obs.output  # the warm-up left nothing in a cell


def test_warming_leaves_a_cell_the_same_memory_headroom(csv_file):
    """RLIMIT_AS counts the address space inherited from the zygote; the warm imports' share is not the
    cell's doing, so a cell that fit before warming fits after it."""
    limits = SandboxLimits(**{**LIMITS, "wall_s": 20.0, "cpu_s": 10})
    alloc = "import numpy as np\nx = np.ones({mb} * 2**20 // 8)\nprint(x.nbytes // 2**20)"
    with Sandbox(limits, mode="live") as sb:
        with sb.session([str(csv_file)], mode="live") as s:
            obs = s.run(alloc.format(mb=limits.memory_mb))  # the limit is real
            assert not obs.ok and obs.error_kind == "memory", obs.output
        # the most a fresh interpreter can allocate before warming, to 32 MB
        lo, hi = 0, limits.memory_mb
        while hi - lo > 32:
            mid = (lo + hi) // 2
            with sb.session([str(csv_file)], mode="live") as s:
                lo, hi = (mid, hi) if s.run(alloc.format(mb=mid)).ok else (lo, mid)
        with sb.session([str(csv_file)], mode="live") as s:
            assert s.run("from scipy import stats\nimport polars\nimport duckdb\nimport sqlalchemy").ok
        assert _loaded(sb, csv_file, ["scipy.stats", "polars"]) == ["polars", "scipy.stats"]
        with sb.session([str(csv_file)], mode="live") as s:
            obs = s.run(alloc.format(mb=lo))
            assert obs.ok, obs.output  # ~500 MB of warmed libraries did not come out of the cell's share


def test_polars_keeps_working_in_many_interpreters_forked_from_a_warmed_zygote(csv_file):
    """polars starts threads at import; forking the warmed zygote must still give working, never hanging
    interpreters, when many start at once."""
    code = (
        "import polars as pl\nimport pandas as pd\ndf = pd.read_csv('sales.csv')\n"
        "ctx = pl.SQLContext(t=pl.from_pandas(df))\n"
        "q = 'SELECT region, SUM(amount) AS s FROM t GROUP BY region ORDER BY region'\n"
        "print(ctx.execute(q, eager=True).rows())\n"
        "big = pl.DataFrame({'x': list(range(200_000))})\n"
        "big = big.group_by((pl.col('x') % 7).alias('k')).agg(pl.col('x').sum())\n"
        "print(big.height)"
    )
    with Sandbox(SandboxLimits(**{**LIMITS, "wall_s": 20.0, "cpu_s": 10}), mode="live") as sb:
        with sb.session([str(csv_file)], mode="live") as s:
            assert s.run("import polars").ok
        assert _loaded(sb, csv_file, ["polars"]) == ["polars"]

        def one(_):
            with sb.session([str(csv_file)], mode="live") as s:
                return s.run(code)

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(one, range(32)))
    for obs in results:
        assert obs.ok, obs.output
        assert obs.output.split() == ["[('east',", "7),", "('north',", "15),", "('south',", "20)]", "7"]
