# syntax=docker/dockerfile:1
# kvscope's dashboard and API on 0.0.0.0:8000, as a non-root user, installed from its wheel.
#   docker build -t kvscope . && docker run --rm -p 8000:8000 kvscope
# Publish the port on loopback (-p 127.0.0.1:8000:8000) unless you mean to share the dashboard and its API.

# Stage 1: wheels of kvscope and of every dependency, built from the source tree.
FROM python:3.12-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The dependencies alone first, so that a code change does not rebuild them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip wheel --wheel-dir /dist -r /tmp/requirements.txt
COPY . .
RUN pip wheel --no-deps --wheel-dir /dist .

# Stage 2: the runtime, with the wheels installed and no source tree (templates and static files ship inside the
# wheel). The wheels are bind-mounted for the install, so they take no room in the image.
FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/dist,target=/dist \
    pip install --no-index --find-links /dist kvscope
RUN useradd --create-home --uid 10001 kvscope
USER kvscope
WORKDIR /home/kvscope
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"]
CMD ["kvscope", "serve", "--host", "0.0.0.0", "--port", "8000"]
