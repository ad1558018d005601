"""Views: read models and reports over the ledger, rendered through the one set of autoescaped
templates (see ``gpufleet.services``)."""
