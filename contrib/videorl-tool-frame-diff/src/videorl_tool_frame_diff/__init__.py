"""Example third-party videorl plugin: the ``frame_diff`` tool."""
