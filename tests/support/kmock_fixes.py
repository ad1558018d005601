"""kmock 0.8, mended where the tests meet it; ``install()`` applies the fixes, once per
process (``KubeEmulator.start`` calls it).

- **Namespace paths.** kmock fails to parse ``/api/v1/namespaces`` (500, "not enough values to
  unpack") and reads ``/api/v1/namespaces/NAME`` as a namespace without a resource. The wrapper
  only touches those paths, and only while the installed kmock still gets them wrong.
- **Matching in constant time.** kmock decides which reaction serves a request by asking each
  reaction's view whether it holds the request, and a view answers by re-filtering the
  server's whole request history (``View.__contains__``), so every request costs more than the
  last: in an onboarding, most of the emulator's time. For a filter (or a priority) over the
  server itself, "holds the request" is "the server received it and the filter's criteria
  accept it", asked of the new request alone. Any other view answers as kmock does.
- **Watch flags as the client sends them.** kmock takes a GET as a watch only for
  ``watch=true``; the official Python client sends ``watch=True`` (and the API server, like
  Go's ``strconv.ParseBool``, accepts ``true``, ``True``, ``TRUE``, ``1``, ``t``, ``T``), so
  its watches were served as plain lists. The wrapper reads the flag as the API server does.
"""

from __future__ import annotations

import re
from typing import Any

from kmock._internal import dsl, rendering
from kmock._internal import parsing as _kmock_parsing

_NAMESPACE_PATH = re.compile(
    r"^/api/v1/namespaces(?:/(?P<name>[^/]+)(?:/(?P<sub>status|finalize))?)?/?$"
)


def install() -> None:
    _install_namespace_path_fix()
    _install_constant_time_matching()
    _install_watch_flag_fix()


TRUE_FLAGS = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # Go's strconv.ParseBool


def _install_watch_flag_fix() -> None:
    original = _kmock_parsing.guess_k8s
    if getattr(original, "_gpufleet_fix", False):
        return

    def guess_k8s(k8s: Any, method: Any, query: dict[str, str]) -> Any:
        if query.get("watch") in TRUE_FLAGS:
            query = {**query, "watch": "true"}
        return original(k8s, method, query)

    guess_k8s._gpufleet_fix = True  # type: ignore[attr-defined]
    _kmock_parsing.guess_k8s = guess_k8s


def _install_namespace_path_fix() -> None:
    original = _kmock_parsing.parse_path
    if getattr(original, "_gpufleet_fix", False):
        return
    try:
        broken = original("/api/v1/namespaces/x").plural != "namespaces"
    except ValueError:
        broken = True
    if not broken:
        return

    def parse_path(path: str) -> Any:
        match = _NAMESPACE_PATH.match(path)
        if match is None:
            return original(path)
        return _kmock_parsing.ParsedPath(
            group="",
            version="v1",
            plural="namespaces",
            namespace=None,
            name=match["name"],
            subresource=match["sub"],
        )

    parse_path._gpufleet_fix = True  # type: ignore[attr-defined]
    _kmock_parsing.parse_path = parse_path


def _sees(view: Any, request: Any) -> bool | None:
    """Whether a plain chain of filters over the server holds ``request``; None for any other
    view (kmock answers)."""
    if isinstance(view, dsl.Root):
        return any(r is request for r in view)
    if type(view) is dsl.Filter:
        held = _sees(view._source, request)
        return bool(view.criteria(request)) if held else held
    if type(view) is dsl.Priority:
        return _sees(view._source, request)
    return None


def _install_constant_time_matching() -> None:
    original = dsl.View.__contains__
    if getattr(original, "_gpufleet_fix", False):
        return

    def contains(self: Any, item: Any) -> bool:
        if isinstance(item, rendering.Request) and not isinstance(self, dsl.Root):
            held = _sees(self, item)
            if held is not None:
                return held
        return original(self, item)

    contains._gpufleet_fix = True  # type: ignore[attr-defined]
    dsl.View.__contains__ = contains
