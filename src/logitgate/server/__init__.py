"""The OpenAI-compatible HTTP server (extra ``server``: FastAPI and uvicorn).

    from logitgate.server import create_app
    from logitgate.server.engine import Engine

    engine = Engine(model)
    engine.start()
    app = create_app(engine, api_key="secret", controller_model=second_model)
    uvicorn.run(app, port=8000)

``create_app`` is imported lazily, so ``logitgate.server.engine`` works without FastAPI.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
