"""The Kubernetes objects gpufleet renders, one module per workload: ``labels`` (label and
annotation keys, names, namespaces), ``nccl_validation`` (nccl-tests pairs),
``storage_validation`` (fio on Lustre), ``training`` (training JobSets) and ``addons`` (every
cluster add-on region onboarding applies, in apply order), over ``templates`` (the Jinja2
environment that reads the templates in ``include/manifests``).

Renders dicts; talks to no cluster. May import ``gpufleet.config`` (the include folder) and
``gpufleet.domain`` (catalog types, plumbing rules, the label keys the backends read too).
"""
