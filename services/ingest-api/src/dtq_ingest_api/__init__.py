"""dtq ingest API: the REST interface of a dtq deployment (Litestar on uvicorn)."""
