"""The kubelet pod-resources API client: which container holds which device.

`client.py` talks to the kubelet; `v1/` holds our own copy of the kubelet's .proto and the
stubs generated from it (`make proto`). The defaults live on this face so that `--help` and
the manifest generator can read them without loading gRPC.
"""

from typing import Final

DEFAULT_SOCKET: Final = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_RESOURCE_PATTERNS: Final = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
