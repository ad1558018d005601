"""Request-body checks for the GCP fake, as strict as Google's front ends.

Container and compute bodies are checked against the discovery documents that ship with
``google-api-python-client`` (``googleapiclient/discovery_cache/documents/*.json``): every
field must exist in its schema (recursively, through ``$ref``, arrays and maps), values must
have the schema's type, and enum values must be among the schema's ``enum``. The generated
REST clients send container enums as integers (``$alt=json;enum-encoding=int``): an integer is
accepted when it indexes the schema's enum list and is turned into the enum's name, so the
stored resource reads like the real API's. Lustre has no discovery document there: its bodies
go through ``lustre_v1.Instance.from_json(body, ignore_unknown_fields=False)``, plus the tier
and capacity rules of Google's "Performance tiers" page.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any


class ApiError(Exception):
    """An error answer: HTTP ``code``, Google ``status`` (``INVALID_ARGUMENT``) and message."""

    def __init__(
        self, code: int, status: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "status": self.status,
                "errors": [{"message": self.message, "reason": self.status.lower()}],
            }
        }


def bad_request(message: str) -> ApiError:
    return ApiError(400, "INVALID_ARGUMENT", message)


@cache
def discovery(name: str) -> dict[str, Any]:
    import googleapiclient

    path = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / name
    return json.loads(path.read_text())


class DiscoveryValidator:
    """Checks (and normalises) a JSON body against one discovery document's schemas."""

    def __init__(self, document: str, int_enums: bool = False) -> None:
        self.schemas = discovery(document)["schemas"]
        self.int_enums = int_enums

    def check(self, body: Any, schema: str) -> Any:
        if not isinstance(body, dict):
            raise bad_request("Invalid JSON payload received. Expected an object.")
        return self._value(body, {"$ref": schema}, "")

    def _value(self, value: Any, spec: dict[str, Any], where: str) -> Any:
        if "$ref" in spec:
            spec = self.schemas[spec["$ref"]]
        kind = spec.get("type")
        if kind == "object" or "properties" in spec:
            return self._object(value, spec, where)
        if kind == "array":
            if not isinstance(value, list):
                raise bad_request(f"Invalid value at '{where}': expected a list, got {value!r}")
            return [self._value(v, spec["items"], f"{where}[{i}]") for i, v in enumerate(value)]
        if kind == "string":
            return self._string(value, spec, where)
        if kind == "integer":
            if isinstance(value, bool) or not _is_int(value):
                raise bad_request(f"Invalid value at '{where}' (TYPE_INT32), {value!r}")
            return int(value)
        if kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise bad_request(f"Invalid value at '{where}' (TYPE_DOUBLE), {value!r}")
            return value
        if kind == "boolean":
            if not isinstance(value, bool):
                raise bad_request(f"Invalid value at '{where}' (TYPE_BOOL), {value!r}")
            return value
        return value  # "any"

    def _object(self, value: Any, spec: dict[str, Any], where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise bad_request(f"Invalid value at '{where}': expected an object, got {value!r}")
        props = spec.get("properties")
        extra = spec.get("additionalProperties")
        out: dict[str, Any] = {}
        for key, item in value.items():
            path = f"{where}.{key}" if where else key
            if props is not None and key in props:
                out[key] = self._value(item, props[key], path)
            elif extra is not None:
                out[key] = self._value(item, extra, path)
            else:
                at = f" at '{where}'" if where else ""
                raise bad_request(
                    f'Invalid JSON payload received. Unknown name "{key}"{at}: Cannot find field.'
                )
        return out

    def _string(self, value: Any, spec: dict[str, Any], where: str) -> Any:
        enum = spec.get("enum")
        if enum is not None:
            if self.int_enums and _is_int(value) and not isinstance(value, bool):
                index = int(value)
                if 0 <= index < len(enum):
                    return enum[index]
            elif isinstance(value, str) and value in enum:
                return value
            raise bad_request(f"Invalid value at '{where}' (TYPE_ENUM), {json.dumps(value)}")
        if spec.get("format") in ("int64", "uint64", "int32", "uint32"):
            if isinstance(value, bool) or not _is_int(value):
                raise bad_request(f"Invalid value at '{where}' (TYPE_INT64), {value!r}")
            return str(value)
        if not isinstance(value, str):
            raise bad_request(f"Invalid value at '{where}' (TYPE_STRING), {value!r}")
        return value


def _is_int(value: Any) -> bool:
    if isinstance(value, int):
        return True
    if isinstance(value, str):
        try:
            int(value)
        except ValueError:
            return False
        return True
    return False


container = DiscoveryValidator("container.v1.json", int_enums=True)
compute = DiscoveryValidator("compute.v1.json")

# Managed Lustre: tier (MB/s per TiB) -> (min, max, step, threshold, step above threshold) GiB,
# from https://cloud.google.com/managed-lustre/docs/performance-tiers ("Dynamic" is tier 0
# here: the Dynamic tier sends no perUnitStorageThroughput, but dynamicTierOptions).
LUSTRE_TIERS = {
    1000: (9_000, 10_008_000, 9_000, 1_530_000, 72_000),
    500: (18_000, 20_016_000, 18_000, 3_060_000, 144_000),
    250: (36_000, 40_032_000, 36_000, 6_120_000, 288_000),
    125: (72_000, 12_240_000, 72_000, 12_240_000, 72_000),
    0: (472_000, 84_016_000, 472_000, 84_016_000, 472_000),
}


def check_lustre_instance(body: Any) -> dict[str, Any]:
    """A Lustre ``Instance`` body as the API would accept it, or ``ApiError`` 400."""
    import re

    from google.cloud import lustre_v1

    try:
        instance = lustre_v1.Instance.from_json(json.dumps(body), ignore_unknown_fields=False)
    except Exception as exc:  # noqa: BLE001 - json_format.ParseError and friends
        raise bad_request(f"Invalid JSON payload received. {exc}") from None
    tier = instance.per_unit_storage_throughput
    dynamic = instance.dynamic_tier_options.mode == lustre_v1.DynamicTierOptions.Mode.DEFAULT_CACHE
    if dynamic and tier:
        raise bad_request("perUnitStorageThroughput must not be set with the Dynamic tier")
    if tier not in LUSTRE_TIERS or (tier == 0 and not dynamic):
        raise bad_request(
            f"perUnitStorageThroughput {tier} is not one of 125, 250, 500, 1000 (or the "
            "Dynamic tier's dynamicTierOptions)"
        )
    low, high, step, threshold, large = LUSTRE_TIERS[tier]
    gib = instance.capacity_gib
    if not low <= gib <= high or gib % (step if gib <= threshold else large):
        raise bad_request(
            f"capacityGib {gib} is invalid for throughput {tier}: between {low} and {high} "
            f"in steps of {step} up to {threshold}, then of {large}"
        )
    if not re.fullmatch(r"[A-Za-z0-9]{1,8}", instance.filesystem or ""):
        raise bad_request("filesystem must be 1-8 letters or digits")
    if not re.fullmatch(r"projects/[^/]+/global/networks/[^/]+", instance.network or ""):
        raise bad_request("network must be projects/{project}/global/networks/{network}")
    return body
