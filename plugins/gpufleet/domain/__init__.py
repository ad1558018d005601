"""Pure policy and the types it works on: the fleet catalog's types, the gate, verdicts and
the kinds of validation, pairing, plumbing rules, baselines, workload labels, the fault
vocabulary, GPU health (NVIDIA's Xid catalog, one action per node from its own signals),
topology scopes and Kueue's rules (``kueue``: the Topology a pool's flavor names, what a job
asks for, what Kueue will not let change), the alarms of NCCL's communicator init
(``nccl_init``).

No I/O (no files, no network, no environment), no clients, no Airflow: functions over values,
testable with nothing else. May import ``gpufleet.errors`` and pydantic; nothing else of ours
outside ``gpufleet.domain``.
"""
