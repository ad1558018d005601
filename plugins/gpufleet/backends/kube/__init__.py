"""The Kubernetes cluster backend: the official client through the cncf provider's
``KubernetesHook``, for clusters whose catalog provider is ``gke`` or ``eks``.

``cluster.KubeClusterBackend`` is assembled from one module per concept: ``client`` (connection
- an Airflow connection or a kube config dict from the cloud backend - and call plumbing),
``errors`` (the one place an HTTP status is classified), ``kinds`` (where each kind lives in the
API), ``objects`` (apply, ensure_object, delete), ``converge`` (the pure compare of
read-compare-patch), ``nodes``, ``node_objects`` (Node and Event objects read into
``NodeInfo``/``NodeEvent``), ``watch`` (versioned lists and bounded watches of nodes and node
Events; 410 Gone is ``WatchExpired``), ``pods``, ``workloads``, ``gpu_metrics`` (dcgm-exporter's
metrics of a node, through the pod proxy). Imports ``backends.base``/``retry``,
the domain's label vocabulary, the official client and the provider's hook; nothing above
the backends.
"""
