# The agent worker: `python worker.py`, configured by TEMPORAL_ADDRESS (see docker-compose.yml).
# The same image runs the codec server (`python codec_server.py`) and the one-shot that makes the
# payload key (`sh deploy/payload-key.sh`).
FROM python:3.11-slim

# Every file the worker writes is under /data, which the `agent` user owns and compose mounts a
# volume on: /app is root's, and a worker that cannot write its stores stops at start.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AGENT_DEMO_DB=/data/demo.db \
    AGENT_MESSAGE_STORE=/data/messages.db \
    AGENT_RESULT_STORE=/data/results.db

WORKDIR /app

# Only what the package and the worker need (README.md is the package's readme).
COPY pyproject.toml README.md ./
COPY workflows ./workflows
COPY activities ./activities
COPY cli ./cli
COPY worker.py starter.py agent_client.py forking.py payload_codec.py codec_server.py sandbox_runner.py ./
COPY deploy/payload-key.sh ./deploy/
RUN pip install --no-cache-dir . \
    && rm -rf build *.egg-info

# A non-root user, and the directories it writes owned by it: a named volume mounted on one
# starts with this owner and mode. /keys holds the payload key and the codec token (owner only).
RUN useradd --create-home --uid 10001 agent \
    && mkdir -p /data /keys \
    && chown agent:agent /data /keys \
    && chmod 0700 /keys
USER agent

CMD ["python", "worker.py"]
