"""Services: the product's use cases, orchestrating backends, manifests, the ledger and the
domain, in context packages (the ``service-contexts`` contract in pyproject.toml). No Airflow
imports. May import ``backends``, ``manifests``, ``store``, ``config``, ``domain``, ``parsing``.

Design (what each context holds, which may use which): docs/design/workflows.md.
"""
