"""The Kubernetes cluster backend: the official client through the cncf provider's
``KubernetesHook``, for clusters whose catalog provider is ``gke`` or ``eks``.

``cluster.KubeClusterBackend`` is assembled from one module per concept: ``client`` (connection
and call plumbing), ``errors`` (the one place an HTTP status is classified), ``kinds``,
``objects``, ``nodes``, ``pods``, ``workloads``. Imports ``backends.base``/``retry``, the domain's
label vocabulary, the official client and the provider's hook; nothing above the backends.
"""
