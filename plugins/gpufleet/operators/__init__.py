"""Thin Airflow operators: templated names in, services and backends do the work."""

from gpufleet.operators.validation import FabricValidationOperator, StorageValidationOperator

__all__ = ["FabricValidationOperator", "StorageValidationOperator"]
