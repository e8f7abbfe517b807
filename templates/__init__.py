"""Package data, not code: the dashboard's Jinja templates, installed as app.web.templates (see pyproject.toml)."""
