"""Whole-program limits through the kernel's control groups (v2, or v1's memory + pids +
cpuacct hierarchies). Stdlib only: the sandbox server imports it.

A ``Cgroups`` is opened by the server *before* it pivots into its minimal root (where /sys is
not visible): it holds directory fds of one base group per hierarchy, created under the server's
own group, and does everything else relative to them. Each program gets a group of its own
under that base: all its processes (and the shared memory, memfds and tmpfs pages they touch)
are charged there, its CPU time is counted there even for processes that already exited, and
the kernel refuses forks past ``pids.max`` and reclaims or OOM-kills past the memory limit.
"""

from __future__ import annotations

import os
import time


class CgroupUnavailable(OSError):
    """No usable control groups here (the message says why)."""


def base_name() -> str:
    """A server's base group name: never the pid alone. A base group a killed server left
    behind keeps its name, and a later server given the same pid found it taken (EEXIST) and
    ran without control groups: memory hoarded in memfds and shared memory went unbounded."""
    return f"rlxf-sandbox-{os.getpid()}-{os.urandom(4).hex()}"


def _own_groups() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's group path, from /proc/self/cgroup."""
    groups = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                groups[name] = path
    return groups


def _mounts() -> dict[str, str]:
    """Controller (or "" for the v2 hierarchy) -> mount point, from /proc/self/mountinfo."""
    found: dict[str, str] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            point = left.split()[4]
            fstype, _, options = right.split()[:3]
            if fstype == "cgroup2":
                found.setdefault("", point)
            elif fstype == "cgroup":
                for opt in options.split(","):
                    found.setdefault(opt, point)
    return found


class Cgroups:
    """Base groups of one sandbox server; ``kind`` is ``"v2"`` or ``"v1"``."""

    V1 = ("memory", "pids", "cpuacct")

    def __init__(self, name: str):
        mounts, own = _mounts(), _own_groups()
        self.name = name
        self.fds: dict[str, int] = {}
        self.parents: list[int] = []  # fds of the groups our base groups live in, to remove them
        self.paths: list[str] = []  # host paths of the base groups, for cleanup by the host
        errors = []
        try:
            self._open_v2(mounts, own)
            self.kind = "v2"
            return
        except OSError as e:
            errors.append(f"v2: {e}")
            self._undo()
        try:
            self._open_v1(mounts, own)
            self.kind = "v1"
        except OSError as e:
            errors.append(f"v1: {e}")
            self._undo()
            raise CgroupUnavailable("; ".join(errors)) from None

    def _undo(self) -> None:
        """Remove the base groups a failed open made (nothing runs in them yet), so none is left
        behind under a name a later server could be given."""
        for path in reversed(self.paths):
            try:
                os.rmdir(path)
            except OSError:
                pass
        self.paths.clear()
        self.close()

    def _open_v2(self, mounts: dict[str, str], own: dict[str, str]) -> None:
        if "" not in mounts or "" not in own:
            raise OSError("no cgroup2 hierarchy mounted")
        parent = mounts[""] + own[""].rstrip("/")
        with open(parent + "/cgroup.controllers") as f:
            available = f.read().split()
        missing = [c for c in ("memory", "pids", "cpu") if c not in available]
        if missing:
            raise OSError(f"controllers {', '.join(missing)} not delegated to {parent}")
        # Enabling controllers for children fails (EBUSY) while the parent itself holds
        # processes, unless it is the root of the hierarchy: a systemd unit needs Delegate=yes
        # and its processes in a leaf group for this to work.
        with open(parent + "/cgroup.subtree_control", "w") as f:
            f.write("+memory +pids +cpu")
        base = f"{parent}/{self.name}"
        os.mkdir(base)
        self.paths.append(base)
        self.parents.append(os.open(parent, os.O_RDONLY | os.O_DIRECTORY))
        with open(base + "/cgroup.subtree_control", "w") as f:
            f.write("+memory +pids +cpu")
        self.fds["v2"] = os.open(base, os.O_RDONLY | os.O_DIRECTORY)

    def _open_v1(self, mounts: dict[str, str], own: dict[str, str]) -> None:
        missing = [c for c in self.V1 if c not in mounts]
        if missing:
            raise OSError(f"no cgroup v1 hierarchy for {', '.join(missing)}")
        for controller in self.V1:
            parent = mounts[controller] + own.get(controller, "/").rstrip("/")
            base = parent + "/" + self.name
            os.mkdir(base)
            self.paths.append(base)
            self.parents.append(os.open(parent, os.O_RDONLY | os.O_DIRECTORY))
            self.fds[controller] = os.open(base, os.O_RDONLY | os.O_DIRECTORY)

    # -- per-program groups ---------------------------------------------------------------------

    def create(self, group: str, memory_bytes: int, max_tasks: int) -> None:
        """A group for one program, with its memory (swap included) and task limits."""
        for fd in self.fds.values():
            os.mkdir(group, dir_fd=fd)
        if self.kind == "v2":
            self._write("v2", f"{group}/memory.max", memory_bytes)
            self._write("v2", f"{group}/memory.swap.max", 0, optional=True)
            self._write("v2", f"{group}/pids.max", max_tasks)
        else:
            self._write("memory", f"{group}/memory.limit_in_bytes", memory_bytes)
            self._write("memory", f"{group}/memory.memsw.limit_in_bytes", memory_bytes, optional=True)
            self._write("pids", f"{group}/pids.max", max_tasks)

    def attach_self(self, group: str) -> None:
        for key in self.fds:
            self._write(key, f"{group}/cgroup.procs", 0)  # 0: the writing process

    def cpu_s(self, group: str) -> float:
        """CPU time (user + system) of every process that ever ran in the group."""
        if self.kind == "v2":
            return self._field("v2", f"{group}/cpu.stat", "usage_usec") / 1e6
        return int(self._read("cpuacct", f"{group}/cpuacct.usage")) / 1e9

    def oom_kills(self, group: str) -> int:
        if self.kind == "v2":
            return self._field("v2", f"{group}/memory.events", "oom_kill")
        return self._field("memory", f"{group}/memory.oom_control", "oom_kill")

    def peak_bytes(self, group: str) -> int:
        try:
            if self.kind == "v2":
                return int(self._read("v2", f"{group}/memory.peak"))  # Linux >= 5.19
            return int(self._read("memory", f"{group}/memory.max_usage_in_bytes"))
        except OSError:
            return 0

    def kill(self, group: str) -> None:
        """SIGKILL every process in the group (pids as this process's PID namespace sees them)."""
        key = "v2" if self.kind == "v2" else "memory"
        for _ in range(100):
            try:
                pids = [int(p) for p in self._read(key, f"{group}/cgroup.procs").split()]
            except OSError:
                return
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            time.sleep(0.001)

    def remove(self, group: str) -> None:
        """Remove an emptied group (its processes must be dead; they may still be exiting)."""
        for fd in self.fds.values():
            for _ in range(200):
                try:
                    os.rmdir(group, dir_fd=fd)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the last killed task is still being torn down
                    time.sleep(0.001)

    def close(self) -> None:
        for fd in [*self.fds.values(), *self.parents]:
            os.close(fd)
        self.fds.clear()
        self.parents.clear()

    def remove_base(self) -> None:
        """Remove this server's (emptied) base groups; the server calls it on its way out."""
        for parent in self.parents:
            try:
                os.rmdir(self.name, dir_fd=parent)
            except OSError:  # still busy: the host removes it when it reaps the server
                pass
        self.close()

    @property
    def description(self) -> str:
        return (f"cgroup {self.kind}: memory (all processes, shared memory and memfds), CPU time "
                "(exited processes included) and process count per program, enforced by the kernel")

    # -- file access relative to the base fds ---------------------------------------------------

    def _write(self, key: str, path: str, value: int, optional: bool = False) -> None:
        try:
            fd = os.open(path, os.O_WRONLY, dir_fd=self.fds[key])
        except FileNotFoundError:
            if optional:
                return
            raise
        try:
            os.write(fd, str(value).encode())
        finally:
            os.close(fd)

    def _read(self, key: str, path: str) -> str:
        fd = os.open(path, os.O_RDONLY, dir_fd=self.fds[key])
        try:
            return os.read(fd, 1 << 16).decode()
        finally:
            os.close(fd)

    def _field(self, key: str, path: str, name: str) -> int:
        for line in self._read(key, path).splitlines():
            k, _, v = line.partition(" ")
            if k == name:
                return int(v)
        return 0
