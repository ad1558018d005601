"""What several contexts read from a workload: pods in rank order, NCCL logs, GPU-seconds (see
``gpufleet.services``)."""
