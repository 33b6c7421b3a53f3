"""Defaults of the pod-resources client, importable without loading gRPC (for --help)."""

from typing import Final

DEFAULT_SOCKET: Final = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_RESOURCE_PATTERNS: Final = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
