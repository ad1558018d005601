"""The template environment: templates come from ``<include>/manifests``, a missing variable
is an error (never an empty string), and values emitted through ``j`` cannot break the YAML."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest

from gpufleet.manifests.templates import render_template, render_template_all


@pytest.fixture
def include(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "manifests").mkdir()
    monkeypatch.setenv("GPUFLEET_INCLUDE_DIR", str(tmp_path))
    return tmp_path / "manifests"


def test_templates_are_read_from_the_include_folder(include: Path) -> None:
    (include / "one.yaml.j2").write_text("kind: ConfigMap\ndata:\n  value: {{ value | j }}\n")
    hostile = 'a: b\n- "quoted" # not a comment'
    assert render_template("one.yaml.j2", value=hostile) == {
        "kind": "ConfigMap",
        "data": {"value": hostile},
    }
    (include / "two.yaml.j2").write_text(
        "{% for n in names %}\n---\nname: {{ n | j }}\n{% endfor %}\n"
    )
    assert render_template_all("two.yaml.j2", names=["a", "b"]) == [{"name": "a"}, {"name": "b"}]


def test_a_missing_variable_is_an_error(include: Path) -> None:
    (include / "one.yaml.j2").write_text("name: {{ name | j }}\nimage: {{ image | j }}\n")
    with pytest.raises(jinja2.UndefinedError, match="image"):
        render_template("one.yaml.j2", name="x")


def test_a_missing_template_names_the_folder(include: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(include)):
        render_template("nope.yaml.j2")


def test_a_template_must_render_one_object(include: Path) -> None:
    (include / "list.yaml.j2").write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="did not render to one object"):
        render_template("list.yaml.j2")
