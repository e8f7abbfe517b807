# kvscope's dashboard and API on 0.0.0.0:8000, as a non-root user.
#   docker build -t kvscope . && docker run --rm -p 8000:8000 kvscope
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 kvscope
WORKDIR /app

# The dependencies alone first, so that a code change does not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

# Editable, so that the app finds templates/ and static/ beside it in /app.
COPY README.md ./
COPY sim/ sim/
COPY app/ app/
COPY templates/ templates/
COPY static/ static/
RUN pip install --no-deps -e . && chown -R root:root /app && chmod -R a+rX /app

USER kvscope
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"]
CMD ["kvscope", "serve", "--host", "0.0.0.0", "--port", "8000"]
