"""Example third-party videorl plugin: a reward for counting questions."""
