"""Assets that announce facts other DAGs react to."""

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
