"""draxr: schedules extended-resource requests (``example.com/gpu: 2``) onto DRA devices (KEP-5004)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("draxr")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"
