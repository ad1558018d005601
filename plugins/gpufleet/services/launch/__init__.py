"""Launch: the request, the fail-closed gate, the submit and the transport confirmation (see
``gpufleet.services``)."""
