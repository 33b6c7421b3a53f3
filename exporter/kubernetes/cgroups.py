"""Which Kubernetes container a host process belongs to, from `/proc/<pid>/cgroup`.

On a shared (time-sliced / MPS) GPU, NVML names the compute processes by host PID. The kubelet
puts every container in a cgroup whose path carries the pod uid and the container id, so the
cgroup file of a PID ties it to a container; the Kubernetes API then names the pod.

Forms understood (cgroup v2 `0::<path>` and v1 `N:<controllers>:<path>` lines):

- systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
  cri-containerd-<id>.scope` (also `crio-<id>.scope`, `docker-<id>.scope`; besteffort; guaranteed
  pods directly under `kubepods.slice` as `kubepods-pod<uid>.slice`). systemd escapes the uid's
  dashes as underscores; the uid is returned dashed, as the API has it.
- cgroupfs driver: `/kubepods/burstable/pod<uid>/<id>`, `/kubepods/pod<uid>/<id>`.
- nested kubelets (kind, kubelet in a container): any prefix before the kubepods part, e.g.
  `/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod<uid>.slice/...` or
  `/kubelet/kubepods/...`.
- CRI-O's `crio-conmon-<id>.scope` holds conmon, the container's monitor, not the container: it is
  reported as the pod with no container.
- paths relative to the reader's cgroup namespace (`/../../kubepods-besteffort-pod<uid>.slice/…`).
  These are the normal case on cgroup v2, where the exporter's container has its own cgroup
  namespace: the file then shows the target's path relative to the exporter's own cgroup. The
  `..` steps are skipped and the rest is read as usual. What cannot be recovered: when the target
  shares the exporter's pod, the common ancestor is below the pod level, so the path is just
  `/../<id>` and only the container id is known (`pod_uid` None) — still enough to resolve it
  through the API's container statuses. With the cgroupfs driver the `kubepods` component can
  be lost the same way; a `pod<uid>` component after `..` or a QoS class is accepted then.

Anything else (a host process, a kernel thread, an unreadable or malformed file) gives None.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import dropwhile
from pathlib import Path

# Real cgroup files are a few hundred bytes (v2) to a few KiB (v1 with every controller).
MAX_BYTES = 64 * 1024

_HEX64 = r"[0-9a-f]{64}"
# A pod uid as the kubelet writes it: dashed (cgroupfs), underscored (systemd), or a static pod's
# 32-hex config hash.
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"

_SYSTEMD_POD = re.compile(
    rf"^(?:[a-z0-9_]+-)*kubepods(?:-(?:burstable|besteffort|guaranteed))?-pod(?P<uid>{_UID})\.slice$"
)
_CGROUPFS_POD = re.compile(rf"^pod(?P<uid>{_UID})$")
# The components that may precede a cgroupfs `pod<uid>` component.
_CGROUPFS_ANCESTORS = frozenset({"kubepods", "burstable", "besteffort", "guaranteed", ".."})
_CONTAINER = re.compile(
    rf"^(?:(?:cri-containerd|containerd|crio|docker|cri-dockerd)-)?(?P<id>{_HEX64})(?:\.scope)?$"
)


@dataclass(frozen=True)
class ContainerRef:
    """A process's place in Kubernetes: its pod uid (dashed) and bare 64-hex container id.

    Either may be None: `container_id` for a process of the pod but of no container (conmon, or a
    process directly in the pod cgroup), `pod_uid` when a cgroup namespace hid the pod level.
    """

    pod_uid: str | None
    container_id: str | None


def container_of(pid: int, procfs: Path = Path("/proc")) -> ContainerRef | None:
    """The container of `pid`, or None when it is gone, unreadable or not in a Kubernetes pod."""
    if pid <= 0:
        return None
    try:
        with (procfs / str(pid) / "cgroup").open("rb") as file:
            data = file.read(MAX_BYTES + 1)
    except (OSError, ValueError):
        # Gone (ENOENT/ESRCH), no hostPID (ENOENT), denied, or not a regular file.
        return None
    if len(data) > MAX_BYTES:
        return None  # not a cgroup file: never parse a partial one
    return parse_cgroup_file(data.decode("utf-8", errors="replace"))


def containers_of(pids: Iterable[int], procfs: Path = Path("/proc")) -> dict[int, ContainerRef]:
    """`container_of` for each PID; PIDs with no container are left out."""
    found: dict[int, ContainerRef] = {}
    for pid in pids:
        ref = container_of(pid, procfs)
        if ref is not None:
            found[pid] = ref
    return found


def parse_cgroup_file(text: str) -> ContainerRef | None:
    """The best container reference among the file's lines (v1 lists one line per hierarchy).

    A line naming both pod and container wins over one naming only the pod, so a v1 file whose
    hierarchies disagree (a process moved in one controller only) still yields the container.
    """
    best: ContainerRef | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        ref = parse_cgroup_path(parts[2])
        if ref is None:
            continue
        if ref.pod_uid is not None and ref.container_id is not None:
            return ref
        if best is None or (best.pod_uid is None and ref.pod_uid is not None):
            best = ref
    return best


def parse_cgroup_path(path: str) -> ContainerRef | None:
    """The pod uid and container id named by one cgroup path, or None if it names no pod."""
    if not path.startswith("/"):
        return None
    components = [c for c in path.split("/") if c and c != "."]
    for index, component in enumerate(components):
        uid = _pod_uid(component, components[:index])
        if uid is not None:
            return ContainerRef(uid, _container_id(components[index + 1 : index + 2]))
    # `/../<id>`: the pod level lies above our cgroup namespace root (the target shares our pod).
    # Only a container component right after the `..` steps is trusted, and only the id is known.
    ups = len(components) - len(list(dropwhile(lambda c: c == "..", components)))
    if 0 < ups < len(components) and ".." not in components[ups:]:
        container_id = _container_id(components[ups : ups + 1])
        if container_id is not None:
            return ContainerRef(None, container_id)
    return None


def _pod_uid(component: str, ancestors: list[str]) -> str | None:
    match = _SYSTEMD_POD.match(component)
    if match is None:
        match = _CGROUPFS_POD.match(component)
        if match is None or not _CGROUPFS_ANCESTORS.intersection(ancestors):
            return None
    return match["uid"].replace("_", "-")


def _container_id(components: list[str]) -> str | None:
    """The container id of the component after the pod's, if it is a container's cgroup.

    CRI-O's `crio-conmon-<id>.scope` does not match (`conmon-…` is not hex): conmon is not the
    container, so its processes are reported with the pod only.
    """
    match = _CONTAINER.match(components[0]) if components else None
    return match["id"] if match else None
