"""Package data, not code: the dashboard's CSS, scripts and vendored assets, installed as app.web.static (see pyproject.toml)."""
