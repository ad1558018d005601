"""Assets that announce facts other DAGs react to, and the watched assets the event path is
scheduled on (docs/events.md)."""

from __future__ import annotations

from airflow.sdk import Asset

# A region finished onboarding: its nightly validation runs at once.
REGION_READY = Asset("x-gpufleet://fleet/region-ready", group="gpufleet")
# A node pool passed fabric validation (extra: cluster, pool, transport, busbw_gbps).
POOL_VALIDATED = Asset("x-gpufleet://fleet/pool-validated", group="gpufleet")
# A training job was launched and its transport confirmed (extra: job, pool, transport).
JOB_CONFIRMED = Asset("x-gpufleet://fleet/job-transport-confirmed", group="gpufleet")
# A node pool was retired by a reservation transition (extra: cluster, pool, replaced_by).
POOL_RETIRED = Asset("x-gpufleet://fleet/pool-retired", group="gpufleet")


# A cluster's node changes and node events, watched by the triggerer (``NodeWatchTrigger``): each
# asset event's extra is {"from_trigger": true, "payload": <a node event batch>}.
NODE_SIGNALS_URI = "x-gpufleet://node-signals/{cluster}"


class WatchedAsset(Asset):
    """An ``Asset`` hashed by its name, uri and group. Airflow hashes an asset by dumping every
    field to JSON, and the DAG's whole schedule several times per parse: with one watched asset
    per cluster that was the largest part of ``node_health_response``'s parse time
    (bench/parse_time.py). Equal assets have the same name, uri and group, so this hash agrees
    with ``Asset``'s equality."""

    def __hash__(self) -> int:
        return hash((self.name, self.uri, self.group))


def node_signals(cluster: str) -> Asset:
    """Cluster ``cluster``'s ``node-signals`` asset, with the watcher that feeds it. Built at
    parse time (creating the trigger object reads and opens nothing)."""
    from airflow.sdk import AssetWatcher

    from gpufleet.airflow.event_triggers import NodeWatchTrigger

    return WatchedAsset(
        name=f"node-signals-{cluster}",
        uri=NODE_SIGNALS_URI.format(cluster=cluster),
        group="gpufleet",
        watchers=[AssetWatcher(name=f"node-watch-{cluster}", trigger=NodeWatchTrigger(cluster))],
    )


def node_signal_assets(clusters: list[str]) -> list[Asset]:
    """One watched ``node-signals`` asset per cluster (the catalog's parse-time index)."""
    return [node_signals(cluster) for cluster in clusters]
