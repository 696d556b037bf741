"""Hook implementations: the backend is registered lazily (nothing heavy is imported here)."""

from __future__ import annotations

from videorl.api import Register, hookimpl


@hookimpl
def register_model_backends(register: Register) -> None:
    register(
        "llava_onevision",
        "videorl_models_llava_onevision.backend:LlavaOnevisionBackend",
        description="LLaVA-OneVision (contrib; videos and text)",
    )
