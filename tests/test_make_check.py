"""`make check`, the fast loop before a commit (CONTRIBUTING.md), and the pre-commit hooks.

- The Makefile has a ``check`` target that runs ``make lint`` (ruff check, ruff format --check,
  lint-imports) and then pytest over ``CHECK_TESTS``.
- ``CHECK_TESTS`` names files that exist, and none of them sets up what makes a test slow: an
  Airflow metadata DB, ``dag.test()``, a DagBag, a live server, PostgreSQL, the cloud fakes or
  the Kubernetes emulator (those tests belong to ``make test``, which runs every test).
- CONTRIBUTING.md names ``make check``, and every ``make`` target and ``.venv/bin`` tool it names
  exists.
- .pre-commit-config.yaml's hooks are local, run the tools of the project's .venv (nothing
  downloaded when a hook runs), and lint with the commands ``make lint`` runs.
"""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = ROOT / "Makefile"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
PRE_COMMIT = ROOT / ".pre-commit-config.yaml"
LINTERS = ("ruff check", "ruff format --check", "lint-imports", "mypy")

# What a fast test does not touch: each pattern with what it would bring in.
SLOW_SIGNS = {
    r"\bairflow_db\b": "Airflow's metadata DB",
    r"\bdag\.test\(": "a DAG run through dag.test()",
    r"\bDagBag\b": "a DagBag (every DAG file imported)",
    r"\bmark\.(?:slow|live|postgres|browser)\b": "a test marked slow, live, postgres or browser",
    r"tests\.support\.(?:postgres|aws_fake|gcp_fake|kube_emulator|cloud_cluster)\b": (
        "PostgreSQL, a cloud fake or the Kubernetes emulator"
    ),
    r"\b(?:aws|aws_server)\)": "the AWS fake",
}


def makefile_lines() -> list[str]:
    """The Makefile's lines with backslash continuations joined."""
    return MAKEFILE.read_text().replace("\\\n", " ").splitlines()


def recipe(target: str) -> tuple[list[str], list[str]]:
    """(the target's prerequisites, its recipe lines)."""
    lines = makefile_lines()
    for i, line in enumerate(lines):
        m = re.match(rf"^{re.escape(target)}\s*:(?!=)(.*)$", line)
        if m:
            body = []
            for follow in lines[i + 1 :]:
                if not follow.startswith("\t"):
                    break
                body.append(follow.strip())
            return m.group(1).split("#", 1)[0].split(), body
    pytest.fail(f"the Makefile has no {target!r} target")


def variable(name: str) -> str:
    for line in makefile_lines():
        m = re.match(rf"^{name}\s*[:?]?=\s*(.*)$", line)
        if m:
            return m.group(1).strip()
    pytest.fail(f"the Makefile sets no {name}")


def check_tests() -> list[str]:
    return variable("CHECK_TESTS").split()


def check_skip() -> list[str]:
    return variable("CHECK_SKIP").split()


def check_files() -> list[Path]:
    """The Python files of CHECK_TESTS but CHECK_SKIP's, and but this one (which names the slow
    signs)."""
    files = []
    for name in check_tests():
        path = ROOT / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    skipped = {(ROOT / name).resolve() for name in check_skip()} | {Path(__file__).resolve()}
    return [path for path in files if path.resolve() not in skipped]


def test_make_check_runs_the_linters_then_the_fast_tests():
    prerequisites, body = recipe("check")
    assert "lint" in prerequisites, f"check: {prerequisites} (make check must lint first)"
    _, lint = recipe("lint")
    for tool in LINTERS:
        assert any(tool in line for line in lint), f"make lint does not run {tool}: {lint}"
    pytest_lines = [line for line in body if "pytest" in line]
    assert pytest_lines and all("$(CHECK_TESTS)" in line for line in pytest_lines), body
    phony = [line.split()[1:] for line in makefile_lines() if line.startswith(".PHONY:")]
    assert any("check" in names for names in phony), "check is not .PHONY"


def test_make_test_still_runs_every_test():
    prerequisites, body = recipe("test")
    assert prerequisites == ["setup", "lint"], prerequisites
    assert not any("CHECK_TESTS" in line or "tests/" in line for line in body), body


def test_check_tests_exist_and_cover_the_pure_tiers():
    names = check_tests()
    missing = [name for name in names if not (ROOT / name).exists()]
    assert not missing, f"CHECK_TESTS names what is not in the repo: {missing}"
    for tier in ("tests/domain", "tests/parsing", "tests/manifests", "tests/architecture"):
        assert tier in names, f"CHECK_TESTS lost {tier}"


def test_check_skip_names_test_files_of_check_tests_folders_and_make_check_ignores_them():
    """CHECK_SKIP leaves the long files of a CHECK_TESTS folder to ``make test``: each is a test
    file in one of those folders (a skip of anything else skips nothing), and the check recipe
    hands each to pytest as ``--ignore``."""
    folders = [ROOT / name for name in check_tests() if (ROOT / name).is_dir()]
    for name in check_skip():
        path = ROOT / name
        assert path.is_file() and path.name.startswith("test_"), f"CHECK_SKIP: {name} is no test"
        assert any(folder in path.parents for folder in folders), (
            f"CHECK_SKIP: {name} is in no folder of CHECK_TESTS"
        )
    _, body = recipe("check")
    (line,) = [line for line in body if "pytest" in line]
    assert "$(addprefix --ignore=,$(CHECK_SKIP))" in line, line


def slow_signs(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [
        f"{path.relative_to(ROOT)}: {what} ({pattern})"
        for pattern, what in SLOW_SIGNS.items()
        if re.search(pattern, text)
    ]


def test_no_check_test_sets_up_anything_slow():
    problems = [problem for path in check_files() for problem in slow_signs(path)]
    assert not problems, (
        "make check runs only fast tests; move these out of CHECK_TESTS (make test runs them):\n"
        + "\n".join(problems)
    )


def test_the_slow_signs_are_seen():
    """The scan above finds a slow test where there is one (else it could never fail)."""
    assert slow_signs(ROOT / "tests" / "test_nightly_dag.py")
    assert slow_signs(ROOT / "tests" / "store" / "test_ledger.py")


# --- CONTRIBUTING.md --------------------------------------------------------------------------


def make_targets() -> set[str]:
    targets = set()
    for line in makefile_lines():
        m = re.match(r"^([\w.][\w. -]*?)\s*::?(?!=)", line)
        if m and not line.startswith("\t"):
            targets |= set(m.group(1).split())
    return targets


def test_contributing_names_make_check_and_only_real_targets():
    text = CONTRIBUTING.read_text()
    named = set(re.findall(r"\bmake\s+([a-z][\w-]*)", text))
    assert "check" in named, "CONTRIBUTING.md does not name make check"
    assert not named - make_targets(), f"not in the Makefile: {sorted(named - make_targets())}"
    for var in set(re.findall(r"`([A-Z][A-Z_]+)=", text)):
        assert re.search(rf"^{var}\s*[:?]?=", MAKEFILE.read_text(), re.M), f"no {var} in Makefile"


def venv_tools(text: str) -> set[str]:
    return set(re.findall(r"\.venv/bin/([\w-]+)", text))


def test_the_tools_contributing_and_the_hooks_name_are_installed():
    bin_dir = Path(sys.executable).parent  # the venv running this test: requirements-dev.txt
    named = venv_tools(CONTRIBUTING.read_text()) | venv_tools(PRE_COMMIT.read_text())
    assert {"ruff", "lint-imports"} <= named, named
    missing = [tool for tool in sorted(named) if not (bin_dir / tool).exists()]
    assert not missing, f"not installed by requirements-dev.txt: {missing}"
    assert "pre-commit" not in (ROOT / "requirements-dev.txt").read_text(), (
        "pre-commit is optional (CONTRIBUTING.md): it is not one of the project's requirements"
    )


# --- .pre-commit-config.yaml ------------------------------------------------------------------


def hooks() -> list[dict]:
    config = yaml.safe_load(PRE_COMMIT.read_text())
    repos = config["repos"]
    assert [repo["repo"] for repo in repos] == ["local"] * len(repos), (
        "every hook is local: nothing is downloaded when a hook runs"
    )
    return [hook for repo in repos for hook in repo["hooks"]]


def hook_command(hook: dict) -> str:
    """The hook's command as a shell would run it (``sh -c '...'`` unwrapped)."""
    words = shlex.split(hook["entry"])
    return words[2] if words[:2] == ["sh", "-c"] else " ".join(words)


def test_the_hooks_run_the_venvs_ruff_and_import_linter():
    found = hooks()
    assert all(hook["language"] == "system" for hook in found), found
    commands = [hook_command(hook) for hook in found]
    for command in commands:
        tools = [w for w in shlex.split(command) if w.endswith(("/ruff", "/lint-imports", "/mypy"))]
        assert tools and all(".venv/bin/" in tool for tool in tools), command
    assert any(" ruff check" in f" {c}".replace(".venv/bin/", "") for c in commands), commands
    assert any(" ruff format" in f" {c}".replace(".venv/bin/", "") for c in commands), commands
    lint_imports = [c for c in commands if "lint-imports" in c]
    assert lint_imports, commands
    _, lint = recipe("lint")
    make_lint_imports = next(line for line in lint if "lint-imports" in line)
    # the same call as make lint's: from plugins/, the contracts in pyproject.toml
    assert lint_imports[0].startswith("cd plugins && ") and make_lint_imports.startswith(
        "cd plugins && "
    )
    assert "../pyproject.toml" in lint_imports[0] and "../pyproject.toml" in make_lint_imports
    whole = [hook for hook in found if "lint-imports" in hook["entry"]]
    assert whole[0].get("pass_filenames") is False, "import-linter checks the whole package"


def test_the_type_checker_runs_in_make_lint_and_as_a_hook_on_its_config():
    """mypy runs bare in both (its files and settings are pyproject.toml's [tool.mypy]), so the
    hook checks what ``make lint`` checks, never only the files a commit touches."""
    _, lint = recipe("lint")
    assert "$(BIN)/mypy" in lint, f"make lint does not run the venv's mypy bare: {lint}"
    mypy = [hook for hook in hooks() if hook_command(hook).endswith("/mypy")]
    assert [hook_command(hook) for hook in mypy] == [".venv/bin/mypy"], hooks()
    assert mypy[0].get("pass_filenames") is False, "mypy checks [tool.mypy]'s files whole"
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert sorted(config["files"]) == ["dags", "plugins/gpufleet"], config
    assert config["mypy_path"] == "plugins" and config["python_version"] == "3.11", config
    assert not config.get("ignore_missing_imports"), "missing types are ignored module by module"


def test_warnings_are_errors_and_each_ignore_is_named():
    """Airflow's next deprecations must not arrive silently: every warning is an error but the
    upstream ones ignored by message, category and module (pyproject.toml says why each)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    filters = config["tool"]["pytest"]["ini_options"]["filterwarnings"]
    assert filters[0] == "error"
    for rule in filters[1:]:
        action, message, category, module = rule.split(":", 3)
        assert action == "ignore" and message and category and module, rule
