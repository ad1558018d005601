"""Hostile values (issue 16, finding 6): every pattern matches the whole string (Python's
``re.search``, as jsonschema uses it, and ECMA-262, as the UI form uses it), non-finite numbers
are refused wherever a value becomes a setting, and a refused value is echoed cut short.
Through the real types: the launch request, the drain settings, the catalog, the CLI, alerts."""

from __future__ import annotations

import copy
import json
import logging
import math
import re
import shutil
import subprocess

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.domain import names
from gpufleet.domain.faults import PARAM_PATTERN
from gpufleet.domain.inputs import ECHO_LIMIT, finite, shown
from gpufleet.errors import GpufleetError
from gpufleet.services.launch.request import REQUEST_FIELDS, InvalidLaunchRequest, LaunchRequest
from gpufleet.services.nodes.drain import DrainSettings
from tests.test_bad_inputs import LAUNCH_CONF

# (pattern, a value it accepts): each must refuse the value with a trailing newline
PATTERNS = {
    "DNS1123_LABEL": (names.DNS1123_LABEL.pattern, "h200-a"),
    "DNS1035_LABEL": (names.DNS1035_LABEL.pattern, "j1"),
    "DNS1123_SUBDOMAIN": (names.DNS1123_SUBDOMAIN.pattern, "node-1.example"),
    "LABEL_NAME": (names.LABEL_NAME.pattern, "gpufleet.io_pool"),
    "LABEL_VALUE": (names.LABEL_VALUE.pattern, "h200-a"),
    "POOL_KEY": (names.POOL_KEY.pattern, "a3u-sim/h200-a"),
    "sim fault": (PARAM_PATTERN, "a3u-sim/h200-a=fabric-down"),
    "launch image": (REQUEST_FIELDS["image"]["pattern"], "img:1"),
    "launch job_name": (REQUEST_FIELDS["job_name"]["pattern"], "j1"),
    "launch namespace": (REQUEST_FIELDS["namespace"]["pattern"], "ml-team"),
    "ENV_NAME": (names.ENV_NAME.pattern, "NCCL_NET"),
    "launch env name": (REQUEST_FIELDS["env"]["propertyNames"]["pattern"], "MASTER_ADDR"),
    "launch priority_class": (REQUEST_FIELDS["priority_class"]["pattern"], "training-high"),
}


@pytest.mark.parametrize("which", sorted(PATTERNS))
def test_a_pattern_matches_the_whole_string_in_python(which):
    pattern, good = PATTERNS[which]
    assert re.search(pattern, good)
    for bad in (good + "\n", good + "\r\n", "\n" + good, good + "\nx"):
        assert re.search(pattern, bad) is None, f"{which} accepts {bad!r}"


@pytest.mark.skipif(not shutil.which("node"), reason="needs node for ECMA-262 regexps")
def test_every_pattern_means_the_same_in_ecma_262():
    """The UI form checks the same strings with JavaScript's RegExp (no flags)."""
    cases = [[p, v] for p, good in PATTERNS.values() for v in (good, good + "\n", good + "\r\n")]
    script = (
        "const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(cases.map(([p, v]) => new RegExp(p).test(v))));"
    )
    out = subprocess.run(
        ["node", "-e", script], input=json.dumps(cases), capture_output=True, text=True, check=True
    )
    ecma = json.loads(out.stdout)
    python = [re.search(p, v) is not None for p, v in cases]
    assert ecma == python, [c for c, a, b in zip(cases, ecma, python, strict=True) if a != b]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.mark.parametrize(
    "field,value",
    [
        ("job_name", "j1\n"),
        ("image", "img:1\n"),
        ("namespace", "ml-team\n"),
        ("priority_class", "training-high\n"),
        ("env", {"NCCL_NET\n": "Socket"}),
        ("env", {"MASTER_ADDR\n": "10.0.0.1"}),
        ("max_validation_age_hours", math.nan),
        ("max_validation_age_hours", math.inf),
    ],
)
def test_a_launch_request_refuses_a_trailing_newline_and_non_finite_numbers(catalog, field, value):
    conf = {**copy.deepcopy(LAUNCH_CONF), field: value}
    with pytest.raises(InvalidLaunchRequest) as err:
        LaunchRequest.from_params(conf, catalog)
    assert field in str(err.value)


def test_a_launch_request_is_still_accepted(catalog):
    req = LaunchRequest.from_params(copy.deepcopy(LAUNCH_CONF), catalog)
    assert req.job_name == "llm-finetune"


def test_a_ten_thousand_character_name_is_refused_in_a_short_clear_message(catalog):
    conf = {**copy.deepcopy(LAUNCH_CONF), "job_name": "a" * 10_000, "image": "i " * 5_000}
    with pytest.raises(InvalidLaunchRequest) as err:
        LaunchRequest.from_params(conf, catalog)
    message = str(err.value)
    assert len(message) < 800, len(message)
    assert "10000 chars" in message and "job_name" in message and "image" in message


@pytest.mark.parametrize("setting", ["soak_s", "timeout_s", "realert_s", "poll_s", "batch_size"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_drain_settings_refuse_non_finite_numbers(setting, value):
    with pytest.raises(GpufleetError) as err:
        DrainSettings(**{setting: value})
    assert setting in str(err.value) and "finite" in str(err.value)


def test_drain_settings_refuse_a_negative_wait():
    with pytest.raises(GpufleetError, match="soak_s"):
        DrainSettings(soak_s=-1)


def test_finite_names_the_value_and_refuses_booleans_and_words():
    assert finite("2.5", "x") == 2.5
    for bad in (math.nan, "nan", "inf", "-Infinity", True, None, "ten", "1" * 10_000 + "x"):
        with pytest.raises(GpufleetError) as err:
            finite(bad, "soak_minutes")
        assert str(err.value).startswith("soak_minutes") and len(str(err.value)) < 300


def test_shown_cuts_a_long_value_and_says_how_long_it_was():
    assert shown("abc") == "'abc'"
    cut = shown("x" * 10_000)
    assert len(cut) < ECHO_LIMIT + 40 and "10000 chars" in cut


def test_an_alert_echoes_a_huge_error_cut_short():
    from gpufleet.airflow.notifiers import FleetAlertNotifier

    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("gpufleet.alerts")
    logger.addHandler(handler)
    try:
        FleetAlertNotifier(summary="s").deliver(
            {"summary": "s", "where": "d.t", "run_id": "r" * 10_000, "error": "e" * 100_000}
        )
    finally:
        logger.removeHandler(handler)
    (line,) = [text for text in lines if text.startswith("ALERT")]
    assert len(line) < 3_000 and "100000 chars" in line and "10000 chars" in line


def test_a_number_param_must_be_bounded_and_refuses_nan():
    from airflow.sdk.exceptions import ParamValidationError

    from gpufleet.airflow.dagkit import param

    with pytest.raises(ValueError, match="minimum and a maximum"):
        param(1.0, type="number", minimum=0)  # +Infinity would pass it
    bounded = param(1.0, type=["null", "number"], minimum=0, maximum=10)
    assert bounded.resolve(None) is None and bounded.resolve(2.5) == 2.5
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ParamValidationError):
            bounded.resolve(bad)


# --- the same rule in the checks outside the launch (issue 31, item 6) ----------------------------


def test_a_catalog_mount_path_with_a_trailing_newline_is_refused():
    from pydantic import ValidationError

    from gpufleet.domain.fleet import Filesystem

    fields = {
        "name": "l",
        "kind": "managed-lustre",
        "capacity_tib": 36,
        "throughput_mbps_per_tib": 500,
    }
    assert Filesystem(**fields, mount_path="/mnt/lustre").mount_path == "/mnt/lustre"
    with pytest.raises(ValidationError, match="may hold only letters"):
        Filesystem(**fields, mount_path="/mnt/lustre\n")


def test_the_storage_check_refuses_a_mount_path_with_a_trailing_newline(catalog):
    """It goes into the fio pod's script: a newline there would end a shell command."""
    from gpufleet.manifests.storage_validation import render_storage_validation

    ref = catalog.pool("a3u-sim", "h200-a")
    render_storage_validation(ref, ["n1"], "manual__x")  # the catalog's own path renders
    fs = ref.filesystem.model_copy(update={"mount_path": "/mnt/lustre\n"})  # past the catalog
    cluster = ref.cluster.model_copy(update={"filesystems": (fs,)})
    with pytest.raises(ValueError, match="unsafe characters"):
        render_storage_validation(ref.model_copy(update={"cluster": cluster}), ["n1"], "r")


def test_an_sts_session_arn_with_a_trailing_newline_is_not_read_as_a_role():
    from gpufleet.backends.eks.cluster import principal_arn

    session = "arn:aws:sts::123456789012:assumed-role/Trainer/s1"
    assert principal_arn(session) == "arn:aws:iam::123456789012:role/Trainer"
    assert principal_arn(session + "\n") == session + "\n"  # not a session ARN: left as given
