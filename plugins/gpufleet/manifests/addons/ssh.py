"""The ssh key Secret the nccl-tests pairs use between their two pods (built in code: it holds a
freshly generated private key, so it is applied create-if-absent, never re-rendered in place)."""

from __future__ import annotations

from typing import Any

from gpufleet.manifests.labels import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NCCL_SSH_SECRET,
    VALIDATION_NAMESPACE,
    check_namespace,
)


def render_ssh_secret(
    namespace: str = VALIDATION_NAMESPACE, *, name: str = NCCL_SSH_SECRET
) -> dict[str, Any]:
    """A ``kubernetes.io/ssh-auth`` Secret with a fresh ed25519 key for the nccl-tests pairs.

    The two pods of a pair mount it: each authorises the key's public half and the launcher
    uses it to start ranks on its peer (mpirun over ssh). Apply it once per validation
    namespace with create-if-absent semantics (a new key each call; an existing Secret is
    kept). It holds a private key: apply it directly, never pass it through XCom or logs.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    check_namespace(namespace)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        },
        "type": "kubernetes.io/ssh-auth",
        "stringData": {"ssh-privatekey": private},
    }
