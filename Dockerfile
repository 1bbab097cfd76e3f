# The agent worker: `python worker.py`, configured by TEMPORAL_ADDRESS (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AGENT_DEMO_DB=/data/demo.db

WORKDIR /app

# Only what the package and the worker need (README.md is the package's readme).
COPY pyproject.toml README.md ./
COPY workflows ./workflows
COPY activities ./activities
COPY cli ./cli
COPY worker.py starter.py agent_client.py payload_codec.py codec_server.py ./
RUN pip install --no-cache-dir . \
    && rm -rf build *.egg-info

# A non-root user, and /data owned by it: a named volume mounted there starts with this owner.
RUN useradd --create-home --uid 10001 agent \
    && mkdir -p /data \
    && chown agent:agent /data
USER agent

CMD ["python", "worker.py"]
