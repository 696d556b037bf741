"""Example third-party videorl plugin: the GMPO policy loss."""
