"""A real node in the test bench: the kubelet built from k8s.io/kubernetes
at the control plane's version, Debian's containerd and runc, joined to the real control
plane (tests/fakes/real_node.py).

- The Node registers and becomes Ready on this cgroup-v1, non-systemd machine kind.
- Pods with the local image (loaded from a docker-archive, `imagePullPolicy: Never`) run:
  one hostNetwork, one in a network namespace of its own (the loopback-only CNI network).
- The kubelet serves the pod-resources socket under its --root-dir, and its List names both.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from control_plane import run_control_plane
from real_binaries import real_components
from real_node import run_node

pytestmark = [pytest.mark.k8s, pytest.mark.node]


def test_node_ready_and_pods_run(tmp_path: Path) -> None:
    with run_control_plane(tmp_path / "plane") as plane, run_node(plane, tmp_path / "node") as node:
        found = node.node()
        assert found["status"]["nodeInfo"]["kubeletVersion"] == real_components.K8S
        assert found["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        node.pod("on-host", hostNetwork=True)
        node.pod("own-netns")
        for name in ("on-host", "own-netns"):
            pod = node.wait_pod_phase(name, "Running")
            (status,) = pod["status"]["containerStatuses"]
            assert status["ready"] and "running" in status["state"], status
            assert status["image"].endswith("kge.local/pause:1")
        assert node.pod_resources_socket.is_socket()
        listed = node.pod_resources().pod_resources
        assert {("default", "on-host"), ("default", "own-netns")} <= {
            (p.namespace, p.name) for p in listed
        }
