# novikoff: the streaming perceptron service (also used by docker-compose.yml for the producer).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/novikoff
COPY pyproject.toml README.md ./
COPY learning ./learning
COPY consumers ./consumers
COPY service ./service
COPY config/default.toml ./config/default.toml
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /var/lib/novikoff --create-home novikoff

USER novikoff
WORKDIR /var/lib/novikoff
ENV NOVIKOFF_CONFIG=/opt/novikoff/config/default.toml \
    NOVIKOFF_HTTP__HOST=0.0.0.0 \
    NOVIKOFF_HTTP__PORT=8000 \
    NOVIKOFF_CHECKPOINT__PATH=/var/lib/novikoff/state
EXPOSE 8000
VOLUME ["/var/lib/novikoff"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
ENTRYPOINT ["novikoff"]
CMD ["serve"]
