"""Hook implementations of videorl-models. Targets are lazy: nothing heavy is imported here."""

from __future__ import annotations

from videorl.api import Register, hookimpl

#: family -> (lazy target, model_type aliases, description)
BACKENDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "qwen2_vl": ("videorl_models.qwen2_vl:Qwen2VLBackend", (), "Qwen2-VL (factor 28)"),
    "qwen2_5_vl": ("videorl_models.qwen2_5_vl:Qwen2_5VLBackend", (), "Qwen2.5-VL (factor 28)"),
    "qwen3_vl": (
        "videorl_models.qwen3_vl:Qwen3VLBackend",
        ("qwen3_vl_moe",),
        "Qwen3-VL dense and MoE (factor 32, DeepStack)",
    ),
    "qwen3_5": (
        "videorl_models.qwen3_5:Qwen3_5Backend",
        ("qwen3_5_moe",),
        "Qwen3.5 dense and MoE (factor 32)",
    ),
}


@hookimpl
def register_model_backends(register: Register) -> None:
    for family, (target, aliases, description) in BACKENDS.items():
        register(family, target, aliases=aliases, description=description)
