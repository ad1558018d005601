"""The layer contracts (pyproject.toml, run by ``make lint``) hold, and they bite.

Each test copies the package to a scratch folder, plants one import that breaks a rule, and
runs ``lint-imports`` on the copy: the contract it breaks must be reported BROKEN.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(plugins: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT), str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=plugins,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    plugins = tmp_path / "plugins"
    shutil.copytree(
        ROOT / "plugins" / "gpufleet",
        plugins / "gpufleet",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return plugins


def _plant(plugins: Path, module: str, line: str) -> None:
    path = plugins / Path(*module.split(".")).with_suffix(".py")
    text = path.read_text()
    head, sep, tail = text.partition("from __future__ import annotations\n")
    assert sep, f"{path} has no __future__ import to plant after"
    path.write_text(head + sep + line + "\n" + tail)


def test_the_tree_keeps_every_contract():
    done = _lint(ROOT / "plugins")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # the domain may not reach up into the ledger (a lower layer importing a higher one)
        ("gpufleet.domain.gate", "import gpufleet.store  # noqa", "gpufleet layers point down"),
        # manifests and backends are independent siblings
        (
            "gpufleet.manifests.templates",
            "import gpufleet.backends.base  # noqa",
            "gpufleet layers point down",
        ),
        # parsing may not talk to a cluster
        (
            "gpufleet.parsing.storage",
            "import kubernetes  # noqa",
            "domain and parsing do no I/O and hold no clients",
        ),
        # the service contexts are independent of each other
        (
            "gpufleet.services.validation.drift",
            "import gpufleet.services.launch.gate  # noqa",
            "services: views over the three independent contexts",
        ),
        # a context may not reach up into the views (the report is a view of the ledger)
        (
            "gpufleet.services.infrastructure.onboarding",
            "import gpufleet.services.views.report  # noqa",
            "services: views over the three independent contexts",
        ),
        # the node lifecycle serves the contexts, it does not call them
        (
            "gpufleet.services.nodes.drain",
            "import gpufleet.services.infrastructure.transition  # noqa",
            "services: views over the three independent contexts",
        ),
        # services may not import Airflow
        (
            "gpufleet.services.launch.gate",
            "import airflow  # noqa",
            "only gpufleet.airflow imports",
        ),
    ],
)
def test_a_violating_import_breaks_its_contract(scratch, module, line, contract):
    _plant(scratch, module, line)
    done = _lint(scratch)
    assert done.returncode != 0, done.stdout
    broken = done.stdout[done.stdout.index("Broken contracts") :]
    assert contract in broken, done.stdout
