"""Settings of the analysis feature (`CAIRN_ANALYSIS_*`), read once when the server starts; use cases
read them with `ctx.feature_settings(AnalysisSettings)`."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PACKAGE_DIR = Path(__file__).resolve().parent
DEMO_REGISTRY = PACKAGE_DIR / "demo_upstreams.yaml"


class AnalysisSettings(BaseSettings):
    """Knobs of the analysis tools.

    `upstreams` is the path of the upstream registry (YAML); without it no model can be ingested. The
    file itself is read at each call, so edits to it apply without a restart.
    """

    model_config = SettingsConfigDict(env_prefix="CAIRN_ANALYSIS_", env_file=".env", extra="ignore")

    upstreams: Path | None = None
    records_retention_days: float = 7.0
    finding_ttl_seconds: float = 3600.0
    sweep_interval_seconds: float = 0.0
    max_response_tokens: int = Field(default=6000, ge=200, le=100_000)
    # Caps on what one upstream response may hold: its body once decompressed, and items in one page.
    max_upstream_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    max_page_items: int = Field(default=10_000, ge=1)
    # The whole fetching of one analysis_ingest call (every page and retry); each request also has
    # the upstream's timeout_seconds as a deadline for its whole answer.
    ingest_deadline_seconds: float = Field(default=120.0, gt=0, le=3600)
