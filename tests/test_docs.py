"""The docs say only what can be checked to be true, where a claim can be checked.

Over README.md, CONTRIBUTING.md, CHANGELOG.md, docs/*.md, docs/design/*.md and each DAG file's
module docstring (its ``doc_md``):
- every relative link and image exists (and a ``#anchor`` into a Markdown file is one of its
  headings);
- every path a doc names in the repo (``plugins/``, ``gpufleet/...py``, ``bench/``,
  ``scripts/``, ``tests/``, ``dags/``, ``docs/``, ``include/``, a bare ``name.md``) exists, and
  every ``gpufleet.x.y`` dotted name is a module, folder or attribute of the package;
- the ledger's schema version a doc states is the code's (``current_schema_version``), the
  ledger's table list is the schema's MetaData, and every ``gf_table[.column]`` a doc names is
  in it;
- a DAG's doc_md names only tasks the DAG has (bold step names and ``the `x` task``) and does not
  say metrics are written to files (the plugin serves them at scrape time, from the ledger);
- every ``make`` target a doc names is in the Makefile;
- docs/architecture.md names every package of gpufleet and links every docs/design page;
- the Helm values in docs/deploy.md validate against the official chart's own
  ``values.schema.json`` at the version the page names (vendored under tests/data/helm/).
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "plugins"
ROOT_DOCS = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")
DESIGN_DOCS = sorted((ROOT / "docs" / "design").glob("*.md"))
DOCS = [
    *(ROOT / name for name in ROOT_DOCS),
    *sorted((ROOT / "docs").glob("*.md")),
    *DESIGN_DOCS,
]
DAG_FILES = sorted(p for p in (ROOT / "dags").glob("*.py") if not p.name.startswith("_"))

# Named by a doc but written by a run, not kept in the repo.
GENERATED = {
    "tests/browser/artifacts/fleet.png": "the browser tests' screenshot (docs/images/fleet.png)",
    "report.md": "the nightly's report, written under $AIRFLOW_HOME/gpufleet/reports/",
    "include/fleet/x.yaml": "the file named in an example error message",
}


def current_schema_version() -> int:
    """The ledger schema version the code creates: the one place this test reads it from."""
    from gpufleet.store import migrations, schema

    for module in (schema, migrations):
        version = getattr(module, "SCHEMA_VERSION", None)
        if isinstance(version, int):
            return version
    pytest.fail("no SCHEMA_VERSION in gpufleet.store: say here where the schema version lives")


def ledger_tables() -> dict[str, set[str]]:
    """Every table of the ledger's MetaData, with its columns."""
    from gpufleet.store import schema

    importlib.import_module("gpufleet.store.schema_regions")  # registers the region tables
    return {name: set(table.columns.keys()) for name, table in schema.metadata.tables.items()}


def version_tables() -> set[str]:
    """The ledger's version tables, which live outside the MetaData (the migrations' own)."""
    from gpufleet.store import migrations

    names = ("VERSION_TABLE", "LEGACY_VERSION_TABLE")
    return {getattr(migrations, n) for n in names if hasattr(migrations, n)}


def dag_docs() -> dict[str, str]:
    """Each DAG file's module docstring (the DAG's doc_md), read without importing it."""
    return {f"dags/{p.name}": ast.get_docstring(ast.parse(p.read_text())) or "" for p in DAG_FILES}


def all_docs() -> dict[str, tuple[Path, str]]:
    """name -> (the folder relative links resolve from, the text)."""
    docs = {str(p.relative_to(ROOT)): (p.parent, p.read_text()) for p in DOCS}
    docs.update({name: (ROOT, text) for name, text in dag_docs().items()})
    return docs


def prose(text: str) -> str:
    """The text without fenced code blocks (links and bold only mean something outside them)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def where(name: str, text: str, pos: int) -> str:
    return f"{name}:{text.count(chr(10), 0, pos) + 1}"


# --- links and paths -------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
IMG_TAG = re.compile(r"<img[^>]*\bsrc=\"([^\"]+)\"", re.I)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...


@cache
def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file: markup gone (code ticks, emphasis, a link's
    target), punctuation dropped except ``-`` and a word's ``_`` (GitHub keeps
    ``bench/parse_time.py`` as ``benchparse_timepy``), spaces to ``-``."""
    slugs = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose(path.read_text()), re.M):
        markup = r"[`*]|(?<!\w)_+|_+(?!\w)|\[([^\]]*)\]\([^)]*\)"
        text = re.sub(markup, r"\1", heading).strip().lower()
        slugs.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return slugs


def broken_links() -> list[str]:
    problems = []
    for name, (base, text) in all_docs().items():
        body = prose(text)
        for pattern in (LINK, REF_LINK, IMG_TAG):
            for m in pattern.finditer(body):
                target = m.group(1)
                if EXTERNAL.match(target):
                    continue
                path_part, _, anchor = target.partition("#")
                path = (base / path_part).resolve() if path_part else ROOT / name
                at = where(name, body, m.start())
                if not path.exists():
                    problems.append(f"{at}: link to {target}: no such file")
                elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                    problems.append(f"{at}: link to {target}: no heading #{anchor} there")
    return problems


REPO_PATH = re.compile(
    r"(?<![\w./$:~-])((?:plugins|bench|scripts|tests|dags|docs|include)/[\w.@/-]*+)(?![*<{$])"
)
PACKAGE_PATH = re.compile(r"(?<![\w./$:~-])(gpufleet/[\w/]+\.py)\b")
MD_FILE = re.compile(r"(?<![\w./$:~-])([\w-]+\.md)\b")


def missing_paths() -> list[str]:
    problems = []
    for name, (base, text) in all_docs().items():
        for m in REPO_PATH.finditer(text):
            path = m.group(1).rstrip(".,;:-")
            if path not in GENERATED and not (ROOT / path).exists():
                problems.append(f"{where(name, text, m.start())}: {path}: not in the repo")
        for m in PACKAGE_PATH.finditer(text):
            if not (PLUGINS / m.group(1)).exists():
                problems.append(f"{where(name, text, m.start())}: {m.group(1)}: not in plugins/")
        for m in MD_FILE.finditer(text):
            if m.group(1) in GENERATED:
                continue
            if not any((folder / m.group(1)).exists() for folder in (base, ROOT, ROOT / "docs")):
                problems.append(f"{where(name, text, m.start())}: {m.group(1)}: not in the repo")
    return problems


DOTTED = re.compile(r"(?<![\w./-])(gpufleet(?:\.[A-Za-z_]\w*)+)(?![\w/*-])")


FILE_SUFFIXES = {"css", "js", "html", "svg", "json", "yaml", "md", "py", "txt"}


def resolves(dotted: str) -> bool:
    """A folder or module under plugins/, then (what is left) attributes of that module."""
    parts = dotted.split(".")
    if parts[-1] in FILE_SUFFIXES:  # a file name such as gpufleet.css
        return any(PLUGINS.rglob(dotted))
    path, depth = PLUGINS / parts[0], 1
    while depth < len(parts) and (
        (path / parts[depth]).is_dir() or (path / f"{parts[depth]}.py").is_file()
    ):
        path, depth = path / parts[depth], depth + 1
    if depth == len(parts):
        return True
    try:
        obj = importlib.import_module(".".join(parts[:depth]))
        for attr in parts[depth:]:
            obj = getattr(obj, attr)
    except (ImportError, AttributeError):
        return False
    return True


def unknown_dotted_names() -> list[str]:
    problems = []
    for name, (_base, text) in all_docs().items():
        for m in DOTTED.finditer(text):
            if m.group(1) != "gpufleet.io" and not resolves(m.group(1)):
                problems.append(f"{where(name, text, m.start())}: {m.group(1)}: not in gpufleet")
    return problems


def test_every_relative_link_and_image_exists():
    assert not (problems := broken_links()), "\n".join(problems)


def test_every_path_a_doc_names_exists():
    assert not (problems := missing_paths()), "\n".join(problems)


def test_every_dotted_gpufleet_name_exists():
    assert not (problems := unknown_dotted_names()), "\n".join(problems)


# --- the ledger --------------------------------------------------------------------------------

CURRENT_VERSION = re.compile(
    r"(?:schema|ledger|gf_schema_version)[^.;]{0,80}?\b(?:now|currently|is at)\s+"
    r"(?:at\s+)?(?:version\s+|revision\s+|v)?(\d+)\b",
    re.I,
)
NAMED_VERSION = re.compile(r"\b(?:schema|ledger)\s+(?:version\s+|v)(\d+)\b", re.I)
HISTORY_VERSION = re.compile(r"\bv(\d+)\b")


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def schema_version_claims() -> tuple[list[str], list[str]]:
    """(where a doc states the current version, what is wrong with what the docs state)."""
    version, claims, problems = current_schema_version(), [], []
    for name, (_base, text) in all_docs().items():
        for para in paragraphs(text):
            current = [int(v) for v in CURRENT_VERSION.findall(para)]
            claims += [f"{name}: {v}" for v in current]
            problems += [
                f"{name}: says the schema is now {v}, it is {version}"
                for v in current
                if v != version
            ]
            for v in map(int, NAMED_VERSION.findall(para)):
                if v > version:
                    problems.append(f"{name}: names schema v{v}; the newest is {version}")
            history = [int(v) for v in HISTORY_VERSION.findall(para)]
            if current and history and max(history) != version:
                problems.append(
                    f"{name}: its version history ends at v{max(history)}, the code at {version}"
                )
    return claims, problems


def test_the_schema_version_the_docs_state_is_the_codes():
    claims, problems = schema_version_claims()
    assert claims, "no doc states the ledger's current schema version (or CURRENT_VERSION is blind)"
    assert not problems, "\n".join(problems)


def ledger_table_lists() -> list[tuple[str, set[str]]]:
    """Each list of the ledger's tables (a line starting "Tables:", to the end of its paragraph)
    and the tables it names."""
    return [
        (name, {t for t, _col in re.findall(r"\b(gf_\w+?)(?:\.(\w+))?\b", listing)})
        for name, (_base, text) in all_docs().items()
        for listing in re.findall(r"^Tables:(.*?)(?:\n\s*\n|\Z)", text, flags=re.M | re.S)
    ]


def test_the_ledgers_table_list_is_the_schemas():
    lists = ledger_table_lists()
    assert lists, "no doc lists the ledger's tables (a line starting 'Tables:')"
    tables = set(ledger_tables())
    for name, listed in lists:
        assert listed == tables, (
            f"{name}: not in the schema {sorted(listed - tables)}; "
            f"not listed {sorted(tables - listed)}"
        )


def unknown_ledger_names() -> list[str]:
    tables, problems = ledger_tables(), []
    for name, (_base, text) in all_docs().items():
        for m in re.finditer(r"\b(gf_\w+?)(?:\.([a-z_]\w*))?\b", text):
            table, column = m.groups()
            if table in version_tables():
                continue
            if table not in tables:
                problems.append(f"{where(name, text, m.start())}: no ledger table {table}")
            elif column and column not in tables[table]:
                problems.append(f"{where(name, text, m.start())}: no column {table}.{column}")
    return problems


def test_every_ledger_table_and_column_a_doc_names_exists():
    assert not (problems := unknown_ledger_names()), "\n".join(problems)


# --- the DAGs' doc_md --------------------------------------------------------------------------

BOLD_TASK = re.compile(r"\*\*([a-z][a-z0-9_]*)\*\*")
NAMED_TASK = re.compile(r"(?:\btasks?\s+`([a-z][a-z0-9_]*)`|`([a-z][a-z0-9_]*)`\s+task\b)")
# A sentence that has metrics (not the /metrics endpoint) written, saved or in a file.
METRICS_IN_FILES = re.compile(
    r"[^.]*(?<!/)\bmetrics\b[^.]*\b(?:written|writes?|saved|dumped|textfile|\.prom)\b[^.]*"
    r"|[^.]*\b(?:written|writes?|saved|dumped)\b[^.]*(?<!/)\bmetrics\b[^.]*",
    re.I,
)


@pytest.fixture(scope="module")
def dags():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.dags


def tasks_named(doc: str) -> set[str]:
    body = prose(doc)
    named = set(BOLD_TASK.findall(body))
    named |= {a or b for a, b in NAMED_TASK.findall(body)}
    return named


def test_each_dags_doc_names_only_its_own_tasks(dags):
    assert {Path(d.fileloc).stem for d in dags.values()} == {p.stem for p in DAG_FILES}
    problems = []
    for dag_id, dag in sorted(dags.items()):
        ids = set(dag.task_dict) | set(dag.task_group_dict)
        assert dag.doc_md, f"{dag_id}: no doc_md"
        problems += [
            f"{dag_id}: doc names task {t!r}" for t in sorted(tasks_named(dag.doc_md) - ids)
        ]
    assert not problems, "\n".join(problems)


def test_no_doc_says_metrics_are_written_to_files(dags):
    texts = {dag_id: dag.doc_md for dag_id, dag in dags.items()}
    texts.update({name: text for name, (_base, text) in all_docs().items()})
    claims = [
        f"{n}: {m.group(0).strip()}" for n, t in texts.items() for m in METRICS_IN_FILES.finditer(t)
    ]
    assert not claims, "\n".join(claims)


# --- make targets ------------------------------------------------------------------------------

MAKE_INLINE = re.compile(r"`make\s+([a-z][\w-]*)")
MAKE_LINE = re.compile(r"^\s*(?:\$\s*)?make\s+([a-z][\w-]*)", re.M)


def make_targets() -> set[str]:
    targets = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.match(r"^([\w.][\w. -]*?)\s*::?(?!=)", line)
        if m and not line.startswith("\t"):
            targets |= set(m.group(1).split())
    return targets


def unknown_make_targets() -> list[str]:
    targets, problems = make_targets(), []
    for name, (_base, text) in all_docs().items():
        code = "\n".join(re.findall(r"^```.*?^```", text, flags=re.M | re.S))
        named = set(MAKE_INLINE.findall(text)) | set(MAKE_LINE.findall(code))
        problems += [f"{name}: make {t}: no such target" for t in sorted(named - targets)]
    return problems


def test_every_make_target_a_doc_names_exists():
    assert "run" in make_targets() and "test" in make_targets()
    assert not (problems := unknown_make_targets()), "\n".join(problems)


# --- the architecture page covers every package ---------------------------------------------


def packages() -> list[str]:
    """Every package of gpufleet below the top (a folder with an ``__init__.py``), as a path."""
    top = PLUGINS / "gpufleet"
    return sorted(str(p.parent.relative_to(top)) for p in top.glob("*/**/__init__.py"))


def named_as_a_package(package: str, text: str) -> bool:
    """``services/validation/`` at the start of a line or in code ticks (the tree, the table),
    ``gpufleet/services/validation`` or ``gpufleet.services.validation``: a word in a sentence
    (``airflow/sdk/...``) does not count."""
    path = re.escape(package)
    dotted = re.escape(package.replace("/", "."))
    as_path = rf"(?:^\s*|`|gpufleet/){path}/"
    as_module = rf"gpufleet\.{dotted}(?![\w.])|gpufleet/{path}\b"
    return re.search(rf"{as_path}|{as_module}", text, re.M) is not None


def test_the_architecture_page_names_every_package():
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert "services/validation" in packages(), "packages() is blind: it must list subpackages"
    missing = [p for p in packages() if not named_as_a_package(p, text)]
    assert not missing, f"docs/architecture.md does not name the packages {missing}"


def test_the_architecture_page_links_every_design_page():
    text = (ROOT / "docs" / "architecture.md").read_text()
    linked = {m.split("#")[0] for m in LINK.findall(prose(text))}
    pages = sorted(p.relative_to(ROOT / "docs").as_posix() for p in DESIGN_DOCS)
    assert pages, "no docs/design/*.md pages"
    missing = [page for page in pages if page not in linked]
    assert not missing, f"docs/architecture.md links no {missing}"


# --- the Helm chart values in docs/deploy.md ----------------------------------------------------

CHART_VERSION = re.compile(r"apache-airflow/airflow --version (\d+\.\d+\.\d+)")


def chart_section(text: str) -> str:
    """The section of docs/deploy.md about the official chart: its heading to the next one."""
    m = re.search(r"^## [^\n]*apache-airflow/airflow[^\n]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, "docs/deploy.md has no '## ... apache-airflow/airflow ...' section"
    return m.group(1)


def chart_values() -> tuple[str, list[str]]:
    """(the chart version the section names, each YAML block of values in it)."""
    section = chart_section((ROOT / "docs" / "deploy.md").read_text())
    versions = set(CHART_VERSION.findall(section))
    assert len(versions) == 1, f"the chart section names versions {versions}: name exactly one"
    blocks = re.findall(r"^```ya?ml\n(.*?)^```", section, re.M | re.S)
    assert blocks, "the chart section has no ```yaml block of values"
    return versions.pop(), blocks


def chart_value_errors(version: str, blocks: list[str]) -> list[str]:
    import json

    import jsonschema
    import yaml

    path = ROOT / "tests" / "data" / "helm" / f"airflow-chart-{version}" / "values.schema.json"
    assert path.is_file(), f"no vendored schema for chart {version}: {path.relative_to(ROOT)}"
    schema = json.loads(path.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    problems = []
    for i, block in enumerate(blocks, 1):
        values = yaml.safe_load(block)
        assert isinstance(values, dict), f"YAML block {i} is not a mapping of values"
        # The chart's schema lets unknown top-level keys through (and Helm ignores them): a
        # misspelt section would be silently dropped, so the top level is checked here.
        problems += [
            f"block {i}: {key}: not a value of chart {version}"
            for key in values
            if key not in schema["properties"]
        ]
        for error in validator.iter_errors(values):
            where_ = ".".join(map(str, error.absolute_path)) or "(top)"
            problems.append(f"block {i}: {where_}: {error.message[:300]}")
    return problems


def test_deploy_chart_values_follow_the_charts_schema():
    version, blocks = chart_values()
    assert not (problems := chart_value_errors(version, blocks)), "\n".join(problems)


@pytest.mark.parametrize(
    ("key", "misspelt"),
    [("replicas", "replica"), ("triggerer", "trigerer")],
    ids=["nested, by the schema", "top level, by the test"],
)
def test_the_chart_check_refuses_a_misspelt_key(key, misspelt):
    """The check can fail: the same values with one key misspelt are refused."""
    version, blocks = chart_values()
    text = re.sub(rf"^(\s*){key}:", rf"\1{misspelt}:", blocks[0], count=1, flags=re.M)
    assert text != blocks[0], f"no `{key}:` key left to misspell in the first block"
    assert any(misspelt in problem for problem in chart_value_errors(version, [text]))
