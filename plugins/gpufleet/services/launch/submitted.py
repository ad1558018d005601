"""The job a launch's ``submit`` step hands to its ``confirm`` step (``SubmittedJob``; its
``to_dict`` is the XCom between the two tasks). Its own module, so that ``submit`` (which makes
it) and ``confirm`` (which reads it) each import it and not each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class SubmittedJob:
    """A submitted training job, as submit hands it to confirm (``to_dict`` is the XCom)."""

    launch_id: int
    cluster: str
    pool: str
    kind: str
    name: str
    namespace: str
    expected_transport: str
    gdrdma: bool
    policy: str
    nodes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubmittedJob:
        return cls(**{f.name: data[f.name] for f in fields(cls)})
