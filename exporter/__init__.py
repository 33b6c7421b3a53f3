"""The node exporter: NVML sampling, attribution, rendering and serving."""

__version__ = "0.1.0"
