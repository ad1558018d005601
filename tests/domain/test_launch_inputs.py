"""What a training launch may carry (issue 31, item 6): every name check matches the whole
string, the image is an OCI reference, env and command are bounded, platform-owned env names and
priority classes the catalog does not allow are refused before the gate decides, and a refused
request changes nothing (no ledger opened, nothing submitted).

Through the real types: ``domain.launch_inputs``, the launch request, ``TrainingLaunch.gate``
and the catalog; the DAG end to end is tests/test_launch_dag.py."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import time

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.launch_inputs import (
    MAX_COMMAND_ARG,
    MAX_COMMAND_ARGS,
    MAX_ENV_TOTAL,
    MAX_ENV_VALUE,
    RENDEZVOUS_ENV,
    command_problems,
    env_problems,
    image_problem,
)
from gpufleet.domain.names import ENV_NAME, IMAGE_REF
from gpufleet.domain.plumbing import pod_plumbing
from gpufleet.services.launch.request import REQUEST_FIELDS, InvalidLaunchRequest, request_problems
from tests.test_bad_inputs import LAUNCH_CONF

DIGEST = "sha256:" + "f" * 64


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def conf(**changes) -> dict:
    return {**copy.deepcopy(LAUNCH_CONF), **changes}


# --- the image: distribution/reference's grammar -----------------------------------------------

# distribution/reference's own cases (reference_test.go at 0965666a, TestReferenceParse), each
# with the answer Parse gives: valid or not
DISTRIBUTION_VALID = [
    "test_com",
    "test.com:tag",
    "test.com:5000",
    "test.com/repo:tag",
    "test:5000/repo",
    "test:5000/repo:tag",
    f"test:5000/repo@{DIGEST}",
    f"test:5000/repo:tag@{DIGEST}",
    "lowercase:Uppercase",
    "a/" * 127 + "a:tag-puts-this-over-max",
    "sub-dom1.foo.com/bar/baz/quux:some-long-tag",
    "b.gcr.io/test.example.com/my-app:test.example.com",
    "xn--n3h.com/myimage:xn--n3h.com",
    f"xn--7o8h.com/myimage:xn--7o8h.com@{DIGEST}",
    "foo_bar.com:8080",
    "foo/foo_bar.com:8080",
    "192.168.1.1",
    "192.168.1.1:5000/repo:5050",
    "[2001:db8::1]/repo",
    "[2001:db8:1:2:3:4:5:6]/repo:tag",
    f"[2001:db8::1]:5000/repo:tag@{DIGEST}",
    "[::1]:5000/repo",
    "example.com/" + "a" * 255 + ":tag",
]
DISTRIBUTION_INVALID = [
    "",
    ":justtag",
    f"@{DIGEST}",
    "repo@sha256:" + "f" * 34,
    "validname@invaliddigest:" + "f" * 64,
    "validname@sha512:" + "f" * 128,
    "Uppercase:tag",
    "test:5000/Uppercase/lowercase:tag",
    "domain/" + "a" * 256 + ":tag",
    "aa/asdf$$^/aa",
    "[2001:db8::1]",
    "[2001:db8::1]:5000",
    "[2001:db8::1]:tag",
    "[fe80::1%eth0]:5000/repo",
    "[fe80::1%@invalidzone]:5000/repo",
]
# what a hostile or careless user types: each must be refused, and say which character it holds
HOSTILE_IMAGES = {
    "zero-width space": "example/tra\u200bin:1",
    "zero-width joiner": "example/train\u200d:1",
    "NUL": "example/train\x00:1",
    "right-to-left override": "example/train:\u202e1v",
    "Cyrillic a": "example/tr\u0430in:1",
    "fullwidth digit": "example/train:\uff11",
    "trailing newline": "example/train:1\n",
    "trailing CRLF": "example/train:1\r\n",
    "tab": "example/train\t:1",
}


@pytest.mark.parametrize("image", DISTRIBUTION_VALID)
def test_distributions_valid_references_are_images(image):
    assert image_problem(image) is None
    assert re.search(IMAGE_REF.pattern, image)  # the form's schema agrees


@pytest.mark.parametrize("image", DISTRIBUTION_INVALID)
def test_distributions_invalid_references_are_refused(image):
    assert image_problem(image)


@pytest.mark.parametrize("what", sorted(HOSTILE_IMAGES))
def test_a_hostile_image_is_refused_naming_the_character(what, catalog):
    image = HOSTILE_IMAGES[what]
    assert re.search(IMAGE_REF.pattern, image) is None  # the schema refuses it
    problem = image_problem(image)
    assert problem and "is not an OCI image reference" in problem
    assert "U+" in problem, problem  # which character, even one a reader cannot see
    (only,) = request_problems(conf(image=image), catalog)
    assert only.startswith("image ")


@pytest.mark.parametrize(
    "image",
    [
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "us-docker.pkg.dev/example/train:1.4",
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:v1",
        "localhost:5000/a/b__c---d:1",
        f"ghcr.io/org/img@{DIGEST}",
    ],
)
def test_real_registries_images_are_accepted(image, catalog):
    assert request_problems(conf(image=image), catalog) == []


def test_a_megabyte_image_is_refused_at_once_in_a_short_message(catalog):
    started = time.perf_counter()
    problems = request_problems(conf(image="a." * 500_000), catalog)
    assert time.perf_counter() - started < 1.0  # the length guard, not the grammar, refuses
    assert len(problems) == 1 and len(problems[0]) < 600 and "1000000 chars" in problems[0]


# --- every name matches the whole string ---------------------------------------------------------


@pytest.mark.parametrize("name", ["NCCL_NET\n", "MASTER_ADDR\n", "HF_HOME\r\n", "A\nB", "\nA"])
def test_an_env_name_with_a_newline_is_refused_by_the_schema_the_request_and_the_domain(
    name, catalog
):
    assert ENV_NAME.fullmatch(name.strip()) or "\nB" in name  # the name without it is one
    assert re.search(REQUEST_FIELDS["env"]["propertyNames"]["pattern"], name) is None
    (problem,) = env_problems({name: "x"})
    assert "is not an environment variable name" in problem
    problems = request_problems(conf(env={name: "Socket"}), catalog)
    assert any("is not an environment variable name" in p for p in problems), problems


def test_a_priority_class_with_a_trailing_newline_is_refused(catalog):
    problems = request_problems(conf(priority_class="training-high\n"), catalog)
    assert problems == [
        "priority_class 'training-high\\n' is not a PriorityClass name (a DNS-1123 subdomain)"
    ]


# --- bounds -----------------------------------------------------------------------------------


def test_env_values_are_bounded_at_32_kib_each_and_256_kib_in_all(catalog):
    assert env_problems({"A": "x" * MAX_ENV_VALUE}) == []
    (one,) = env_problems({"A": "x" * (MAX_ENV_VALUE + 1)})
    assert "32769 bytes; at most 32768" in one and "file" in one
    assert "at most 32768" in env_problems({"A": "\u00e9" * (MAX_ENV_VALUE // 2 + 1)})[0]  # UTF-8
    many = {f"V{i}": "x" * (MAX_ENV_VALUE - 8) for i in range(MAX_ENV_TOTAL // MAX_ENV_VALUE + 1)}
    (total,) = env_problems(many)
    assert "in all; at most 262144" in total
    problems = request_problems(conf(env={"BIG": "x" * 1_000_000}), catalog)
    assert problems and all(len(p) < 400 for p in problems), problems


def test_the_command_is_bounded_at_64_arguments_of_4_kib(catalog):
    assert command_problems(["x"] * MAX_COMMAND_ARGS) == []
    assert command_problems(["x" * MAX_COMMAND_ARG]) == []
    (args,) = command_problems(["x"] * (MAX_COMMAND_ARGS + 1))
    assert "65 arguments; at most 64" in args
    (arg,) = command_problems(["torchrun", "x" * (MAX_COMMAND_ARG + 1)])
    assert arg.startswith("command[1] is 4097 bytes")
    assert "NUL" in command_problems(["a\x00b"])[0]
    assert request_problems(conf(command=["y" * 1_000_000]), catalog)


def test_a_nul_in_an_env_value_is_refused():
    assert "NUL" in env_problems({"A": "x\x00y"})[0]


# --- platform-owned env names: refused by the request, naming what to do -------------------------


@pytest.mark.parametrize(
    "cluster,pool", [("a3u-sim", "h200-a"), ("p5-sim", "h100-a")], ids=["gke-gib", "eks-efa"]
)
def test_every_name_the_platform_sets_on_the_pool_is_refused_by_the_request(catalog, cluster, pool):
    ref = catalog.pool(cluster, pool)
    owned = sorted(pod_plumbing(ref.cluster, ref.pool, pin_network=True).env) + sorted(
        RENDEZVOUS_ENV
    )
    assert "NCCL_NET" in owned
    for name in owned:
        problems = request_problems(
            conf(cluster=cluster, pools=[pool], env={name: "mine"}), catalog
        )
        assert len(problems) == 1 and name in problems[0], (name, problems)
        assert "remove it from env" in problems[0]


def test_a_name_only_one_target_pool_sets_is_refused_for_the_request(catalog):
    """The gate may choose any target pool: a name any of them sets is refused."""
    problems = request_problems(conf(pools=["h200-a", "h200-b"], env={"NCCL_IB_TC": "3"}), catalog)
    assert problems and "NCCL_IB_TC is platform-owned" in problems[0]


# --- priority classes: only what the catalog allows in the namespace ----------------------------


def test_an_allowed_priority_class_passes(catalog):
    assert catalog.cluster("a3u-sim").priority_classes["ml-team"] == (
        "training-high",
        "training-low",
    )
    assert request_problems(conf(priority_class="training-low"), catalog) == []
    assert request_problems(conf(priority_class=None), catalog) == []


def test_a_priority_class_the_namespace_does_not_allow_is_refused_naming_the_allowed(catalog):
    (problem,) = request_problems(conf(priority_class="training-urgent"), catalog)
    assert "'training-urgent' is not allowed" in problem
    assert "allows: training-high, training-low" in problem
    # ml-ci allows only training-low
    (problem,) = request_problems(conf(namespace="ml-ci", priority_class="training-high"), catalog)
    assert "allows: training-low" in problem


def test_a_namespace_without_an_allow_list_allows_no_priority_class(catalog):
    (problem,) = request_problems(
        conf(namespace="ml-demo", priority_class="training-high"), catalog
    )
    assert "allows no priority class" in problem and "leave priority_class empty" in problem


@pytest.mark.parametrize("name", ["system-node-critical", "system-cluster-critical"])
def test_the_clusters_own_priority_classes_are_never_allowed(catalog, name):
    assert re.search(REQUEST_FIELDS["priority_class"]["pattern"], name) is None  # the form
    (problem,) = request_problems(conf(priority_class=name), catalog)
    assert "the cluster's own" in problem and "allows: training-high, training-low" in problem


@pytest.mark.parametrize(
    "classes,says",
    [
        ({"ml-team": ["system-node-critical"]}, "may never take it"),
        ({"ml-team": ["system-cluster-critical"]}, "may never take it"),
        ({"ml-team": ["training-high\n"]}, "not a PriorityClass name"),
        ({"ml-nobody": ["training-high"]}, "not one of the cluster's training namespaces"),
    ],
)
def test_the_catalog_refuses_an_allow_list_that_is_not_one(catalog, classes, says):
    from pydantic import ValidationError

    from gpufleet.domain.fleet import Cluster

    data = catalog.cluster("a3u-sim").model_dump()
    data["priority_classes"] = classes
    with pytest.raises(ValidationError, match=says):
        Cluster.model_validate(data)


# --- a refused request changes nothing -----------------------------------------------------------

REFUSED = {
    "env name with a newline": {"env": {"NCCL_NET\n": "Socket"}},
    "platform-owned env": {"env": {"NCCL_NET": "Socket"}},
    "the pool's NCCL tuning": {"env": {"NCCL_IB_QPS_PER_CONNECTION": "8"}},
    "rendezvous env": {"env": {"MASTER_ADDR": "10.0.0.1"}},
    "system priority class": {"priority_class": "system-node-critical"},
    "priority class not allowed": {"priority_class": "training-urgent"},
    "zero-width image": {"image": "example/tra\u200bin:1"},
    "megabyte env value": {"env": {"BIG": "x" * 1_000_000}},
    "megabyte command": {"command": ["torchrun", "x" * 1_000_000]},
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_a_bad_request_is_refused_before_the_gate_with_nothing_recorded_or_submitted(what, catalog):
    from gpufleet.services.launch.submit import TrainingLaunch

    opened: list[str] = []

    def ledger_factory():  # the gate's decision would be recorded here
        opened.append("ledger")
        raise AssertionError("a bad request opened the ledger")

    class NoCluster:  # nothing may be listed or applied either
        def __getattr__(self, name):
            opened.append(name)
            raise AssertionError(f"a bad request reached the cluster ({name})")

    launch = TrainingLaunch(catalog, ledger_factory, backend=NoCluster())
    with pytest.raises(InvalidLaunchRequest) as err:
        launch.gate(conf(**REFUSED[what]), run_id="manual__bad")
    assert opened == []
    assert err.value.problems and len(str(err.value)) < 1200


def test_the_refusal_docs_ci_trigger_shows_is_the_one_given(catalog):
    from pathlib import Path

    from gpufleet.services.launch.request import LaunchRequest

    text = (Path(__file__).parents[2] / "docs" / "ci-trigger.md").read_text()
    shown_there = text.split("`tests/domain/test_launch_inputs.py` checks it:\n\n```\n", 1)[1]
    shown_there = " ".join(shown_there.split("\n```", 1)[0].split())
    with pytest.raises(InvalidLaunchRequest) as err:
        LaunchRequest.from_params(
            conf(namespace="ml-demo", priority_class="training-high"), catalog
        )
    assert str(err.value) == shown_there


@pytest.mark.skipif(not shutil.which("node"), reason="needs node for ECMA-262 regexps")
def test_the_form_reads_every_launch_pattern_as_python_does():
    """The UI form checks the same Params with JavaScript's RegExp (no flags): every image,
    env name and priority class above means the same there."""
    env_name = REQUEST_FIELDS["env"]["propertyNames"]["pattern"]
    priority = REQUEST_FIELDS["priority_class"]["pattern"]
    images = [*DISTRIBUTION_VALID, *DISTRIBUTION_INVALID, *HOSTILE_IMAGES.values(), "a" * 600]
    names = ["NCCL_NET", "NCCL_NET\n", "MASTER_ADDR\r\n", "my.var-1", "1X", "A\nB"]
    classes = ["training-high", "training-high\n", "system-node-critical", "a.b", "-a"]
    cases = (
        [[IMAGE_REF.pattern, v] for v in images]
        + [[env_name, v] for v in names]
        + [[priority, v] for v in classes]
    )
    script = (
        "const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(cases.map(([p, v]) => new RegExp(p).test(v))));"
    )
    out = subprocess.run(
        ["node", "-e", script], input=json.dumps(cases), capture_output=True, text=True, check=True
    )
    python = [re.search(p, v) is not None for p, v in cases]
    ecma = json.loads(out.stdout)
    assert ecma == python, [c for c, a, b in zip(cases, ecma, python, strict=True) if a != b]
    # the valid ones only, and the path of 256 characters, which the length check refuses
    assert python.count(True) == len(DISTRIBUTION_VALID) + 1 + 2 + 2
