"""List-then-watch of nodes and of the Events about nodes, with resource versions.

Each call is a bounded read: a list returns every object and the list's ``resourceVersion``; a
watch (``kubernetes.watch.Watch`` over ``list_node`` / ``list_event_for_all_namespaces`` with
``resource_version``, ``allow_watch_bookmarks`` and ``timeout_seconds``) returns the changes
after ``since`` that arrive before the server ends it, then one BOOKMARK at the newest version
seen (the server's own bookmarks only move that version). The caller (an async trigger) loops
and runs each call in a thread.

A version the server no longer keeps is ``WatchExpired``: a list or watch answered 410 Gone, or
a watch whose stream carries an ``ERROR`` event with code 410 (the official client raises that
as an ``ApiException`` when ``timeout_seconds`` is set, never retrying it itself). The caller
lists again. Events are the ones whose ``involvedObject.kind`` is Node (a field selector the
server applies; re-checked here).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpufleet.backends.base import NodeInfo, WatchEvent
from gpufleet.backends.kube.errors import api_error, connection_error
from gpufleet.backends.kube.node_objects import node_event
from gpufleet.backends.kube.nodes import KubeNodes
from gpufleet.domain.events import Change, NodeEvent
from gpufleet.errors import BackendError

NODE_EVENTS = "involvedObject.kind=Node"
# how long past the server-side ``timeout_seconds`` the client waits for the stream to end
_READ_GRACE_S = 30.0


class KubeWatch(KubeNodes):
    """Versioned lists and bounded watches of nodes and node Events (a base of
    ``KubeClusterBackend``)."""

    def list_nodes_versioned(self) -> tuple[list[NodeInfo], str]:
        items, version = self._versioned_list("list nodes", self.core.list_node)
        nodes = sorted((self._node_info(i) for i in items), key=lambda n: n.name)
        return nodes, version

    def watch_nodes(self, since: str, timeout_s: float) -> list[WatchEvent]:
        def read(change: Change, raw: dict[str, Any], version: str) -> WatchEvent:
            return WatchEvent(change, version, node=self._node_info(raw))

        return self._watch("watch nodes", self.core.list_node, since, timeout_s, read)

    def list_node_events(self, since: str | None) -> tuple[list[NodeEvent], str]:
        kwargs: dict[str, Any] = {"field_selector": NODE_EVENTS}
        if since is not None:
            # "at least as new as since"; a version the server no longer has answers 410
            kwargs.update(resource_version=since, resource_version_match="NotOlderThan")
        items, version = self._versioned_list(
            "list node events", self.core.list_event_for_all_namespaces, **kwargs
        )
        if since is not None and since.isdigit():
            # etcd's versions are integers: keep the Events changed after ``since``
            items = [i for i in items if _after(i, int(since))]
        events = [e for e in (node_event(i) for i in items) if e is not None]
        return events, version

    def watch_node_events(self, since: str, timeout_s: float) -> list[WatchEvent]:
        def read(change: Change, raw: dict[str, Any], version: str) -> WatchEvent | None:
            event = node_event(raw)
            return None if event is None else WatchEvent(change, version, event=event)

        return self._watch(
            "watch node events",
            self.core.list_event_for_all_namespaces,
            since,
            timeout_s,
            read,
            field_selector=NODE_EVENTS,
        )

    # ---- plumbing --------------------------------------------------------------------------

    def _versioned_list(
        self, what: str, fn: Callable[..., Any], **kwargs: Any
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item (following ``continue`` tokens) and the version of the first page, which
        every later page of the same list shares."""
        items: list[dict[str, Any]] = []
        version: str | None = None
        page_kwargs = dict(kwargs)
        while True:
            page = self._json(what, fn, **page_kwargs) or {}
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            if version is None:
                version = str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                break
            page_kwargs = {k: v for k, v in kwargs.items() if not k.startswith("resource_version")}
            page_kwargs["_continue"] = token
        if not version:
            raise BackendError(
                f"{what}: the API server of {self.source} answered a list without "
                "metadata.resourceVersion; a watch cannot start from it"
            )
        return items, version

    def _watch(
        self,
        what: str,
        fn: Callable[..., Any],
        since: str,
        timeout_s: float,
        read: Callable[[Change, dict[str, Any], str], WatchEvent | None],
        **kwargs: Any,
    ) -> list[WatchEvent]:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        # return_type "object": events come back as the dicts the server sent (no models)
        stream = watch.Watch(return_type="object")
        out: list[WatchEvent] = []
        newest = since
        try:
            for event in stream.stream(
                fn,
                resource_version=since,
                allow_watch_bookmarks=True,
                timeout_seconds=max(1, math.ceil(timeout_s)),
                _request_timeout=max(timeout_s, 1.0) + _READ_GRACE_S,
                **kwargs,
            ):
                raw = event.get("raw_object") or {}
                version = str((raw.get("metadata") or {}).get("resourceVersion") or newest)
                newest = version
                kind = event.get("type")
                if kind == Change.BOOKMARK:
                    continue
                try:
                    change = Change(kind)
                except ValueError:
                    continue  # a type this client does not know: its version still counts
                seen = read(change, raw, version)
                if seen is not None:
                    out.append(seen)
        except ApiException as exc:  # 410 (an ERROR event's code too): KubeGone, WatchExpired
            raise api_error(what, exc, self.source) from exc
        except (Urllib3Error, OSError) as exc:
            raise connection_error(what, exc, self.source) from exc
        finally:
            stream.stop()
        out.append(WatchEvent(Change.BOOKMARK, newest))
        return out


def _after(item: dict[str, Any], since: int) -> bool:
    version = str((item.get("metadata") or {}).get("resourceVersion") or "")
    return not version.isdigit() or int(version) > since
