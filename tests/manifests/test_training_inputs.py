"""The training JobSet renderer refuses what the launch request refuses (issue 31, item 6): its
env names match the whole string (``"NCCL_NET\\n"`` beside the real NCCL_NET was rendered and
submitted), the image is an OCI reference, env and command are bounded, and the priority class
is never the cluster's own. One definition (``gpufleet.domain.launch_inputs``): the renderer is
the last check before a JobSet is applied."""

from __future__ import annotations

import pytest

from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.launch_inputs import MAX_COMMAND_ARGS, MAX_ENV_VALUE
from gpufleet.domain.workloads import workload_pod_templates
from gpufleet.manifests.training import render_training_job
from tests.manifests.manifest_helpers import env_of, training_spec


def _refused(ref: PoolRef, says: str, **fields) -> str:
    with pytest.raises(ValueError) as err:
        render_training_job(ref, training_spec(**fields))
    assert says in str(err.value), str(err.value)
    return str(err.value)


@pytest.mark.parametrize("name", ["NCCL_NET\n", "MASTER_ADDR\n", "NCCL_DEBUG\r\n", "HF_HOME\n"])
def test_an_env_name_ending_in_a_newline_is_not_rendered(ref: PoolRef, name: str) -> None:
    message = _refused(ref, "is not an environment variable name", env={name: "Socket"})
    assert repr(name) in message


def test_the_user_env_reaches_the_pod_exactly(ref: PoolRef) -> None:
    env = {"HF_HOME": "/mnt/cache", "my.var-1": "x" * MAX_ENV_VALUE}
    obj = render_training_job(ref, training_spec(env=env))
    ((_, _, template),) = workload_pod_templates(obj)
    rendered = env_of(template["spec"]["containers"][0])
    assert {k: rendered[k]["value"] for k in env} == env


@pytest.mark.parametrize(
    "image",
    [
        "example/tra\u200bin:1",  # zero-width space
        "example/train:\u202e1v",  # right-to-left override
        "example/tr\u0430in:1",  # Cyrillic a
        "example/train\x00:1",
        "example/train:1\n",
        "example/Train:1",  # an upper-case path ("Example/train" would be a registry host)
    ],
)
def test_an_image_that_is_not_an_oci_reference_is_not_rendered(ref: PoolRef, image: str) -> None:
    _refused(ref, "is not an OCI image reference", image=image)


def test_env_and_command_are_bounded(ref: PoolRef) -> None:
    _refused(ref, "at most 32768", env={"BIG": "x" * 1_000_000})
    _refused(ref, "at most 64", command=["x"] * (MAX_COMMAND_ARGS + 1))
    _refused(ref, "at most 4096 bytes", command=["torchrun", "y" * 5000])


@pytest.mark.parametrize("name", ["system-node-critical", "system-cluster-critical"])
def test_the_clusters_own_priority_class_is_not_rendered(ref: PoolRef, name: str) -> None:
    _refused(ref, "the cluster's own", priority_class=name)


def test_a_priority_class_ending_in_a_newline_is_not_rendered(ref: PoolRef) -> None:
    _refused(ref, "is not a PriorityClass name", priority_class="training-high\n")
