"""The commands of the ``videorl`` command line that ship with core (one module per command group)."""
