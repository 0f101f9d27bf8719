"""Where a command's cgroup is made, read from mountinfo and /proc/self/cgroup as the
kinds of host they come from show them (the folders are stand-ins: whether a cgroup can
really be made is core/tests/test_sandbox.py's business, on this host)."""

from __future__ import annotations

from pathlib import Path

from core.sandbox_cgroups import NO_CGROUP_FILESYSTEM, CgroupParent, cgroup_support_detect


def mount(number: int, root: str, point: Path, fstype: str, options: str) -> str:
    return f"{number} 1 0:{number} {root} {point} rw,relatime - {fstype} {fstype} rw,{options}"


def test_hybrid_host_v1_memory_and_pids_beside_an_empty_unified(tmp_path: Path) -> None:
    # This CI host: memory and pids in v1, a cgroup2 at .../unified offering only hugetlb.
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    mountinfo = "\n".join(
        [
            mount(35, "/", tmp_path / "memory", "cgroup", "memory"),
            mount(39, "/", tmp_path / "pids", "cgroup", "pids"),
            mount(41, "/", tmp_path / "unified", "cgroup2", "nsdelegate"),
        ]
    )
    proc_cgroup = "8:pids:/\n4:memory:/process_api/abc\n0::/\n"
    support = cgroup_support_detect(mountinfo=mountinfo, proc_cgroup=proc_cgroup, try_child=False)
    assert support.parent("memory") == CgroupParent(1, tmp_path / "memory" / "process_api" / "abc")
    assert support.parent("pids") == CgroupParent(1, tmp_path / "pids")
    assert support.reasons == {}


def test_v2_under_the_workers_own_cgroup_with_the_controllers_handed_down(tmp_path: Path) -> None:
    own = tmp_path / "system.slice" / "worker.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    mountinfo = mount(30, "/", tmp_path, "cgroup2", "nsdelegate,memory_recursiveprot")
    support = cgroup_support_detect(
        mountinfo=mountinfo, proc_cgroup="0::/system.slice/worker.service\n", try_child=False
    )
    assert support.parent("memory") == CgroupParent(2, own)
    assert support.parent("pids") == CgroupParent(2, own)


def test_v1_mounted_from_below_its_root_and_no_cgroups_at_all(tmp_path: Path) -> None:
    # A container that sees only its own part of the hierarchy, mounted at the top.
    mountinfo = mount(35, "/docker/c0ffee", tmp_path / "memory", "cgroup", "memory")
    support = cgroup_support_detect(
        mountinfo=mountinfo, proc_cgroup="4:memory:/docker/c0ffee/worker\n", try_child=False
    )
    assert support.parent("memory") == CgroupParent(1, tmp_path / "memory" / "worker")
    assert support.parent("pids") is None and support.reasons["pids"] == "no cgroup hierarchy offers pids"
    bare = cgroup_support_detect(mountinfo="", proc_cgroup="0::/\n", try_child=False)
    assert bare.parents == {} and bare.reasons == {"memory": NO_CGROUP_FILESYSTEM, "pids": NO_CGROUP_FILESYSTEM}


def test_v2_beside_the_worker_where_its_own_cgroup_is_a_leaf(tmp_path: Path) -> None:
    # systemd's Delegate=yes with DelegateSubgroup=worker: the worker's processes in a leaf,
    # the delegated cgroup above it hands memory and pids down.
    delegated = tmp_path / "system.slice" / "autocoder-worker.service"
    (delegated / "worker").mkdir(parents=True)
    (delegated / "worker" / "cgroup.controllers").write_text("memory pids\n")
    (delegated / "worker" / "cgroup.subtree_control").mkdir()  # writing it fails, as EBUSY would
    (delegated / "cgroup.subtree_control").write_text("memory pids\n")
    support = cgroup_support_detect(
        mountinfo=mount(30, "/", tmp_path, "cgroup2", "nsdelegate"),
        proc_cgroup="0::/system.slice/autocoder-worker.service/worker\n",
        try_child=False,
    )
    assert support.parent("memory") == CgroupParent(2, delegated)
    assert support.parent("pids") == CgroupParent(2, delegated)
