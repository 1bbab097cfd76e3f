# The agent worker: `durable-agent worker`, configured by TEMPORAL_ADDRESS (see
# docker-compose.yml). The same image runs the codec server (`python -m
# durable_agent.encryption.codec_server`) and the one-shot that makes the payload key
# (`sh deploy/payload-key.sh`).
FROM python:3.11-slim

# Every file the worker writes is under /data, which the `agent` user owns and compose mounts a
# volume on: /app is root's, and a worker that cannot write its stores stops at start.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AGENT_DEMO_DB=/data/demo.db \
    AGENT_MESSAGE_STORE=/data/messages.db \
    AGENT_RESULT_STORE=/data/results.db

# The package is built from /src, installed into site-packages, and /src removed: the image runs
# the installed `durable_agent` from /app, where no source folder of that name can shadow it.
# Only what the package needs (README.md is its readme).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY durable_agent ./durable_agent
COPY workflows ./workflows
COPY activities ./activities
COPY cli ./cli
COPY client ./client
COPY serving ./serving
COPY encryption ./encryption
COPY demo ./demo
RUN pip install --no-cache-dir . \
    && cd / && rm -rf /src

WORKDIR /app
COPY deploy/payload-key.sh ./deploy/

# A non-root user, and the directories it writes owned by it: a named volume mounted on one
# starts with this owner and mode. /keys holds the payload key and the codec token (owner only).
RUN useradd --create-home --uid 10001 agent \
    && mkdir -p /data /keys \
    && chown agent:agent /data /keys \
    && chmod 0700 /keys
USER agent

CMD ["durable-agent", "worker"]
