"""Thin Airflow operators: templated names in, services and backends do the work."""

from gpufleet.airflow.operators.validation import (
    FabricValidationOperator,
    StorageValidationOperator,
)

__all__ = ["FabricValidationOperator", "StorageValidationOperator"]
