# The JobDeck image: one image for core nodes and agents (the command picks the role).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY core ./core
COPY agents ./agents
COPY console_tui ./console_tui
COPY web_ui ./web_ui
COPY migrations ./migrations
RUN pip install --no-cache-dir .
ENV JOBDECK_HOST=0.0.0.0 JOBDECK_DATA_DIR=/data
EXPOSE 8640
ENTRYPOINT ["jobdeck"]
CMD ["up"]
