"""A record of every attempt to reach a cluster or a cloud, for tests of the read paths (the
pages, ``/metrics``, ``gpufleet status``), which must leave it empty.

A guard that only raises proves nothing there: ``services.launch.gate.gather_facts`` takes any
exception from building a backend or listing nodes as "nodes not listed", so a raising guard
inside it never reaches the test. ``cluster_calls_refused`` records each attempt first, then
refuses it (``ClusterCalled``, not a ``GpufleetError``), and the test asserts that the record is
empty (``ClusterCalls.take``): an attempt swallowed on the way still shows.

Recorded, each as ``"<what> from <the gpufleet line that asked>"``:

- the backend factories ``cluster_backend``, ``polling_cluster_backend`` and ``cloud_backend``,
  under every name a loaded ``gpufleet`` module holds them by;
- building any backend: the simulator's (``SimBackendBase`` and its subclasses), Kubernetes'
  (``KubeClusterBackend``), the clouds' (``GkeCloudBackend``, ``EksCloudBackend``) and the
  retry wrappers; and every method of the ``ClusterBackend`` and ``CloudBackend`` protocols on
  them, so an instance built before the guard (a poller's kept one) is caught too;
- the simulator's own count of the API calls it answers (``backends.sim.calls.record``);
- the SDKs underneath, for a read that goes round the backends: the Kubernetes client's
  ``ApiClient.call_api``, botocore's ``BaseClient._make_api_call``, google-api-core's wrapped
  method call and google-auth's ``AuthorizedSession.request`` (each when installed).
"""

from __future__ import annotations

import functools
import importlib
import sys
import traceback
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

MARK = "_refused_cluster_call"  # a refusal's attribute: the function it stands for
FACTORIES = ("cluster_backend", "polling_cluster_backend", "cloud_backend")

# modules whose backend classes are patched; imported first, so none escapes by being new
BACKEND_MODULES = (
    "gpufleet.backends.retry",
    "gpufleet.backends.sim.base",
    "gpufleet.backends.sim.cluster",
    "gpufleet.backends.sim.cloud",
    "gpufleet.backends.kube.cluster",
    "gpufleet.backends.gke.backend",
    "gpufleet.backends.eks.backend",
)

# (module, class, method): where each SDK sends a request
SDK_CALLS = (
    ("kubernetes.client", "ApiClient", "call_api"),
    ("botocore.client", "BaseClient", "_make_api_call"),
    ("google.api_core.gapic_v1.method", "_GapicCallable", "__call__"),
    ("google.auth.transport.requests", "AuthorizedSession", "request"),
)


class ClusterCalled(AssertionError):
    """A refused attempt to reach a cluster (not a GpufleetError: nothing may take it for an
    unreachable cluster; and whoever catches it anyway, the record keeps it)."""


class ClusterCalls:
    """What ``cluster_calls_refused`` recorded, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def take(self) -> list[str]:
        """The attempts recorded since the last ``take``, and forget them."""
        out, self.calls = self.calls, []
        return out


def _asker() -> str:
    """The innermost gpufleet line outside ``backends/`` on the stack (who asked), else the
    innermost outside this file."""
    frames = traceback.extract_stack()[:-2]  # less this function and the refusal
    for frame in reversed(frames):
        path = frame.filename.replace("\\", "/")
        if "/gpufleet/" in path and "/gpufleet/backends/" not in path:
            return f"gpufleet/{path.split('/gpufleet/', 1)[1]}:{frame.lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


def _refusal(record: ClusterCalls, what: str, original: Any) -> Any:
    @functools.wraps(original)
    def refuse(*args: Any, **kwargs: Any) -> Any:
        record.calls.append(f"{what} from {_asker()}")
        raise ClusterCalled(f"a read path tried to reach a cluster: {what}")

    refuse.__dict__[MARK] = original
    return refuse


def _unwrapped(value: Any) -> Any:
    """``value``, or the function a refusal (of any guard) stands for."""
    while isinstance(value, types.FunctionType) and MARK in value.__dict__:
        value = value.__dict__[MARK]
    return value


def _sweep() -> None:
    """Put back every factory a refusal still stands for: a module first imported while the
    guard stood (``from gpufleet.backends import cluster_backend``) holds a refusal that the
    undoing of the patches does not know of, and would refuse for every later test."""
    for module in list(sys.modules.values()):
        try:
            items = list(vars(module).items())
        except TypeError:  # not a module (some packages put other objects in sys.modules)
            continue
        for attr, value in items:
            if isinstance(value, types.FunctionType) and MARK in value.__dict__:
                setattr(module, attr, _unwrapped(value))


def _subclasses(cls: type) -> list[type]:
    out = [cls]
    for sub in cls.__subclasses__():
        out += _subclasses(sub)
    return out


def _protocol_methods() -> set[str]:
    from gpufleet.backends.base import CloudBackend, ClusterBackend

    return {
        name
        for proto in (ClusterBackend, CloudBackend)
        for name in dir(proto)
        if not name.startswith("_")
    }


@contextmanager
def cluster_calls_refused() -> Iterator[ClusterCalls]:
    """Within: record, then refuse, every attempt to reach a cluster or a cloud (the module
    docstring lists them); yields the record. On leaving, every patch is undone, including the
    names that modules first imported within took from a patched module (``_sweep``)."""
    try:
        with pytest.MonkeyPatch.context() as monkeypatch:
            yield _install(monkeypatch)
    finally:
        _sweep()


def _install(monkeypatch: pytest.MonkeyPatch) -> ClusterCalls:
    record = ClusterCalls()
    for name in BACKEND_MODULES:
        importlib.import_module(name)
    import gpufleet.backends as backends
    from gpufleet.backends.sim import calls as sim_calls

    targets = [(_unwrapped(getattr(backends, f)), f"{f}()") for f in FACTORIES]
    targets.append((_unwrapped(sim_calls.record), "the simulator answering an API call"))
    for modname, module in list(sys.modules.items()):
        if module is None or not (modname == "gpufleet" or modname.startswith("gpufleet.")):
            continue
        for attr, value in list(vars(module).items()):
            for original, what in targets:
                if _unwrapped(value) is original:
                    monkeypatch.setattr(module, attr, _refusal(record, what, original))

    from gpufleet.backends.eks.backend import EksCloudBackend
    from gpufleet.backends.gke.backend import GkeCloudBackend
    from gpufleet.backends.kube.cluster import KubeClusterBackend
    from gpufleet.backends.retry import RetryingCloudBackend, RetryingClusterBackend
    from gpufleet.backends.sim.base import SimBackendBase

    methods = _protocol_methods()
    roots = (
        SimBackendBase,
        KubeClusterBackend,
        GkeCloudBackend,
        EksCloudBackend,
        RetryingClusterBackend,
        RetryingCloudBackend,
    )
    for cls in {c for root in roots for c in _subclasses(root)}:
        init = cls.__init__
        monkeypatch.setattr(cls, "__init__", _refusal(record, f"{cls.__name__}(...)", init))
        for name in methods:
            if callable(getattr(cls, name, None)):
                what = f"{cls.__name__}.{name}"
                monkeypatch.setattr(cls, name, _refusal(record, what, getattr(cls, name)))

    for modname, clsname, method in SDK_CALLS:
        try:
            cls = getattr(importlib.import_module(modname), clsname)
        except ImportError:  # not installed: nothing can call it
            continue
        what = f"{modname}.{clsname}.{method}"
        monkeypatch.setattr(cls, method, _refusal(record, what, getattr(cls, method)))
    return record
