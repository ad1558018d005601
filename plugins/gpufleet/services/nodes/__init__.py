"""Nodes: the node lifecycle (the only writer of node state), the one drain, repair (see
``gpufleet.services``)."""
