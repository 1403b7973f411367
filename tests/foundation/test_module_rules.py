"""The layout rules of the tree (issue 18): no module over 500 lines, imports at the top of modules.

A file past 500 lines holds more than one concern and gets split (as node/server.py, whose Hello went to
node/handshake.py). The one import inside a function allowed is Django's own place for it: an AppConfig's
`ready()`, which runs once the app registry is loaded (its imports need the models).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 500
PACKAGES = ("broker_core", "apps", "platform", "spark_jobs", "devstack", "bench", "tests")
CODE = ("broker_core", "apps", "platform", "spark_jobs")  # imports at the top: the product's own code


def modules(packages: tuple[str, ...]) -> list[Path]:
    found = [path for package in packages for path in (ROOT / package).rglob("*.py")]
    assert len(found) > 100, "the tree was not found"
    return sorted(found)


def test_no_module_is_over_500_lines():
    long = {str(path.relative_to(ROOT)): n for path in [*modules(PACKAGES), *ROOT.glob("*.py")]
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split each by concern): {long}"


def imports_in_functions(source: str) -> list[int]:
    """Line numbers of imports inside a function, but for an AppConfig's ready()."""
    found: set[int] = set()
    tree = ast.parse(source)
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and any(getattr(b, "id", getattr(b, "attr", "")) == "AppConfig"
                                                 for b in cls.bases):
            cls.body = [n for n in cls.body if not (isinstance(n, ast.FunctionDef) and n.name == "ready")]
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            found.update(n.lineno for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom))
    return sorted(found)


def test_imports_are_at_the_top_of_modules():
    inside = {str(path.relative_to(ROOT)): lines for path in modules(CODE)
              if (lines := imports_in_functions(path.read_text(encoding="utf-8")))}
    assert not inside, f"imports inside functions (move them to the top of the module): {inside}"


def test_the_rules_see_what_they_forbid():
    """The import check finds an import in a function or a method, once even in a nested function, and leaves an
    AppConfig's ready() alone."""
    assert imports_in_functions("def f():\n    import os\n") == [2]
    assert imports_in_functions("class A:\n    async def g(self):\n        from x import y\n") == [3]
    assert imports_in_functions("class C(AppConfig):\n    def ready(self):\n        import signals\n") == []
    assert imports_in_functions("class C(AppConfig):\n    def other(self):\n        import signals\n") == [3]
    assert imports_in_functions("import os\nfrom x import y\n") == []
    assert imports_in_functions("def f():\n    def g():\n        import os\n") == [3]
