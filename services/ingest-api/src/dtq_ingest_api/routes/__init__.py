"""The route handlers, one module per resource; ``app.py`` mounts them under ``/api/v1``."""
