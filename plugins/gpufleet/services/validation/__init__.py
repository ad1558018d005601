"""Validation: the fabric and storage checks, the nightly scope, drift, run-scoped faults and
the release of new nodes (see ``gpufleet.services``)."""
