"""Hook specifications: every extension point of videorl, in one module.

A plugin is a module (or object) with functions marked ``@videorl.hookimpl`` whose names match the
specifications below. It is discovered through the ``videorl`` entry-point group, the entry-point
name being the distribution name::

    [project.entry-points.videorl]
    videorl-myreward = "videorl_myreward.plugin"

Every ``register_*`` hook receives a ``register`` callback with the signature of
:class:`videorl.registry.Register`::

    register(name, target, *, aliases=(), description="")

``target`` is the component itself (a class or factory) or a lazy ``"module:attr"`` string that is
imported only when the component is first used, so that ``videorl --help`` and ``videorl plugins``
never import torch or vllm. Registering a name that another plugin already registered is an error
naming both distributions.

Hook implementations may accept a subset of the arguments of a specification; they must not give
their arguments defaults (pluggy does not pass those).

Lifecycle: the CLI creates a plugin manager, registers the built-ins and the installed plugins, then
calls each ``register_*`` hook once to fill one registry per kind, and ``register_commands`` once
to extend the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import click

    from videorl.registry import Register

PROJECT = "videorl"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = [
    "PROJECT",
    "hookimpl",
    "hookspec",
    "register_advantage_estimators",
    "register_algorithm_presets",
    "register_benchmarks",
    "register_commands",
    "register_loggers",
    "register_model_backends",
    "register_policy_losses",
    "register_prompt_templates",
    "register_rewards",
    "register_rollout_engines",
    "register_rollout_workflows",
    "register_tools",
]


# --- components ---------------------------------------------------------------------------------


@hookspec
def register_rewards(register: Register) -> None:
    """Register reward functions.

    A reward target is a class or factory that, called with keyword options from the config (or none),
    returns an object implementing :class:`videorl.api.Reward`. The name is what a config's
    ``rewards`` section and a sample's ``problem_type`` routing refer to; ``aliases`` are further
    ``problem_type`` spellings that route to it (e.g. ``"multiple choice"`` for ``"multiple_choice"``).
    """


@hookspec
def register_benchmarks(register: Register) -> None:
    """Register benchmark adapters.

    A benchmark target is a class or factory that returns an object implementing
    :class:`videorl.api.Benchmark`: it loads a benchmark's rows from a local directory, builds prompts,
    extracts answers, scores them and aggregates the official categories.
    """


@hookspec
def register_model_backends(register: Register) -> None:
    """Register model backends.

    A backend target is a class or factory that returns an object implementing
    :class:`videorl.api.ModelBackend`. The name is a model family (``"qwen2_5_vl"``); ``aliases``
    list the further ``model_type`` values of ``config.json`` that the backend serves. A class
    lacking protocol members is listed as failed by ``videorl plugins``; check one with
    :func:`videorl.testing.assert_backend_contract`.
    """


@hookspec
def register_prompt_templates(register: Register) -> None:
    """Register Jinja2 prompt templates.

    A template target is a :class:`videorl.api.PromptTemplate` (or a factory returning one). Names are
    ``problem_type`` values, optionally suffixed with a variant: ``"multiple_choice"``,
    ``"multiple_choice/thinking"``.
    """


@hookspec
def register_rollout_engines(register: Register) -> None:
    """Register rollout engines (vLLM, HF ``generate``, ...).

    An engine target is a class (:class:`videorl.api.EngineFactory`) declaring its
    :class:`~videorl.api.EngineCapabilities` as ``capabilities`` and building itself with
    ``from_spec(backend, spec, options)`` (an :class:`~videorl.api.EngineSpec` and
    ``rollout.engine_options``) into a :class:`videorl.api.RolloutEngine`
    (docs/plugin-authors/engines.md).
    """


@hookspec
def register_rollout_workflows(register: Register) -> None:
    r"""Register rollout workflows, the names ``rollout.workflow`` refers to.

    A workflow target is a class or factory called with no arguments that returns an object
    implementing :class:`videorl.api.RolloutWorkflow`: ``rollout(prompts, engine, scorer, ...)`` turns
    each prompt into the scored :class:`videorl.api.Episode`\ s of its group (a multi-turn workflow
    appends the environment's segments with loss mask 0). Check one with
    :func:`videorl.testing.assert_workflow_contract`.
    """


@hookspec
def register_tools(register: Register) -> None:
    """Register tools, the names ``rollout.tools`` refers to (the ``tool_agent`` workflow offers them).

    A tool target is a class or factory called with no arguments that returns an object implementing
    :class:`videorl.api.Tool`: a ``name``, a ``description``, the JSON schema of its ``parameters`` and
    ``call(arguments, context)`` returning a :class:`videorl.api.ToolResult` (text, videos with their
    metadata, images). Arguments come from model output: the workflow checks them against the schema
    first; the tool raises :class:`videorl.api.ToolArgumentError` for what the schema cannot judge.
    Check one with :func:`videorl.testing.assert_tool_contract` (docs/plugin-authors/tools.md).
    """


@hookspec
def register_loggers(register: Register) -> None:
    """Register experiment loggers (trackers), the names ``trainer.loggers`` and ``videorl eval run
    --logger`` refer to.

    A logger target is a class or factory called as ``factory(run, **options)``, ``run`` being a
    :class:`videorl.api.RunContext` (run directory, ``"train"``/``"eval"``, resumed step, config, run
    metadata) and ``options`` the logger's ``trainer.logger_options`` entry; it returns an object
    implementing :class:`videorl.api.Logger` (``log(step, row)``, ``log_summary(summary)``,
    ``close()``). Import the tracker's library inside the factory, so that it loads only when enabled.
    A logger that raises is reported and left out; training goes on.
    """


@hookspec
def register_advantage_estimators(register: Register) -> None:
    """Register advantage estimators, the names ``algorithm.adv_estimator`` refers to.

    An estimator target is a dataclass whose fields are its options (each with a default and a
    ``metadata={"help": ...}`` text; ``algorithm.estimator_options`` sets them); an instance implements
    :class:`videorl.api.AdvantageEstimator`: ``advantages(rewards)`` maps the ``(groups, n)`` rewards of
    a step to advantages of the same shape; or, to read more of the step (the reward's parts, each
    response's length), :class:`videorl.api.StepAdvantageEstimator`: ``estimate(step)`` on a
    :class:`videorl.api.StepRewards`. Check one with :func:`videorl.testing.assert_algorithm_contract`.
    """


@hookspec
def register_policy_losses(register: Register) -> None:
    """Register policy losses, the names ``algorithm.policy_loss`` refers to.

    A loss target is a dataclass whose fields are its options (``algorithm.loss_options``); an instance
    implements :class:`videorl.api.PolicyLossFunction`: ``loss(log_probs, old_log_probs, advantages,
    mask, scale)`` returns a :class:`videorl.api.PolicyLoss`. Any loss combines with any estimator.
    Check one with :func:`videorl.testing.assert_algorithm_contract`.
    """


@hookspec
def register_algorithm_presets(register: Register) -> None:
    """Register algorithm presets, the names ``algorithm.preset`` refers to.

    A preset target is a :class:`videorl.api.Preset` (as a ``"module:attr"`` string) or a factory
    returning one: ``algorithm.*`` settings (``adv_estimator``, ``policy_loss``, their option mappings,
    section keys such as ``dynamic_sampling``) that apply where the run's config keeps the default.
    """


# --- command line -------------------------------------------------------------------------------


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add commands to the ``videorl`` command line.

    ``cli`` is the root :class:`click.Group`; add commands with ``@cli.command()`` or
    ``cli.add_command(...)``. Keep heavy imports (torch, vllm) inside the command bodies so that
    ``videorl --help`` stays fast.
    """
