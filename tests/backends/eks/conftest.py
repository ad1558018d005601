"""Fixtures for the EKS backend's contract tests: one AWS fake (moto server + front) per test
module, reset before each test."""

from __future__ import annotations

import pytest

from tests.support.aws_fake import AwsFake


@pytest.fixture(scope="module")
def aws_server():
    with AwsFake() as fake:
        yield fake


@pytest.fixture
def aws(aws_server: AwsFake, monkeypatch) -> AwsFake:
    """The fake, emptied, with boto3 pointed at it through AWS_ENDPOINT_URL."""
    aws_server.reset()
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in aws_server.environ().items():
        monkeypatch.setenv(key, value)
    return aws_server
