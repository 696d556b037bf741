"""Starting Ray, placing the worker groups with placement groups, and calling them.

Placement (``ray.placement``):

- ``colocated``: one placement group of ``actor_workers`` bundles; each bundle holds one worker with
  the ``actor`` and ``rollout`` roles (and ``reference`` when the KL penalty is on), sharing its devices;
- ``split``: a placement group each for the actor workers, the rollout workers and (KL on) the
  reference workers, each worker with devices of its own.

Reward workers (CPU only) get a placement group of their own in both, and so do the benchmark
workers (``ray.benchmark_workers``: a rollout engine each, answering ``trainer.benchmarks`` passes
beside training, :mod:`videorl.cluster.benchmark_group`). Every call goes through
:meth:`Cluster.call`, which turns a worker's death or error into a :class:`WorkerFailure` naming the
worker, its process, the stage and the step.

Every worker loads the plugins the controller loaded: the installed distributions (less the disabled
ones) and the modules without one (``--plugin``, ``plugins:``), sent as name and file
(:func:`plugin_modules`, :func:`load_worker_plugins`), so a worker on another node or in another
directory finds them.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.cluster.groups import ActorGroups
from videorl.errors import ConfigError, VideorlError
from videorl.plugins import load_plugins
from videorl.runs.plugins import import_plugin

if TYPE_CHECKING:
    from types import ModuleType

    from videorl.config import RayConfig, TrainConfig
    from videorl.plugins import Plugins

log = logging.getLogger("videorl.cluster")

FAILURE_GRACE_S = 5.0  # after one call fails, how long to wait for the others (a peer's death explains it)


class WorkerFailure(VideorlError):
    """A worker died or raised; ``worker`` names it, ``died`` says whether its process is gone."""

    def __init__(
        self, worker: WorkerHandle, stage: str, step: int, cause: BaseException, *, died: bool
    ) -> None:
        where = f"{worker.name} ({'+'.join(worker.roles)}; pid {worker.pid} on {worker.node})"
        when = f"during {stage} of step {step}" if step else f"during {stage}"
        if died:
            text = f"worker {where} died {when}: {_reason(cause)}"
        else:
            text = f"worker {where} failed {when}: {_reason(cause)}"
        super().__init__(text)
        self.worker, self.stage, self.step, self.died = worker, stage, step, died


def _reason(exc: BaseException) -> str:
    """The error a worker raised (not Ray's wrapper and traceback), or why Ray lost the worker."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and not isinstance(exc, _actor_error_types()):
        return f"{type(cause).__name__}: {cause}"
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if _failed_to_start(exc):
        return lines[-1]  # the exception its __init__ raised, after Ray's traceback
    # Ray's summary, then the system's reason (e.g. "... its worker process has died ...") without the ids
    return " ".join([lines[0], *(line for line in lines[1:] if ":" not in line.split(" ")[0])])


def _failed_to_start(exc: BaseException) -> bool:
    """A worker whose ``__init__`` raised (Ray reports it as a dead actor)."""
    return isinstance(exc, _actor_error_types()) and bool(getattr(exc, "actor_init_failed", False))


def _actor_error_types() -> tuple[type[BaseException], ...]:
    from ray.exceptions import RayActorError

    return (RayActorError,)


@dataclass
class WorkerHandle:
    """A started worker: its name (``actor-0``, ``rollout-1``, ...), roles, Ray handle and process."""

    name: str
    roles: list[str]
    handle: Any
    pid: int = 0
    node: str = "?"
    port: int = 0
    gpus: list[Any] = field(default_factory=list)


def start_ray(cfg: RayConfig, address: str | None, cpus_needed: float) -> bool:
    """Join the cluster at ``address`` (or ``ray.address``), or start a local runtime; True when started.

    A local runtime is started with its defaults set explicitly: Ray's dashboard off unless
    ``ray.dashboard`` (and then on 127.0.0.1 only), token authentication as ``ray.auth`` says
    (``RAY_AUTH_MODE``), this node's address for everything Ray starts, and enough logical CPUs for
    the workers' bundles. Joining a cluster with ``ray.auth: token``, the controller presents this
    machine's token (:func:`auth_token_source`); where there is none it joins without one, which
    only a cluster started without authentication accepts (``ray start --head`` on a machine with
    no token), and says so. A refused connection is a :class:`ConfigError` saying what to copy.
    """
    address = address or cfg.address
    if address:
        return _join(cfg, address)
    if cfg.auth == "token":
        # Ray's own default for a new local runtime: it turns token auth on and writes a token under
        # ~/.ray when there is none (setting RAY_AUTH_MODE=token ourselves would skip that step).
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        _set_auth_mode("disabled")
    import ray

    if ray.is_initialized():
        return False
    _init_local(
        address="local",  # a new runtime, even where `ray start` left a cluster (Ray would join that one)
        num_cpus=max(os.cpu_count() or 1, int(cpus_needed + 0.999)),
        include_dashboard=cfg.dashboard,
        dashboard_host="127.0.0.1",
        namespace="videorl",
        log_to_driver=True,
        logging_level=logging.WARNING,
        _node_ip_address="127.0.0.1",
    )
    if os.environ.get("RAY_AUTH_MODE", "disabled") != cfg.auth:
        ray.shutdown()
        raise ConfigError(
            f"ray.auth: asked for {cfg.auth!r}, but Ray started with "
            f"RAY_AUTH_MODE={os.environ.get('RAY_AUTH_MODE')}"
        )
    return True


def _init_local(**options: Any) -> None:
    """``ray.init(**options)`` for a new local runtime, started once more if its GCS never reported
    its port; a failed start is shut down (its half-started node, left registered in this process,
    would break every later start here).

    Ray waits 30 s for that port; on a loaded machine (a shared login node, a CI host running other
    jobs) a first start can take longer, so the wait is 180 s unless the user set
    ``RAY_gcs_server_port_wait_time_s`` — for this start only: Ray also reads the variable as the
    number of one-second retries of a connection, and processes started from here inherit it.
    """
    import ray

    name = "RAY_gcs_server_port_wait_time_s"
    ours = name not in os.environ
    if ours:
        os.environ[name] = "180"
    try:
        for attempt in (1, 2):
            try:
                ray.init(**options)
                return
            except RuntimeError as exc:
                ray.shutdown()
                if attempt == 2 or "Timed out waiting for file" not in str(exc):
                    raise
                log.warning("Ray's local runtime did not start (%s); starting it once more", exc)
    finally:
        if ours:
            os.environ.pop(name, None)


def auth_token_source() -> str | None:
    """Where Ray finds this machine's cluster token (the places Ray reads, in its order), or None."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return f"RAY_AUTH_TOKEN_PATH={path}" if Path(path).expanduser().is_file() else None
    default = Path.home() / ".ray" / "auth_token"
    return str(default) if default.is_file() else None


def _join(cfg: RayConfig, address: str) -> bool:
    """Connect this process to the cluster at ``address`` (see :func:`start_ray`); always False."""
    token = auth_token_source() if cfg.auth == "token" else None
    _set_auth_mode("token" if token else "disabled")
    import ray

    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, namespace="videorl", log_to_driver=True, logging_level=logging.WARNING)
    except ConnectionError as exc:
        if cfg.auth == "disabled":
            auth = (
                "with ray.auth: disabled no token is presented; a cluster with token authentication needs "
                "ray.auth: token and its token on this machine"
            )
        elif token:
            auth = (
                f"this machine presented the token in {token}: if the cluster uses another one, copy the "
                "output of `ray get-auth-token` on the head node there"
            )
        else:
            auth = (
                "this machine has no Ray token (none in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
                f"{Path.home() / '.ray' / 'auth_token'}): if the cluster uses token authentication, copy the "
                "head node's ~/.ray/auth_token to that path here, or set RAY_AUTH_TOKEN to the output of "
                "`ray get-auth-token` on the head node"
            )
        raise ConfigError(
            f"cannot join the Ray cluster at {address} ({exc}): is `ray start --head` running there? {auth}"
        ) from None
    if cfg.auth == "token" and not token:
        log.warning(
            "joined the Ray cluster at %s without a token: it runs without authentication, so anyone who "
            "can reach its port can run code on it (docs/multi-node.md shows how to start it with a token)",
            address,
        )
    return False


def _set_auth_mode(mode: str) -> None:
    """``RAY_AUTH_MODE`` for this process and the ones it starts; Ray reads it when first imported,
    so an already imported Ray is told to read it again."""
    import sys

    os.environ["RAY_AUTH_MODE"] = mode
    if "ray" in sys.modules:
        # Ray keeps its settings in a C++ singleton
        from ray._raylet import Config  # type: ignore[attr-defined]

        Config.initialize("")


def plugin_modules(plugins: Plugins) -> list[list[str | None]]:
    """``[module, file]`` of every plugin module ``plugins`` loaded without a distribution
    (``--plugin``, ``plugins:``): what the workers load besides the installed plugins."""
    out: list[list[str | None]] = []
    for info in plugins.infos.values():
        if info.builtin or info.version is not None or info.status != "ok" or info.name != info.module:
            continue  # a distribution's plugin (every worker discovers those itself), or one that failed
        file = getattr(sys.modules.get(info.module), "__file__", None)
        out.append([info.module, str(Path(file).resolve()) if file else None])
    return out


def load_worker_plugins(
    modules: Sequence[Sequence[str | None]], *, disable: Sequence[str], strict: bool
) -> Plugins:
    """A worker's plugins: the installed ones less ``disable``, and the controller's ``modules``
    (:func:`plugin_modules`)."""

    return load_plugins(disable=disable, extra=[_import_module(str(m), f) for m, f in modules], strict=strict)


def _import_module(name: str, file: str | None) -> ModuleType:
    """Plugin module ``name`` as the controller has it: a single ``.py`` file from that file (under the
    name it was loaded as), else by import path, with its source root put on ``sys.path`` when this
    process cannot import it otherwise (the controller's working directory, say)."""

    path = Path(file) if file else None
    if path is not None and "." not in name and path.suffix == ".py" and path.name != "__init__.py":
        return import_plugin(str(path), path.parent)
    try:
        return importlib.import_module(name)
    except ImportError:
        if path is None:
            raise
    package = path.parent if path.name == "__init__.py" else path
    root = package.parents[name.count(".")]
    if not path.is_file():
        raise ConfigError(
            f"plugin module {name!r}: {path}, where the controller loaded it from, is not on this worker's "
            "node: install the plugin there, or put it at the same path"
        )
    sys.path.insert(0, str(root))
    return importlib.import_module(name)


def cpus_needed(config: TrainConfig) -> float:
    """Logical CPUs the placement groups of ``config`` reserve (a local runtime gets at least these)."""
    r = config.ray
    return r.cpus_per_worker * sum(count for _, _, count, _ in _groups(config))


def _groups(config: TrainConfig) -> list[tuple[str, list[str], int, str]]:
    """(group name, roles, worker count, device key) of each worker group of ``config``."""
    # with LoRA the actor is its own reference (adapters off): no reference copy, no reference workers
    r, kl = config.ray, config.algorithm.use_kl_loss and not config.actor.lora.enabled
    shares = ActorGroups.of(config).count  # a data group's share goes to one rollout/reference worker
    if r.placement == "colocated":
        groups = [("actor", ["actor", "rollout", *(["reference"] if kl else [])], r.actor_workers, "gpus")]
    else:
        groups = [
            ("actor", ["actor"], r.actor_workers, "gpus"),
            ("rollout", ["rollout"], r.rollout_workers or shares, "rollout_gpus"),
        ]
        if kl:
            groups.append(("reference", ["reference"], r.reference_workers or shares, "gpus"))
    if r.benchmark_workers and config.trainer.benchmarks:  # an engine each, as a split rollout worker
        groups.append(("benchmark", ["benchmark"], r.benchmark_workers, "benchmark_gpus"))
    groups.append(("reward", ["reward"], r.reward_workers, "none"))
    return groups


class Cluster:
    """The worker groups of one run: ``actor``, ``rollout``, ``reference``, ``reward`` (a colocated
    run's rollout and reference groups are its actor workers)."""

    def __init__(self, config: TrainConfig, plugins: Plugins) -> None:
        """``plugins``: the controller's, which every worker loads too."""
        self.config = config
        self.plugins = {
            "disable": [name for name, info in plugins.infos.items() if info.status == "disabled"],
            "modules": plugin_modules(plugins),
            "strict": plugins.strict,
        }
        self.groups: dict[str, list[WorkerHandle]] = {}
        self._placement_groups: list[Any] = []

    @property
    def actors(self) -> list[WorkerHandle]:
        return self.groups["actor"]

    @property
    def rollouts(self) -> list[WorkerHandle]:
        return self.groups.get("rollout") or self.groups["actor"]

    @property
    def references(self) -> list[WorkerHandle]:
        return self.groups.get("reference", [])

    @property
    def benchmarkers(self) -> list[WorkerHandle]:
        """The benchmark workers (``ray.benchmark_workers``): an engine each, for passes beside training."""
        return self.groups.get("benchmark", [])

    @property
    def rewards(self) -> list[WorkerHandle]:
        return self.groups["reward"]

    @property
    def colocated(self) -> bool:
        return self.config.ray.placement == "colocated"

    def start(self) -> None:
        """Reserve the placement groups, start every worker in its bundle, then build the models (the
        actor ranks meeting at actor-0's address)."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from videorl.cluster.worker import Worker
        from videorl.config import config_to_dict

        r = self.config.ray
        has_gpus = ray.cluster_resources().get("GPU", 0) > 0
        gpus = r.gpus_per_worker if r.gpus_per_worker is not None else (1.0 if has_gpus else 0.0)
        rollout_gpus = r.rollout_gpus_per_worker if r.rollout_gpus_per_worker is not None else gpus
        devices = {
            "gpus": gpus,
            "rollout_gpus": rollout_gpus,
            "benchmark_gpus": (  # an engine each: as a split rollout worker's, or a whole TP group's
                r.benchmark_gpus_per_worker
                if r.benchmark_gpus_per_worker is not None
                else r.rollout_gpus_per_worker
                if r.rollout_gpus_per_worker is not None
                else gpus * int(self.config.rollout.engine_options.get("tensor_parallel_size", 1))
            ),
            "none": 0.0,
        }
        remote = ray.remote(Worker)
        payload = config_to_dict(self.config)
        for group, roles, count, device_key in _groups(self.config):
            bundle = {
                "CPU": r.cpus_per_worker,
                **({"GPU": devices[device_key]} if devices[device_key] else {}),
            }
            pg = placement_group(
                [dict(bundle) for _ in range(count)], strategy="PACK", name=f"videorl-{group}"
            )
            self._placement_groups.append(pg)
            try:
                ray.get(pg.ready(), timeout=r.worker_start_timeout)
            except ray.exceptions.GetTimeoutError:
                raise ConfigError(
                    f"ray: {count} {group} worker(s) of {bundle} each could not be placed within "
                    f"{r.worker_start_timeout:.0f} s; the cluster has {ray.cluster_resources()}. Lower "
                    "ray.*_workers or ray.gpus_per_worker, or add nodes."
                ) from None
            handles = []
            for i in range(count):
                options = dict(
                    num_cpus=r.cpus_per_worker,
                    num_gpus=devices[device_key],
                    max_restarts=0,
                    max_task_retries=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
                )
                rank, world = (i, count) if group == "actor" else (i, 1)
                handle = remote.options(**options).remote(payload, roles, rank, world, self.plugins)
                handles.append(WorkerHandle(f"{group}-{i}", roles, handle))
            self.groups[group] = handles
        everyone = [w for ws in self.groups.values() for w in ws]
        started = self.call(
            "worker start-up", 0, [(w, "describe", ()) for w in everyone], timeout=r.worker_start_timeout
        )
        for w, info in zip(everyone, started):
            w.pid, w.node, w.port, w.gpus = info["pid"], info["node"], info["port"], info["gpus"]
        master = self.actors[0]
        # The actor ranks meet on the loopback when they share a node, else at actor-0's node address.
        addr = "127.0.0.1" if all(w.node == master.node for w in self.actors) else master.node
        self.call(
            "model set-up",
            0,
            [(w, "setup", (addr, master.port)) for w in everyone],
            timeout=r.worker_start_timeout,
        )

    def workers(self) -> list[dict[str, Any]]:
        """Name, roles, pid, node and devices of every worker (written to the run directory)."""
        return [
            {"name": w.name, "roles": w.roles, "pid": w.pid, "node": w.node, "gpus": w.gpus}
            for ws in self.groups.values()
            for w in ws
        ]

    def call(
        self,
        stage: str,
        step: int,
        calls: Sequence[tuple[WorkerHandle, str, tuple[Any, ...]]],
        timeout: float | None = None,
    ) -> list[Any]:
        """Run ``worker.method(*args)`` for each call at once; their results in order.

        When one fails, the others get :data:`FAILURE_GRACE_S` to finish, and a worker whose process
        died is named before one that merely failed (an FSDP rank fails when its peer dies). With
        ``timeout``, calls still running after that many seconds are an error naming their workers."""
        import ray

        refs = [getattr(w.handle, method).remote(*args) for w, method, args in calls]
        owner = {ref: w for ref, (w, _, _) in zip(refs, calls)}
        results: dict[Any, Any] = {}
        failures: list[tuple[WorkerHandle, BaseException]] = []
        pending, deadline = list(refs), None
        give_up = None if timeout is None else time.monotonic() + timeout
        while pending:
            ends = [t for t in (deadline, give_up) if t is not None]
            wait_s = max(0.0, min(ends) - time.monotonic()) if ends else None
            ready, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
            if not ready:
                if deadline is None and give_up is not None and time.monotonic() >= give_up:
                    late = ", ".join(owner[ref].name for ref in pending)
                    raise VideorlError(
                        f"{stage}: worker(s) {late} did not answer within {timeout:.0f} s "
                        "(ray.worker_start_timeout); see their logs under /tmp/ray/session_latest/logs"
                    )
                break
            for ref in ready:
                try:
                    results[ref] = ray.get(ref)
                except Exception as exc:  # every failure is reported below, named
                    failures.append((owner[ref], exc))
                    deadline = deadline or time.monotonic() + FAILURE_GRACE_S
        if failures:
            died = [
                (w, e) for w, e in failures if isinstance(e, _actor_error_types()) and not _failed_to_start(e)
            ]
            worker, error = (died or failures)[0]
            raise WorkerFailure(worker, stage, step, error, died=bool(died))
        return [results[ref] for ref in refs]

    def shutdown(self, *, clean: bool) -> None:
        """Close the engines (their weight folders) and process groups, then end every worker and
        placement group. After a failure a worker stuck in a collective gets 10 s to close."""
        import ray

        everyone = [w for ws in self.groups.values() for w in ws]
        if everyone:
            with contextlib.suppress(Exception):  # the workers are killed next anyway
                ray.wait(
                    [w.handle.close.remote() for w in everyone],
                    num_returns=len(everyone),
                    timeout=60 if clean else 10,
                )
        for w in everyone:
            ray.kill(w.handle, no_restart=True)
        for pg in self._placement_groups:
            ray.util.remove_placement_group(pg)
        self.groups, self._placement_groups = {}, []
