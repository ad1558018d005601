"""Services: the product's use cases, orchestrating backends, manifests, the ledger and the
domain, in five context packages (the ``service-contexts`` contract in pyproject.toml):

- ``validation``: the fabric and storage checks, the nightly's scope, drift, a run's simulated
  faults, the release of new nodes once their pool passed;
- ``launch``: the request, the gate, the submit and the transport confirmation;
- ``infrastructure``: region onboarding, reservation transitions (with their ledger locks),
  cluster add-ons, retiring a pool;
- ``nodes``: the node lifecycle (the only writer of node state), the one drain, repair;
- ``views``: what the UI, /metrics, the CLI and the reports show (readiness, pool history, the
  nightly and onboarding reports), rendered through the one set of autoescaped templates;
- ``common``: what several contexts read from a workload (pods, NCCL logs, GPU-seconds).

``views`` may use every context; ``validation``, ``launch`` and ``infrastructure`` are
independent of each other; each may use ``nodes`` and ``common``, never the reverse. No Airflow
imports: operators adapt these (templating, deferral, XCom), and the CLI and tests call them
directly. May import ``backends``, ``manifests``, ``store``, ``config``, ``domain``, ``parsing``.
"""
