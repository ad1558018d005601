"""The EKS cloud backend (``provider: eks``), on boto3: ``EksCloudBackend`` in ``backend.py``.

``clients.py`` (session, clients, error mapping, console links), ``network.py`` (VPC,
subnets, EFA security group), ``cluster.py`` (control plane, access entry, token),
``nodegroups.py`` (EFA launch template, managed node group), ``fsx.py`` (FSx for Lustre),
``repair.py`` (a node's instance terminated for its node group to replace), ``reboot.py`` (a
node's instance rebooted), ``topology.py`` (EC2 instance and capacity reservation topology:
hosts per network node; EC2 has no call to report a faulty rack).
"""

from __future__ import annotations

from gpufleet.backends.eks.backend import EksCloudBackend

__all__ = ["EksCloudBackend"]
