"""The executor: turns a claimed job into images. Knows nothing of chat."""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("genbot")  # one source: pyproject.toml
except PackageNotFoundError:  # run from a checkout that was never installed
    VERSION = "0+unknown"
