"""The Kubernetes cluster backend: the official client through the cncf provider's
``KubernetesHook``, for clusters whose catalog provider is ``gke`` or ``eks``."""
