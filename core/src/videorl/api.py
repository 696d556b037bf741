"""The public API for plugin authors: what a reward, benchmark, model-backend or engine plugin imports.

Plugins (the first-party ones included) import from here and from ``videorl.hookimpl`` only, as a
third party would. Importing this module is cheap: no torch, no vllm.
"""

from videorl import answers
from videorl.algorithms import (
    AdvantageEstimator,
    LossScale,
    PolicyLoss,
    PolicyLossFunction,
    Preset,
    StepAdvantageEstimator,
    StepRewards,
)
from videorl.alignment import (
    check_alignment,
    check_batch_alignment,
    check_frames,
    check_image,
    check_response_tokens,
    check_same_prompt,
    image_grid,
    mm_token_types,
    video_grid,
    visual_token_count,
)
from videorl.atomic import atomic_write_bytes
from videorl.backend import (
    ModelBackend,
    VisionSync,
    VisualBudget,
    backend_for_model,
    read_model_type,
)
from videorl.benchmark import Benchmark, BenchmarkRow
from videorl.episode import Episode, Segment
from videorl.errors import (
    AlignmentError,
    ConfigError,
    DataError,
    RegistryError,
    UnknownComponentError,
    VideorlError,
)
from videorl.eval.aggregate import benchmark_summary, breakdown, group_means, macro_mean, mean
from videorl.generation import (
    Completion,
    EngineCapabilities,
    EngineFactory,
    EngineSpec,
    RolloutEngine,
    SamplingParams,
    capabilities_of,
    check_engine_options,
)
from videorl.hookspecs import hookimpl
from videorl.media.info import MediaInfo
from videorl.media.metadata import VideoMetadata
from videorl.model_inputs import (
    EncodedPrompt,
    ModelInputs,
    PixelNorm,
    PromptInput,
    RolloutRequest,
    collate_encoded,
    response_logprobs,
    token_logprobs,
)
from videorl.packed_attention import install_packed_sdpa, packed_lengths
from videorl.packing import PackedInputs, pack_model_inputs
from videorl.prompt_length import OverlongPrompt, filter_overlong
from videorl.prompts import PromptTemplate, find_template, register_template_dir, render_prompt, template_name
from videorl.registry import Register
from videorl.rewards.config import RewardConfig
from videorl.rewards.format import FormatRule
from videorl.rewards.router import RewardEvent, RewardRouter
from videorl.rewards.task import TaskReward
from videorl.rewards.types import Reward, RewardInput, RewardOutput
from videorl.rollout.hf import HFEngine
from videorl.rollout.workflow import RolloutWorkflow
from videorl.runs.trackers import Logger, RunContext
from videorl.tools import (
    Tool,
    ToolArgumentError,
    ToolCall,
    ToolCallRecord,
    ToolContext,
    ToolResult,
    VideoSource,
    check_arguments,
    parse_tool_call,
    run_tool,
)
from videorl.tools.video import FrameSource
from videorl.workers import LineWorker, LineWorkers

__all__ = [
    "AdvantageEstimator",
    "AlignmentError",
    "Benchmark",
    "BenchmarkRow",
    "Completion",
    "ConfigError",
    "DataError",
    "EncodedPrompt",
    "EngineCapabilities",
    "EngineFactory",
    "EngineSpec",
    "Episode",
    "FormatRule",
    "FrameSource",
    "HFEngine",
    "LineWorker",
    "LineWorkers",
    "Logger",
    "LossScale",
    "MediaInfo",
    "ModelBackend",
    "ModelInputs",
    "OverlongPrompt",
    "PackedInputs",
    "PixelNorm",
    "PolicyLoss",
    "PolicyLossFunction",
    "Preset",
    "PromptInput",
    "PromptTemplate",
    "Register",
    "RegistryError",
    "Reward",
    "RewardConfig",
    "RewardEvent",
    "RewardInput",
    "RewardOutput",
    "RewardRouter",
    "RolloutEngine",
    "RolloutRequest",
    "RolloutWorkflow",
    "RunContext",
    "SamplingParams",
    "Segment",
    "StepAdvantageEstimator",
    "StepRewards",
    "TaskReward",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolCallRecord",
    "ToolContext",
    "ToolResult",
    "UnknownComponentError",
    "VideoMetadata",
    "VideoSource",
    "VideorlError",
    "VisionSync",
    "VisualBudget",
    "answers",
    "atomic_write_bytes",
    "backend_for_model",
    "benchmark_summary",
    "breakdown",
    "capabilities_of",
    "check_alignment",
    "check_arguments",
    "check_batch_alignment",
    "check_engine_options",
    "check_frames",
    "check_image",
    "check_response_tokens",
    "check_same_prompt",
    "collate_encoded",
    "filter_overlong",
    "find_template",
    "group_means",
    "hookimpl",
    "image_grid",
    "install_packed_sdpa",
    "macro_mean",
    "mean",
    "mm_token_types",
    "pack_model_inputs",
    "packed_lengths",
    "parse_tool_call",
    "read_model_type",
    "register_template_dir",
    "render_prompt",
    "response_logprobs",
    "run_tool",
    "template_name",
    "token_logprobs",
    "video_grid",
    "visual_token_count",
]
