# gpufleet's Airflow image: the official Airflow 3.3.2 image plus our pinned dependencies and the
# gpufleet package (its `gpufleet` CLI and the operators the DAGs import).
# Build: docker compose build   (or: docker build -t gpufleet-airflow:latest .)
FROM apache/airflow:3.3.2-python3.11

# The official image runs as "airflow" (uid 50000, gid 0) and installs into its user site.
USER airflow
WORKDIR /opt/gpufleet-src

# 1. Dependencies first (the layer is reused until requirements or constraints change).
#    The runtime requirements only: the test tools (requirements-dev.txt) stay out of the image.
#    The constraints file pins every transitive version, so the image matches the tested venv
#    and pip cannot replace the Airflow the base image ships.
COPY --chown=airflow:0 requirements.txt constraints.txt ./
RUN pip install --no-cache-dir -c constraints.txt -r requirements.txt

# 2. The gpufleet package itself, without touching the dependencies installed above.
COPY --chown=airflow:0 pyproject.toml README.md ./
COPY --chown=airflow:0 plugins/ ./plugins/
RUN pip install --no-cache-dir --no-deps . \
    && python -c "import gpufleet, gpufleet.cli; print('gpufleet', gpufleet.__version__)"

# 3. DAGs, plugins and data baked in, so the image also runs without the compose bind mounts
#    (docker-compose.yaml mounts the working tree over these for development).
COPY --chown=airflow:0 dags/ /opt/airflow/dags/
COPY --chown=airflow:0 plugins/ /opt/airflow/plugins/
COPY --chown=airflow:0 include/ /opt/airflow/include/

ENV GPUFLEET_INCLUDE_DIR=/opt/airflow/include
WORKDIR /opt/airflow
