"""Runtime and development requirements, kept apart and pinned.

``requirements.txt`` is what the image installs (the runtime); ``requirements-dev.txt`` is
``-r requirements.txt`` plus the test tools, what ``make`` installs into ``.venv``. Every
requirement is pinned with ``==`` to the version ``constraints.txt`` pins, and ``make
constraints`` builds that file from a clean install of requirements-dev.txt, so it pins the
test tools too. As in test_compose.py, each check returns the problems it found and runs
against the real files (must find nothing) and against broken copies (must find the fault).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.test_compose import dockerfile_instructions

ROOT = Path(__file__).resolve().parents[1]
TEST_TOOLS = {
    "pytest",
    "pytest-asyncio",
    "pytest-xdist",
    "moto",
    "kmock",
    "hypothesis",
    "ruff",
    "import-linter",
    "playwright",
    "cel-python",
}
DEV_INSTALL = "pip install -q -c constraints.txt -r requirements-dev.txt"
FILES = ("requirements.txt", "requirements-dev.txt", "constraints.txt", "Dockerfile", "Makefile")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(path: Path) -> tuple[list[str], dict[str, str | None]]:
    """(the ``-r``/``-c`` options, {normalized name: pinned version or None}) of one file."""
    options, pins = [], {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-"):
            options.append(" ".join(line.split()))
            continue
        match = re.match(r"([A-Za-z0-9._-]+)(\[[^\]]*\])?\s*(?:==\s*([^\s;]+))?", line)
        assert match, f"{path.name}: cannot read {raw!r}"
        pins[normalized(match.group(1))] = match.group(3) if match.group(3) else None
    return options, pins


def check_image_installs_runtime_only(root: Path = ROOT) -> list[str]:
    instructions = dockerfile_instructions((root / "Dockerfile").read_text(encoding="utf-8"))
    problems = []
    installed = [
        name
        for word, args in instructions
        if word == "RUN"
        for name in re.findall(r"(?:-r|--requirement)[\s=]+(\S+)", args)
    ]
    if installed != ["requirements.txt"]:
        problems.append(f"the image installs {installed}, expected ['requirements.txt'] only")
    for word, args in instructions:
        if word in ("COPY", "ADD") and "requirements-dev" in args:
            problems.append(f"the image copies the dev requirements: {word} {args}")
    return problems


def check_runtime_has_no_test_tools(root: Path = ROOT) -> list[str]:
    _, runtime = requirements(root / "requirements.txt")
    options, dev = requirements(root / "requirements-dev.txt")
    problems = [
        f"requirements.txt has the test tool {n}" for n in sorted(TEST_TOOLS & set(runtime))
    ]
    problems += [f"requirements.txt has {n} (a pytest plugin)" for n in runtime if "pytest" in n]
    if "-r requirements.txt" not in options:
        problems.append("requirements-dev.txt does not start from -r requirements.txt")
    problems += [f"requirements-dev.txt lacks {n}" for n in sorted(TEST_TOOLS - set(dev))]
    return problems


def check_pinned_in_constraints(root: Path = ROOT) -> list[str]:
    _, constraints = requirements(root / "constraints.txt")
    problems = []
    for name in ("requirements.txt", "requirements-dev.txt"):
        for package, version in requirements(root / name)[1].items():
            if version is None:
                problems.append(f"{name}: {package} is not pinned with ==")
            elif package not in constraints:
                problems.append(f"{name}: {package} is not in constraints.txt")
            elif constraints[package] != version:
                problems.append(
                    f"{name}: {package}=={version}, constraints.txt {constraints[package]}"
                )
    return problems


def _make_n(root: Path, venv: Path, *args: str) -> str:
    proc = subprocess.run(
        ["make", "-n", "-C", str(root), f"VENV={venv}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def check_makefile(root: Path, venv: Path) -> list[str]:
    """``make -n`` against a venv installed after every file changed (``venv``)."""
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    later = time.time() + 3600
    for stamp in (venv / "bin" / "activate", venv / ".installed"):
        stamp.touch()
        os.utime(stamp, (later, later))
    target = str(venv / ".installed")
    problems = []
    if "pip install" in _make_n(root, venv, target):
        problems.append("make reinstalls a venv that is up to date")
    for changed in ("requirements.txt", "requirements-dev.txt", "constraints.txt"):
        if DEV_INSTALL not in _make_n(root, venv, "-W", changed, target):
            problems.append(f"a changed {changed} does not make the venv {DEV_INSTALL!r}")
    rebuild = _make_n(root, venv, "constraints")
    if DEV_INSTALL not in rebuild or "pip freeze" not in rebuild:
        problems.append(f"make constraints does not freeze a clean {DEV_INSTALL!r}")
    return problems


CHECKS = (check_image_installs_runtime_only, check_runtime_has_no_test_tools)
CHECKS += (check_pinned_in_constraints,)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_the_real_files(check) -> None:
    assert check() == []


def test_the_real_makefile(tmp_path: Path) -> None:
    assert check_makefile(ROOT, tmp_path / "venv") == []


BREAKAGES = [
    ("Dockerfile", "-r requirements.txt", "-r requirements-dev.txt", "installs ['requirements-d"),
    ("Dockerfile", "requirements.txt constraints", "requirements-dev.txt constraints", "copies"),
    (
        "requirements.txt",
        "kubernetes-validate==",
        "pytest-timeout==2.3.1\nkubernetes-validate==",
        "pytest",
    ),
    ("requirements.txt", "Jinja2==3.1.6", "Jinja2==3.1.6\nruff==0.17.6", "test tool ruff"),
    ("requirements-dev.txt", "-r requirements.txt\n", "", "-r requirements.txt"),
    ("requirements-dev.txt", "kmock==0.8\n", "", "lacks kmock"),
    ("requirements-dev.txt", "kmock==0.8", "kmock>=0.8", "kmock is not pinned"),
    ("requirements-dev.txt", "kmock==0.8", "kmock==0.9", "kmock==0.9, constraints.txt 0.8"),
    ("requirements.txt", "boto3==1.44.8", "boto3==1.44.8\nnot-a-dep==1.0", "not-a-dep is not in"),
    ("constraints.txt", "\nkmock==0.8\n", "\n", "kmock is not in constraints.txt"),
]


@pytest.mark.parametrize("file,good,bad,expected", BREAKAGES)
def test_the_checks_find_faults(tmp_path: Path, file, good, bad, expected) -> None:
    for name in FILES:
        shutil.copy(ROOT / name, tmp_path / name)
    assert [p for check in CHECKS for p in check(tmp_path)] == []  # the copies are fine
    text = (tmp_path / file).read_text()
    assert good in text
    (tmp_path / file).write_text(text.replace(good, bad, 1))
    problems = [p for check in CHECKS for p in check(tmp_path)]
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    "good,bad,expected",
    [
        ("pyproject.toml\n", "pyproject.toml\n", "up to date"),  # control: the copy is fine
        (" requirements-dev.txt constraints.txt", " constraints.txt", "changed requirements-dev"),
        (
            "-r requirements-dev.txt\n\t$(BIN)/pip install",
            "-r requirements.txt\n\t$(BIN)/pip install",
            "changed",
        ),
        (
            "/pip install -q -c constraints.txt -r requirements-dev.txt\n\t(echo",
            "/pip install -q -c constraints.txt -r requirements.txt\n\t(echo",
            "make constraints",
        ),
    ],
)
def test_the_makefile_check_finds_faults(tmp_path: Path, good, bad, expected) -> None:
    for name in FILES:
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "pyproject.toml").touch()
    makefile = tmp_path / "Makefile"
    assert good in makefile.read_text()
    makefile.write_text(makefile.read_text().replace(good, bad, 1))
    problems = check_makefile(tmp_path, tmp_path / "venv")
    if good == bad:
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems
