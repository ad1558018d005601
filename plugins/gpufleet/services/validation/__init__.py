"""Validation: the fabric and storage checks, the nightly scope, drift, run-scoped faults and
the release of new nodes, and GPU health (the nightly's own check, and busy nodes read
passively from their dcgm-exporter: ``passive``) (see ``gpufleet.services``)."""
