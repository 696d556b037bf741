"""Training on Ray: one controller, worker groups placed with placement groups (``videorl train --ray``).

- :mod:`~videorl.cluster.wire`: what crosses a process boundary (sample ids, token ids, numbers; JSON);
- :mod:`~videorl.cluster.worker`: the worker process, hosting the actor, rollout, reference or reward role;
- :mod:`~videorl.cluster.runtime`: starting Ray, placing and starting the worker groups, calling them;
- :mod:`~videorl.cluster.controller`: the controller's GRPO loop over the worker groups.
"""
