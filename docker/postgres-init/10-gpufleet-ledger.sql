-- Runs once, when the postgres service initialises an empty data volume (as POSTGRES_USER).
-- The gpufleet ledger lives in its own database, never in Airflow's metadata DB ("airflow"):
-- Airflow reaches it through the connection AIRFLOW_CONN_GPUFLEET_LEDGER (docker-compose.yaml).
-- The ledger creates its tables itself on first use.
CREATE DATABASE gpufleet_ledger OWNER airflow;
