"""The Jinja2 environment over ``include/manifests``: render one template and load its YAML.

Reads the template files (from ``gpufleet.config.paths.include_dir()``, so
``GPUFLEET_INCLUDE_DIR`` moves them). Templates use ``StrictUndefined`` (a missing variable is
an error, never an empty string) and emit values through the ``j`` filter (JSON, which is
YAML), so no value can break the document. Each rendered text is safe-loaded (YAML) to dicts.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import jinja2
import yaml

from gpufleet.config.paths import include_dir
from gpufleet.domain.workloads import PENDING_KEYS

try:  # libyaml's loader is several times faster on large JobSets
    _YamlLoader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - libyaml missing
    _YamlLoader = yaml.SafeLoader


@lru_cache(maxsize=4)
def _environment(directory: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    # JSON is YAML: any value emitted through `j` is one well-formed scalar/flow node
    env.filters["j"] = _json
    # the taints a node awaiting validation carries (validation pods and device plugins
    # tolerate them): one home, ``domain.workloads.PENDING_KEYS``
    env.globals["pending_taints"] = list(PENDING_KEYS)
    return env


def _json(value: Any) -> str:
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises UndefinedError naming the missing variable
    return json.dumps(value)


def _render_text(template: str, **context: Any) -> str:
    directory = include_dir() / "manifests"
    try:
        return _environment(str(directory)).get_template(template).render(**context)
    except jinja2.TemplateNotFound:
        raise FileNotFoundError(
            f"manifest template {template!r} not found in {directory}"
        ) from None


def render_template(template: str, **context: Any) -> dict[str, Any]:
    """Render one ``include/manifests`` template holding one object and load it."""
    obj = yaml.load(_render_text(template, **context), Loader=_YamlLoader)
    if not isinstance(obj, dict):
        raise ValueError(f"template {template!r} did not render to one object")
    return obj


def render_template_all(template: str, **context: Any) -> list[dict[str, Any]]:
    """Render a multi-document template and load every object in it."""
    docs = yaml.load_all(_render_text(template, **context), Loader=_YamlLoader)
    return [d for d in docs if d is not None]
