"""The GKE cloud backend (``provider: gke``): google-cloud-container, -compute and -lustre over
their REST transports, credentials from the google provider's connection.

``backend.py`` (``GkeCloudBackend``, the ``CloudBackend`` protocol), ``clients.py`` (endpoint,
credentials, clients, error translation, compute operation waits), ``network.py`` (RDMA and
gVNIC VPCs and subnets), ``cluster.py`` (the cluster and its credentials), ``pools.py``
(reservations and GPU node pools), ``lustre.py`` (Managed Lustre), ``repair.py`` (a faulty
node's host reported through ``instances.reportHostAsFaulty``), ``reboot.py`` (a node's VM
reset through ``instances.reset``), ``subblocks.py`` (the reservation's blocks and
sub-blocks, their health, and a faulty sub-block reported through
``reservationSubBlocks.reportFaulty``). Google libraries and the provider hook are imported
lazily, so importing this package stays cheap.
"""

from __future__ import annotations

from gpufleet.backends.gke.backend import GkeCloudBackend

__all__ = ["GkeCloudBackend"]
