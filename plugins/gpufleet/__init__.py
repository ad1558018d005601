"""gpufleet: Airflow 3 operators, backends and domain logic for multi-node GPU infrastructure.

Layering (see docs/DESIGN.md): ``dags/`` wire, ``gpufleet.operators`` adapt, ``gpufleet.backends``
talk to clouds and clusters, and the domain modules (catalog, parsing, verdicts, pairing, gate)
decide. Domain modules never import Airflow.
"""

__version__ = "0.1.0"
