"""Nodes: the node lifecycle (the only writer of node state), the one drain, repair, and what
may hold an action back (``safety``: the remediation ladder, breakers, profiles; see
``gpufleet.services``)."""
