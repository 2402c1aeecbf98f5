# The JobDeck image: one image for core nodes, agents and the web dashboard (the command picks the
# role; deploy/kubernetes and compose.yaml use it). It runs as an unprivileged user (uid 10001).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY core ./core
COPY agents ./agents
COPY console_tui ./console_tui
COPY web_ui ./web_ui
COPY migrations ./migrations
RUN pip install --no-cache-dir . && useradd --uid 10001 --create-home --shell /usr/sbin/nologin jobdeck
ENV JOBDECK_HOST=0.0.0.0 JOBDECK_DATA_DIR=/data JOBDECK_CACHE_DIR=/var/cache/jobdeck
# The dashboard's frontend is built into the image (bun straight from the npm registry, no npm
# needed), so `jobdeck web` starts in seconds; nodes and agents never touch it.
RUN mkdir -p /data /var/cache/jobdeck && jobdeck web --setup-only && chown -R jobdeck /data /var/cache/jobdeck
USER jobdeck
EXPOSE 8640 8650
ENTRYPOINT ["jobdeck"]
CMD ["up"]
