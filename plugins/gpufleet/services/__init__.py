"""Services: one capability each (fabric validation, storage validation, the gate, the launch,
the nightly scope and report), orchestrating backends, manifests, the ledger and the domain.

No Airflow imports: operators adapt these (templating, deferral, XCom), and the CLI and tests
call them directly. May import ``backends``, ``manifests``, ``store``, ``config``, ``domain``,
``parsing``.
"""
