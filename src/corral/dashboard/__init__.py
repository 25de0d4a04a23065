"""The web dashboard: static HTML, CSS and JavaScript (no build step, nothing fetched from elsewhere) that
the controller serves at / (controller/dashboard_routes.py) and that reads the REST API with the user's
token, as any client does: a user sees what the API shows them."""
from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).parent / "static"
