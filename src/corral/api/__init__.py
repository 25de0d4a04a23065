"""The controller REST API (FastAPI) and its schemas."""
