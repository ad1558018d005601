"""Split by concept, not by size: no module-length cap; instead ruff's complexity rules
(``C901``: mccabe complexity, ``PLR0913``: too many arguments) hold every function of the
project, and each outlier says on its own line why it stays as it is."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ("C901", "PLR0913")
SCANNED = ("plugins", "dags", "tests", "bench", "scripts")
NOQA = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)(?P<why>.*)$")


def _lint() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"][
        "lint"
    ]


def test_the_complexity_rules_are_selected_with_their_limits():
    lint = _lint()
    assert set(RULES) <= set(lint["select"]), lint["select"]
    assert not set(RULES) & set(lint.get("ignore", ())), lint["ignore"]
    complexity = lint["mccabe"]["max-complexity"]
    args = lint["pylint"]["max-args"]
    # limits a reader can hold in mind: a cap raised to let everything pass is no rule
    assert 5 <= complexity <= 15 and 5 <= args <= 9, (complexity, args)


def _outliers(text: str) -> list[tuple[int, list[str], str]]:
    """(line, codes, reason) of each ``# noqa`` naming a complexity rule in ``text``."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        match = NOQA.search(line)
        if match is None:
            continue
        codes = [c.strip() for c in match["codes"].split(",")]
        if set(codes) & set(RULES):
            out.append((number, codes, match["why"].strip()))
    return out


def test_the_outlier_scan_reads_codes_and_reasons():
    text = "def f(  # noqa: C901, PLR0913  one branch per kind\ndef g():  # noqa: C901\n"
    assert _outliers(text) == [
        (1, ["C901", "PLR0913"], "one branch per kind"),
        (2, ["C901"], ""),
    ]


def test_every_complexity_outlier_says_why():
    silent = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, codes, why in _outliers(path.read_text(encoding="utf-8")):
                if len(why) < 10:
                    silent.append(f"{path.relative_to(ROOT)}:{number}: {', '.join(codes)}")
    assert not silent, "a complexity outlier without its reason:\n" + "\n".join(silent)


def test_ruff_finds_no_function_over_the_limits():
    ruff = Path(sys.executable).with_name("ruff")
    done = subprocess.run(
        [str(ruff), "check", "--select", ",".join(RULES), "--output-format", "concise", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
