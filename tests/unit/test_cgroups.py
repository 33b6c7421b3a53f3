"""Process → container, read from a temporary procfs tree holding real-world cgroup files."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.kubernetes.cgroups import (
    MAX_BYTES,
    ContainerRef,
    container_of,
    containers_of,
)

UID = "7f3c2a91-5b4e-4d8a-9c61-0e2f4b7d8a13"
UID_US = UID.replace("-", "_")
CID = "3b9f1e0c7a4d2f8e6b5a1c9d0e7f3a2b4c6d8e0f1a3b5c7d9e2f4a6b8c0d1e3f"
OTHER_CID = "a1c2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2"
STATIC_UID = "e5d41c9b7a0f3e2d6c8b1a4f9e0d7c3b"  # a static pod: the 32-hex config hash

V1_HOST = """\
12:pids:/system.slice/containerd.service
11:memory:/system.slice/containerd.service
1:name=systemd:/system.slice/containerd.service
0::/system.slice/containerd.service
"""


def write_procfs(root: Path, files: dict[int, str | bytes]) -> Path:
    for pid, content in files.items():
        (root / str(pid)).mkdir(parents=True)
        data = content.encode() if isinstance(content, str) else content
        (root / str(pid) / "cgroup").write_bytes(data)
    return root


def ref_for(tmp_path: Path, content: str | bytes) -> ContainerRef | None:
    return container_of(4242, write_procfs(tmp_path / "proc", {4242: content}))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        # systemd driver, containerd, burstable
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice/"
            f"cri-containerd-{CID}.scope",
            ContainerRef(UID, CID),
        ),
        # besteffort, CRI-O
        (
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_US}.slice/"
            f"crio-{CID}.scope",
            ContainerRef(UID, CID),
        ),
        # guaranteed: the pod slice sits directly under kubepods.slice; cri-dockerd
        (
            f"/kubepods.slice/kubepods-pod{UID_US}.slice/docker-{CID}.scope",
            ContainerRef(UID, CID),
        ),
        # CRI-O's conmon: the pod, not a container
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice/"
            f"crio-conmon-{CID}.scope",
            ContainerRef(UID, None),
        ),
        # a process directly in the pod slice
        (f"/kubepods.slice/kubepods-pod{UID_US}.slice", ContainerRef(UID, None)),
        # a sub-cgroup made inside the container (systemd in a container, nsdelegate)
        (
            f"/kubepods.slice/kubepods-pod{UID_US}.slice/cri-containerd-{CID}.scope/init.scope",
            ContainerRef(UID, CID),
        ),
        # cgroupfs driver
        (f"/kubepods/burstable/pod{UID}/{CID}", ContainerRef(UID, CID)),
        (f"/kubepods/besteffort/pod{UID}/{CID}", ContainerRef(UID, CID)),
        (f"/kubepods/pod{UID}/{CID}", ContainerRef(UID, CID)),
        (f"/kubepods/burstable/pod{UID}/crio-{CID}", ContainerRef(UID, CID)),
        (f"/kubepods/burstable/pod{UID}/crio-conmon-{CID}", ContainerRef(UID, None)),
        # kind / a kubelet in a container, systemd and cgroupfs
        (
            f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
            f"kubelet-kubepods-besteffort-pod{UID_US}.slice/cri-containerd-{CID}.scope",
            ContainerRef(UID, CID),
        ),
        (f"/kubelet/kubepods/burstable/pod{UID}/{CID}", ContainerRef(UID, CID)),
        (
            f"/docker/{OTHER_CID}/kubelet/kubepods/pod{UID}/{CID}",
            ContainerRef(UID, CID),
        ),
        # static pod: the uid is the 32-hex config hash, kept as is
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/"
            f"cri-containerd-{CID}.scope",
            ContainerRef(STATIC_UID, CID),
        ),
        # relative to the reader's cgroup namespace (the exporter's own container on cgroup v2)
        (
            f"/../../../kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice/"
            f"cri-containerd-{CID}.scope",
            ContainerRef(UID, CID),
        ),
        (f"/../../../burstable/pod{UID}/{CID}", ContainerRef(UID, CID)),
        (f"/../../pod{UID}/{CID}", ContainerRef(UID, CID)),
        # the target shares the exporter's pod: the pod level is hidden, the container id is not
        (f"/../cri-containerd-{CID}.scope", ContainerRef(None, CID)),
        (f"/../{CID}", ContainerRef(None, CID)),
    ],
)
def test_cgroup_v2_paths(tmp_path: Path, path: str, expected: ContainerRef) -> None:
    assert ref_for(tmp_path, f"0::{path}\n") == expected


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/system.slice/containerd.service",
        "/user.slice/user-1000.slice/session-3.scope",
        "/init.scope",
        "/kubepods.slice",
        "/kubepods.slice/kubepods-burstable.slice",
        "/kubepods/burstable",
        # a `pod<uid>` component that is not under kubepods is somebody else's naming
        f"/machine.slice/pod{UID}/{CID}",
        # a container id alone, not below `..`, is not a Kubernetes container
        f"/system.slice/docker-{CID}.scope",
        "/../../system.slice/containerd.service",
        # `..` after real components is not a namespace-relative path
        f"/user.slice/../{CID}",
        # a truncated uid or container id
        f"/kubepods.slice/kubepods-pod{UID_US[:20]}.slice/cri-containerd-{CID}.scope",
        f"/kubepods/pod{UID[:-1]}/{CID}",
    ],
)
def test_paths_of_no_pod(tmp_path: Path, path: str) -> None:
    assert ref_for(tmp_path, f"0::{path}\n") is None


def test_truncated_container_id_keeps_the_pod(tmp_path: Path) -> None:
    content = f"0::/kubepods/burstable/pod{UID}/{CID[:40]}\n"
    assert ref_for(tmp_path, content) == ContainerRef(UID, None)


def test_cgroup_v1_prefers_the_kubepods_line(tmp_path: Path) -> None:
    pod_path = (
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice/"
        f"cri-containerd-{CID}.scope"
    )
    content = (
        "13:misc:/\n"
        "12:rdma:/\n"
        f"11:pids:{pod_path}\n"
        f"10:memory:{pod_path}\n"
        "9:hugetlb:/\n"
        f"8:cpu,cpuacct:{pod_path}\n"
        f"7:devices:{pod_path}\n"
        "6:net_cls,net_prio:/\n"
        f"1:name=systemd:{pod_path}\n"
        "0::/\n"
    )
    assert ref_for(tmp_path, content) == ContainerRef(UID, CID)


def test_cgroup_v1_cgroupfs(tmp_path: Path) -> None:
    content = (
        "12:freezer:/\n"
        f"11:memory:/kubepods/burstable/pod{UID}/{CID}\n"
        f"4:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n"
        f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n"
    )
    assert ref_for(tmp_path, content) == ContainerRef(UID, CID)


def test_a_line_with_the_container_wins_over_one_with_the_pod_only(tmp_path: Path) -> None:
    content = f"5:pids:/kubepods/burstable/pod{UID}\n4:memory:/kubepods/burstable/pod{UID}/{CID}\n"
    assert ref_for(tmp_path, content) == ContainerRef(UID, CID)


def test_host_process_v1(tmp_path: Path) -> None:
    assert ref_for(tmp_path, V1_HOST) is None


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\n\n\n",
        os.urandom(4096),
        b"\x00" * 100,
        b"0::",
        b"0:",
        b"garbage without colons\n",
        # truncated mid-line: the uid never completes
        b"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7f3c2a91_5b4e",
        # a hierarchy id that is not a number
        f"x::/kubepods/pod{UID}/{CID}\n".encode(),
        # a relative path without the leading slash is not a cgroup path
        f"0::kubepods/pod{UID}/{CID}\n".encode(),
        "0::/kubepods/pod\u00e9\u00e9/\ufffd\n".encode(),
    ],
)
def test_malformed_files_give_none(tmp_path: Path, content: bytes) -> None:
    assert ref_for(tmp_path, content) is None


def test_valid_line_after_junk_is_still_found(tmp_path: Path) -> None:
    content = b"\xff\xfe\x00junk\n" + f"0::/kubepods/pod{UID}/{CID}\n".encode()
    assert ref_for(tmp_path, content) == ContainerRef(UID, CID)


def test_oversized_file_gives_none(tmp_path: Path) -> None:
    line = f"0::/kubepods/pod{UID}/{CID}\n"
    assert ref_for(tmp_path, line * (MAX_BYTES // len(line) + 2)) is None


def test_endless_file_is_read_no_further_than_the_limit(tmp_path: Path) -> None:
    """A FIFO fed without end stands in for a file that never ends: the read must stop."""
    (tmp_path / "4242").mkdir()
    fifo = tmp_path / "4242" / "cgroup"
    os.mkfifo(fifo)
    written = 0
    chunk = f"0::/kubepods/pod{UID}/{CID}\n".encode() * 64

    def feed() -> None:
        nonlocal written
        try:
            with fifo.open("wb", buffering=0) as pipe:
                while written < 64 * MAX_BYTES:
                    written += pipe.write(chunk)
        except BrokenPipeError:
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    started = time.monotonic()
    assert container_of(4242, tmp_path) is None
    assert time.monotonic() - started < 10
    feeder.join(timeout=10)
    assert not feeder.is_alive()
    # What the writer got into the pipe: what was read plus at most the pipe's buffer.
    assert written < 4 * MAX_BYTES + 2 * 1024 * 1024


def test_missing_pid_and_unreadable_entries(tmp_path: Path) -> None:
    procfs = write_procfs(tmp_path / "proc", {100: f"0::/kubepods/pod{UID}/{CID}\n"})
    assert container_of(101, procfs) is None  # gone (or invisible without hostPID)
    assert container_of(0, procfs) is None
    assert container_of(-1, procfs) is None
    (procfs / "102" / "cgroup").mkdir(parents=True)  # not a file
    assert container_of(102, procfs) is None
    assert container_of(100, tmp_path / "no-such-procfs") is None


def test_containers_of_leaves_out_pids_without_a_container(tmp_path: Path) -> None:
    procfs = write_procfs(
        tmp_path / "proc",
        {
            100: f"0::/kubepods/burstable/pod{UID}/{CID}\n",
            200: V1_HOST,
            300: f"0::/kubepods.slice/kubepods-pod{UID_US}.slice/docker-{OTHER_CID}.scope\n",
        },
    )
    assert containers_of([100, 200, 300, 400], procfs) == {
        100: ContainerRef(UID, CID),
        300: ContainerRef(UID, OTHER_CID),
    }


def test_real_procfs_own_process_does_not_raise() -> None:
    """This test process is usually not in a pod; whatever it is in, reading must not fail."""
    ref = container_of(os.getpid())
    assert ref is None or isinstance(ref, ContainerRef)
