"""app/datasets/engine/pysandbox.py without the server: results in every documented shape, relative paths read
like a file_path, the failing line as query_context, and a server without pandas saying so (5001,
naming the extra) instead of failing obscurely."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from app.core.errors import CairnError
from app.datasets.engine import pysandbox, sources
from app.datasets.engine.sandbox import resolve_path
from tests.support.datasets import small_engine_config


def run(tmp_path: Path, code: str) -> list[tuple[object, ...]]:
    """Run `code` with the view `a` over a.csv (x, y: 3 rows); the stored rows."""
    cfg = small_engine_config(tmp_path / f"run{len(list(tmp_path.iterdir()))}", memory_limit="256MB", timeout_s=30)
    pattern, files = resolve_path("a.csv", cfg.roots)
    dest = cfg.results / "r.parquet"
    pysandbox.run_python(
        cfg,
        code,
        [sources.make_source("a", pattern, files)],
        dest,
        cpu_seconds=20,
        memory_mb=1024,
        max_file_bytes=10**8,
    )
    with duckdb.connect() as con:
        return con.execute("SELECT * FROM read_parquet(?)", [str(dest)]).fetchall()


def refused(tmp_path: Path, code: str) -> CairnError:
    with pytest.raises(CairnError) as caught:
        run(tmp_path, code)
    return caught.value


@pytest.mark.parametrize(
    ("code", "rows"),
    [
        ("result = con.sql('SELECT x FROM a ORDER BY x')", [(1,), (2,), (3,)]),
        ("result = [{'x': 1}, {'x': 2}]", [(1,), (2,)]),
        ("result = {'x': [1, 2], 'y': ['p', 'q']}", [(1, "p"), (2, "q")]),
        ("result = pd.read_csv('a.csv')[['x']]", [(1,), (2,), (3,)]),  # relative: found in the roots
        ("result = pd.read_csv('a.csv').set_index('y')['x']", [("one", 1), ("two", 2), ("three", 3)]),
        ("result = con.sql('SELECT * FROM a').df().describe().loc[['count'], ['x']]", [("count", 3.0)]),
        ("\n    import pandas as pd\n    result = pd.DataFrame({'n': [7]})\n  ", [(7,)]),  # quoted indented
        ("import pandas as pd\n    result = pd.DataFrame({'n': [7]})", [(7,)]),  # ... and trimmed
        ("if True:\n    result = [{'x': 1}]", [(1,)]),
    ],
)
def test_result_shapes(tmp_path: Path, code: str, rows: list[tuple[object, ...]]) -> None:
    assert run(tmp_path, code) == rows


def test_the_failing_line_is_the_query_context(tmp_path: Path) -> None:
    err = refused(tmp_path, "x = 1\ny = undefined_name + 1\nresult = x")
    assert err.code == 4004 and "NameError" in err.message
    assert err.query_context == "line 2: y = undefined_name + 1"
    err = refused(tmp_path, "result = pd.read_csv('nope.csv')")
    assert "No such file" in err.message and err.query_context == "line 1: result = pd.read_csv('nope.csv')"


@pytest.fixture
def no_pandas(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child as it runs on a server without pandas (its import fails)."""
    child = pysandbox.CHILD.replace("    import pandas as pd\n", "    import pandas_is_not_installed as pd\n", 1)
    assert child != pysandbox.CHILD
    monkeypatch.setattr(pysandbox, "CHILD", child)


@pytest.mark.parametrize(
    "code",
    [
        "import pandas as pd\nresult = pd.DataFrame({'x': [1]})",
        "result = pd.DataFrame({'x': [1]})",
        "from pandas import DataFrame",
        "result = con.sql('SELECT 1 AS x').df()",
    ],
)
def test_without_pandas_the_engine_says_so(tmp_path: Path, no_pandas: None, code: str) -> None:
    err = refused(tmp_path, code)
    assert err.code == 5001 and "pandas" in err.message
    assert any("pip install pandas" in s for s in err.suggestions)


def test_without_scikit_learn_the_engine_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed's StandardScaler example on a server without the `ml` extra: 5001 naming the one command."""
    child = pysandbox.CHILD.replace("import duckdb\n", "import duckdb\nsys.modules['sklearn'] = None\n", 1)
    assert child != pysandbox.CHILD
    monkeypatch.setattr(pysandbox, "CHILD", child)
    err = refused(tmp_path, "from sklearn.preprocessing import StandardScaler\nresult = {'x': [1]}")
    assert err.code == 5001 and "no sklearn" in err.message
    assert err.suggestions == ["The operator installs the ml extra: pip install 'cairn-server[ml]'"]


def test_without_pandas_the_rest_still_works(tmp_path: Path, no_pandas: None) -> None:
    assert run(tmp_path, "result = {'x': [1, 2]}") == [(1,), (2,)]
    assert run(tmp_path, "result = con.sql('SELECT count(*) AS n FROM a')") == [(3,)]


def test_folders_are_listed_inside_the_roots_only(tmp_path: Path) -> None:
    listed = run(tmp_path, "import os\nresult = [{'n': len(os.listdir(inputs['a'].rsplit('/', 1)[0]))}]")
    assert int(str(listed[0][0])) >= 1
    err = refused(tmp_path, "import os\nresult = [{'n': len(os.listdir('/etc'))}]")
    assert "os.listdir is not allowed" in err.message
    err = refused(tmp_path, "import os\nresult = [{'n': len(list(os.scandir('/')))}]")
    assert "os.scandir is not allowed" in err.message


def test_modules_of_scikit_learn_are_preloaded_for_the_code_that_imports_them(tmp_path: Path) -> None:
    assert pysandbox.preloaded("import pandas as pd\n  from sklearn.preprocessing import StandardScaler\n") == [
        "sklearn.preprocessing"
    ]
    assert pysandbox.preloaded("x = 'import scipy.stats'\nimport scipy.stats as st\nimport os") == ["scipy.stats"]
    code = (
        "from sklearn.preprocessing import StandardScaler\n"
        "df = con.sql('SELECT x FROM a').df()\n"
        "df['z'] = StandardScaler().fit_transform(df[['x']])\n"
        "result = df"
    )
    rows = run(tmp_path, code)
    assert len(rows) == 3 and abs(sum(float(str(r[1])) for r in rows)) < 1e-9  # standardized: mean 0


def test_files_named_by_literals_are_found_in_the_first_root_holding_them(tmp_path: Path) -> None:
    own, shared = tmp_path / "own", tmp_path / "shared"
    own.mkdir()
    (shared / "sub").mkdir(parents=True)
    (own / "data.csv").write_text("a\n1\n")
    (shared / "data.csv").write_text("a\n2\n")
    (shared / "sub" / "b.csv").write_text("b\n")
    code = """
        import pandas as pd
        df = pd.read_csv('data.csv')
        other = pd.read_csv("sub/b.csv")
        note = 'not a file'
        secret = open('../own/data.csv')
        long = '%s'
    """ % ("x" * 300)
    assert pysandbox.files_named(code, [own, shared]) == [own / "data.csv", shared / "sub" / "b.csv"]
    # Trimmed as arguments are: the first line without its indent, the rest indented.
    assert pysandbox.files_named(code.strip(), [own, shared])[0] == own / "data.csv"
    assert pysandbox.files_named("result = (", [own]) == []  # does not parse: names none
