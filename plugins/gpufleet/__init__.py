"""gpufleet: Airflow 3 operators, backends and domain logic for multi-node GPU infrastructure.

The folders are the layers (docs/architecture.md); imports point down only, and the
import-linter contracts in ``pyproject.toml`` (run by ``make lint``) keep it so:

    airflow, cli            the Airflow layer; the ``gpufleet`` command (independent)
    services                one capability each, no Airflow
    backends, manifests, store   clouds and clusters; Kubernetes objects; the ledger (independent)
    config                  loaders of include/ data
    domain, parsing         pure policy and types; parsers of text and JSON (no I/O, no clients)

``gpufleet.errors`` (the error types a person reads) may be imported from every layer.
"""

__version__ = "0.1.0"
