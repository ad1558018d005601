"""A GKE-only transition rule: a node pool delete GKE reports as failed (the operation ends DONE
carrying an error, the pool left in place) is reported, the pool is not recorded retired, and a
rerun deletes it again. moto deletes a node group at once and never fails, so EKS has no such
scenario here; the shared transition scenarios are in ``test_transition_clouds.py``."""

from __future__ import annotations

import pytest

from gpufleet.domain.transition import Step
from gpufleet.errors import BackendError
from tests.scenarios.test_transition_clouds import drive, forward_to, retired, service

pytestmark = [pytest.mark.slow]


def test_gke_a_failed_delete_is_reported_not_retired_and_a_rerun_deletes_again(gke_transition):
    cloud = gke_transition
    old = cloud.old
    forward_to(service(cloud, "run-1"), Step.OLD_POOL_DRAINED)
    cloud.fake.slow_node_pool_delete(
        old, polls=2, error="Internal error: instance group not deleted"
    )
    svc = service(cloud, "run-1")

    with pytest.raises(BackendError, match="instance group not deleted") as err:
        for _ in range(10):
            svc.advance(Step.OLD_POOL_RETIRED)
    assert "not retired" in str(err.value) and "run again" in str(err.value)
    assert not retired(cloud, old)
    assert cloud.holds_pool(old)  # the pool is still there
    assert Step.OLD_POOL_RETIRED not in svc.steps()[0]

    drive(service(cloud, "run-2"), Step.OLD_POOL_RETIRED)  # the rerun deletes again, and waits
    assert cloud.deleted_pools() == [old] * 2
    assert retired(cloud, old) and not cloud.holds_pool(old)
