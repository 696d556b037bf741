"""Example third-party videorl plugin: the ``recorder`` rollout engine."""
