"""app/analysis/config.py: the analysis settings are read from the environment at every call."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.analysis.config import DEMO_REGISTRY, AnalysisSettings


def test_settings_are_read_from_the_environment_when_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CAIRN_ANALYSIS_UPSTREAMS", raising=False)
    monkeypatch.setenv("CAIRN_ANALYSIS_FINDING_TTL_SECONDS", "60")
    first = AnalysisSettings()
    assert first.finding_ttl_seconds == 60.0
    monkeypatch.setenv("CAIRN_ANALYSIS_FINDING_TTL_SECONDS", "5")
    monkeypatch.setenv("CAIRN_ANALYSIS_UPSTREAMS", str(tmp_path / "upstreams.yaml"))
    second = AnalysisSettings()
    assert second is not first and second.finding_ttl_seconds == 5.0
    assert second.upstreams == tmp_path / "upstreams.yaml"


def test_bounds_and_the_packaged_demo_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_ANALYSIS_MAX_RESPONSE_TOKENS", "100")
    with pytest.raises(ValueError, match="max_response_tokens"):
        AnalysisSettings()
    assert DEMO_REGISTRY.is_file() and DEMO_REGISTRY.suffix == ".yaml"
