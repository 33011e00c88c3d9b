"""The version of compileiq (pyproject.toml's project.version)."""

__version__ = "0.1.0"
