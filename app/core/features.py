"""Which operation sets are served: core always, each feature family when enabled."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from fastapi import APIRouter

from app.core.registry import OperationSet, Registry

log = logging.getLogger("cairn.features")


def build_registry(features: list[str]) -> Registry:
    """The registry of core plus every enabled feature that has an `operations.py`."""
    from app.core.operations import ops as core_ops

    registry = Registry()
    registry.add(core_ops)
    for feature in features:
        try:
            module = importlib.import_module(f"app.{feature}.operations")
        except ModuleNotFoundError as exc:
            if exc.name in (f"app.{feature}", f"app.{feature}.operations"):
                log.info("feature %s has no operations yet", feature)
                continue
            raise
        opset = getattr(module, "ops", None)
        if not isinstance(opset, OperationSet):
            raise RuntimeError(f"app.{feature}.operations must define `ops = OperationSet(...)`")
        registry.add(opset)
    return registry


def feature_lifecycles(features: list[str]) -> list[Any]:
    """Modules `app/<feature>/lifecycle.py` of enabled features; each has `async startup(state)` and
    `async shutdown(state)`, run by the app's lifespan (sweeps, background runners)."""
    modules = []
    for feature in features:
        try:
            modules.append(importlib.import_module(f"app.{feature}.lifecycle"))
        except ModuleNotFoundError as exc:
            if exc.name in (f"app.{feature}", f"app.{feature}.lifecycle"):
                continue
            raise
    return modules


def feature_routers(features: list[str]) -> list[APIRouter]:
    """Extra REST routes that are not operations (e.g. multipart uploads): `app/<feature>/routes.py`
    exposing `router`, for enabled features only."""
    routers = []
    for feature in features:
        try:
            module = importlib.import_module(f"app.{feature}.routes")
        except ModuleNotFoundError as exc:
            if exc.name in (f"app.{feature}", f"app.{feature}.routes"):
                continue
            raise
        routers.append(module.router)
    return routers
