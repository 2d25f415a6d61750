"""Datasets: analytics tools over CSV / Parquet / JSON files (seed 002)."""

from __future__ import annotations

from app.core.feature import Feature
from app.datasets import lifecycle, pages
from app.datasets.config import DatasetSettings
from app.datasets.operations import ops
from app.datasets.routes import UPLOAD_PATH, router

FEATURE = Feature(
    name="datasets",
    operations=ops,
    settings=DatasetSettings,
    routers=(router,),
    own_body_limit=(UPLOAD_PATH, pages.UPLOAD_PATH),
    startup=lifecycle.startup,
    shutdown=lifecycle.shutdown,
    console=pages.SECTIONS,
)
