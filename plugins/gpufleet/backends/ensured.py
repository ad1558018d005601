"""What one ``ensure_*`` call of a backend found or did (``Ensured``): the result type of every
idempotent create, shared by the backend protocols (``base.CloudBackend``, whose
``ProviderTopology`` part, ``topology_api``, returns it too). Its ``action`` and ``status``
values are ``base``'s constants (``FOUND``/``CREATED``/``WOULD_CREATE``, ``READY``/``CREATING``
...); ``base`` re-exports the class, so ``from gpufleet.backends.base import Ensured`` works.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Ensured:
    """What one ``ensure_*`` call found or did to one cloud resource.

    ``differences`` are sentences naming a field whose existing value differs from the catalog
    (``"machine type: catalog a3-ultragpu-8g, cloud a3-highgpu-8g"``): an ensure reports them
    and changes nothing. ``status`` is the resource's normalised status after the call: an
    operation that is still running leaves it ``CREATING`` (wait with ``get_*``).
    ``console_url`` links the resource in the provider's console.
    """

    kind: str  # network, subnet, firewall, cluster, node_pool, launch_template, filesystem, ...
    name: str
    action: str  # found | created | would_create
    status: str
    differences: tuple[str, ...] = ()
    console_url: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "differences": list(self.differences)}
