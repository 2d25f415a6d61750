"""Input and output of download_export: a file of the project's folder, checked before it is sent."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.core.schemas import StrictModel
from app.datasets.schemas import ProjectField


class DownloadIn(StrictModel):
    """Arguments of download_export."""

    path: str = Field(
        min_length=1,
        max_length=1000,
        description="A file of the project's folder: relative to it (e.g. 'exports/q_….csv') or absolute "
        "inside it, as export_result reported it",
    )
    project: str | None = ProjectField


class DownloadOut(BaseModel):
    """The file a download may send: where it is, its name, size and media type."""

    path: str = Field(description="Absolute path of the file on the server")
    relative_path: str = Field(description="The path relative to the project's folder")
    name: str
    size_bytes: int
    media_type: str
