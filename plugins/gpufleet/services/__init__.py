"""Services: orchestrate backends and domain code for one capability. No Airflow imports.

Operators adapt these to Airflow (templating, deferral, XCom); the CLI and tests call them
directly.
"""
