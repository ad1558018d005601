"""Infrastructure: region onboarding, reservation transitions and their ledger locks, cluster
add-ons, retiring a pool (see ``gpufleet.services``)."""
