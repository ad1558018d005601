"""The simulated fleet (``provider: sim``): a fabric model behind the two backend protocols.

It judges the manifests it is given as a real cluster would and writes what the real programs
print, so the same parsers and verdicts run on it. One module per concept:

- ``cluster`` (``SimClusterBackend``, over ``nodes`` for its nodes) and ``cloud``
  (``SimCloudBackend``, over ``machines`` for a node's repair and reboot), over ``base`` (the
  catalog cluster, state and injected API errors they share);
- ``state``: the SQLite file every Airflow task process shares (nodes, faults, objects, pods);
- ``sim_clock``: the sim's time (``SimClock``, a ``gpufleet.domain.clock.Clock`` kept in the
  state file): what pods, creates, repairs and fault leases run on; tests freeze and advance it;
- ``placement``: where pods go (selectors, affinity, taints, one GPU pod per node) and Kueue
  gang admission;
- ``programs``: what nccl-tests, fio and a training job do in the pods placed;
- ``clock``: the modelled clock, how long each pod's program would run on a real cluster (the
  containers' start/finish times, what validation costs in GPU-minutes);
- ``nccl``: what NCCL would do with a pod as rendered (network choice, ``NCCL_NET``,
  ``NCCL_DEBUG``), from ``gpufleet.domain.plumbing.inspect_pod``;
- ``performance``: healthy figures per machine shape and Lustre tier, from ``include/sim``
  (never from the baselines the verdicts use);
- ``faults`` (the effect of the faults in force on a pool) and ``injection`` (the sim's side
  of ``gpufleet.backends.faults``);
- ``output``: nccl-tests text, NCCL INFO lines and fio JSON in the real formats;
- ``gpu_health``: what each node's GPU health tools print (kernel-log Xid lines, ``nvidia-smi``
  row remapping, ECC and NVLink counters, ``dcgmi diag -j``) with the GPU faults in force;
- ``dcgm_exporter``: what each node's dcgm-exporter serves on ``/metrics``, from the same GPU
  faults (``SimGpuMetrics``, a base of ``SimClusterBackend``).
"""
