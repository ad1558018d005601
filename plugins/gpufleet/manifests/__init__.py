"""The Kubernetes objects gpufleet renders, by workload, from the templates in
``include/manifests``: nccl-tests validation pairs, storage validation, training JobSets and
the add-on objects onboarding applies.

Renders dicts; talks to no cluster. May import ``gpufleet.config`` (template folder) and
``gpufleet.domain`` (catalog types, plumbing rules, labels).
"""
