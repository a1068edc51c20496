"""The runner: a fresh interpreter per program that starts one process per test. Stdlib only.

The job's init starts it as ``python -I -S -c <this file> SPEC_FD SOCK_FD`` after dropping every
privilege, so it is a new address space that never held another job's data, the harness's
expected values or the sandbox server's heap. The spec (a marshal memfd written by the init) holds the program and
its tests' *inputs* only. For each test the init sends the test's index over ``SOCK_FD``; the
runner creates the test's stdin/stdout/stderr/result memfds, forks the test process with
``CLONE_PARENT`` -- so the init, not the runner, is its parent: the init waits for it and reads
its exit status and CPU time from the kernel -- and sends the pid and the output memfds back.

The runner makes itself non-dumpable before anything else, so a test process (same uid) can
neither ptrace it nor read its memory through /proc. Untrusted code only ever runs in the test
process, after the fork.

What a test process emits on fd 3 (the result memfd):

- ``call``: the JSON of the function's return value (plain data only: an object of the
  program's own class, whatever its ``__eq__``, is an error);
- ``eval`` (parsed asserts): a JSON list, per expression ``{"value": v}`` or ``{"error": msg}``;
- ``assert`` (asserts that could not be parsed, run here as a fallback): the test's token once
  the assert source ran without raising. A hostile program can fake this one; the trusted side
  says so in the verdict (``unparsed_asserts``).
"""

import _socket
import ctypes
import marshal
import os
import sys

PR_SET_DUMPABLE = 4
CLONE_PARENT, SIGCHLD = 0x00008000, 17
SOL_SOCKET, SCM_RIGHTS = 1, 1
SYS_CLONE = {"x86_64": 56, "aarch64": 220, "arm64": 220, "ppc64le": 120, "s390x": 120}
_libc = ctypes.CDLL(None, use_errno=True)


def main() -> None:
    # Imports are kept to what a start needs (an interpreter start is most of a program's
    # cost); json, traceback and the like are imported by the test process that needs them.
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # first: nothing the tests run may reach us
    spec_fd, sock_fd = int(sys.argv[1]), int(sys.argv[2])
    with open(spec_fd, "rb") as f:
        spec = marshal.loads(f.read())  # written by the job's init, never by a program
    sys.path[:0] = spec["paths"]  # -S skips site.py (its start-up cost); these are its results
    for name in spec["preload"]:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module is the program's problem
            pass
    clone = SYS_CLONE[os.uname().machine]
    sock = _socket.socket(fileno=sock_fd)
    sock.send(b"ready")
    while True:
        msg = sock.recv(64)
        if not msg:
            os._exit(0)
        test = spec["tests"][int(msg)]
        fds = [_memfd(test.get("stdin", "").encode()), _memfd(), _memfd(), _memfd()]
        pid = _libc.syscall(clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0)
        if pid == 0:
            sock.detach()
            _test_process(spec, test, fds)  # never returns
        if pid < 0:
            os._exit(1)
        sock.sendmsg([str(pid).encode()], [(SOL_SOCKET, SCM_RIGHTS, b"".join(
            fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds[1:]))])
        for fd in fds:
            os.close(fd)


def _memfd(data: bytes = b"") -> int:
    fd = os.memfd_create("test", os.MFD_CLOEXEC)
    if data:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _test_process(spec: dict, test: dict, fds: list) -> None:
    for target, fd in enumerate(fds):
        os.dup2(fd, target, inheritable=True)
    os.closerange(4, 1 << 16)
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc/self, as any program expects
    os.setsid()
    _execute(spec["code"], test)


def _plain(value, depth: int = 0):
    """``value`` as plain data (subclasses become their base type; sets a tagged sorted list).
    Anything else is an error: the trusted side only accepts data, never the program's objects."""
    if depth > 100:
        raise ValueError("the value is nested more than 100 levels deep")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, int):  # bool cannot be subclassed, so this is an int subclass
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {_key(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return {"__set__": sorted((_plain(v, depth + 1) for v in value), key=repr)}
    raise TypeError(f"a {type(value).__name__} is not plain data (return numbers, strings, lists, dicts)")


def _key(key) -> str:
    if isinstance(key, bool) or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if isinstance(key, (int, float, str)):
        return str(_plain(key))
    raise TypeError(f"a dict key of type {type(key).__name__} is not plain data")


def _to_json(value) -> str:
    """JSON of plain data (``json`` itself would cost an import per test)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        return int.__repr__(value)
    if type(value) is float:
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if type(value) is str:
        return _string(value)
    if type(value) is list:
        return "[" + ",".join(_to_json(v) for v in value) + "]"
    return "{" + ",".join(_string(k) + ":" + _to_json(v) for k, v in value.items()) + "}"


def _string(text: str) -> str:
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif code < 0x20 or 0xD800 <= code < 0xE000:  # controls; lone surrogates (not UTF-8)
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _execute(code: str, test: dict) -> None:
    """Run the program (and the test's expressions) in a fresh ``__main__``; exit with its status."""
    import builtins  # noqa: PLC0415
    import io  # noqa: PLC0415
    import types  # noqa: PLC0415

    plain, to_json, emit = _plain, _to_json, _emit  # bound before the program can replace them
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                 encoding="utf-8", errors="replace")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16), encoding="utf-8", errors="replace")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                                   errors="replace", write_through=True)
    sys.argv = ["solution.py"]
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    main.__dict__["__file__"] = "solution.py"
    sys.modules["__main__"] = main
    status = 0
    try:
        exec(compile(code, "solution.py", "exec"), main.__dict__)  # noqa: S102 - the sandbox's job
        kind = test["kind"]
        if kind == "call":
            emit(to_json(plain(_call(main.__dict__, test["fn_name"], test["args"]))))
        elif kind == "eval":
            if test.get("setup"):
                exec(compile(test["setup"], "test.py", "exec"), main.__dict__)  # noqa: S102
            values = []
            for expr in test["exprs"]:
                try:
                    value = eval(compile(expr, "test.py", "eval"), main.__dict__)  # noqa: S307
                    values.append({"value": plain(value)})
                except Exception as e:  # noqa: BLE001 - that expression failed, not the harness
                    values.append({"error": f"{type(e).__name__}: {e}"[:300]})
            emit(to_json(values))
        elif kind == "assert":
            exec(compile(test["source"], "test.py", "exec"), main.__dict__)  # noqa: S102
            emit(test["token"])
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the program's failure is its verdict
        status = 1
        try:  # the program's frames only, not this harness's
            import traceback  # noqa: PLC0415 - only a failing program pays for it
            kind, value, tb = sys.exc_info()
            traceback.print_exception(kind, value, tb.tb_next if tb is not None else None)
        except BaseException:  # noqa: BLE001
            pass
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        status = status or 1
    os._exit(status & 0xFF)


def _call(namespace: dict, fn_name: str, args: list):
    fn = namespace.get(fn_name)
    if fn is None and isinstance(namespace.get("Solution"), type):  # LeetCode style
        fn = getattr(namespace["Solution"](), fn_name, None)
    if fn is None:
        raise NameError(f"the program defines no function {fn_name!r}")
    return fn(*args)


def _emit(text: str) -> None:
    data = text.encode()
    while data:
        data = data[os.write(3, data):]


if __name__ == "__main__":  # run as `python -c <this source>`; imported by tests for its encoder
    main()
