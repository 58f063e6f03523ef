"""The TOML reader: the standard library's ``tomllib`` (Python 3.11+), else ``tomli`` (3.10).

``load(f)`` reads a binary file object; ``TOMLDecodeError`` is what a malformed file raises.
Every TOML read in nexus goes through here (run.toml, cluster files).
"""

try:
    from tomllib import TOMLDecodeError, load
except ModuleNotFoundError:  # Python 3.10: the same parser as a package (a dependency there)
    from tomli import TOMLDecodeError, load

__all__ = ["TOMLDecodeError", "load"]
