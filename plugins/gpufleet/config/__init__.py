"""Loaders of ``include/`` data into the domain's types: the fleet catalog (and the small name
index DAG files read at parse time), the NCCL baselines, and where files and state live.

Reads files and the environment; holds no policy. May import ``gpufleet.domain`` only (and
``gpufleet.errors``).
"""
