"""The web front end: the FastAPI app (``make_app``), its routers by feature, and the SSE step stream."""
