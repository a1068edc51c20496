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
- ``assert`` (asserts that could not be parsed): the test's token once the assert source ran
  without raising; ``ASSERTION_FAILED`` where an assertion of the test's failed (a wrong
  answer; an exception of the program's, an AssertionError included, is not one). The source
  runs in the test process (the *judge*, which never runs program code and stays
  non-dumpable); the program runs in a child of it without fd 3 and answers the
  judge's calls over a socket with plain data only (``_judge``). So the program can neither
  patch what the test runs (builtins, exec, AssertionError, the test's own locals), nor hand
  it an object whose ``__eq__`` says yes, nor write the token it may find in its memory.
  What the test passes the program that is not data (a callback, an object of its own class)
  stays in the judge; the program's handle to it asks the judge to call or iterate it or to
  read or set its public attributes (``_Channel.serve``), never its frames or globals.
"""

import _socket
import ctypes
import marshal
import os
import sys

PR_SET_DUMPABLE = 4
ASSERTION_FAILED = "assertion failed"   # an assert test's result when its own assertion failed
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
        if pid < 0:  # said to the init, which fails this test for it; the next may fork again
            err = ctypes.get_errno()
            for fd in fds:
                os.close(fd)
            sock.send(b"!" + f"[Errno {err}] {os.strerror(err)}".encode())
            continue
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
    os.setsid()
    if test["kind"] == "assert":
        _judge(spec["code"], test)  # never returns; stays non-dumpable, the program runs in its child
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc/self, as any program expects
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


def _program_main(code: str) -> dict:
    """Text standard streams and a fresh ``__main__`` for the program; its namespace. The source
    is also written to ``solution.py`` in the working directory, the ``__file__`` that
    multiprocessing's spawn and forkserver children run again to find the program's functions."""
    import builtins  # noqa: PLC0415
    import io  # noqa: PLC0415
    import types  # noqa: PLC0415

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                 encoding="utf-8", errors="replace")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16), encoding="utf-8", errors="replace")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                                   errors="replace", write_through=True)
    path = os.path.join(os.getcwd(), "solution.py")
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
    except OSError:  # a full /tmp: only spawned children miss it
        pass
    sys.argv = ["solution.py"]
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    main.__dict__["__file__"] = path
    sys.modules["__main__"] = main
    return main.__dict__


def _end_helpers() -> None:
    """multiprocessing's spawn and forkserver methods start helper processes (a resource tracker,
    a fork server) that exit once the pipe from the program closes, i.e. after it has exited,
    so they would be counted as its strays: close those pipes and wait for the helpers here."""
    for module, name, fd, pid in (("multiprocessing.resource_tracker", "_resource_tracker", "_fd", "_pid"),
                                  ("multiprocessing.forkserver", "_forkserver", "_forkserver_alive_fd",
                                   "_forkserver_pid")):
        helper = getattr(sys.modules.get(module), name, None)
        if helper is None or not getattr(helper, pid, None):
            continue
        try:
            os.close(getattr(helper, fd))
            os.waitpid(getattr(helper, pid), 0)
        except (OSError, TypeError):  # the program closed or reaped it itself
            pass


def _exit(status: int) -> None:
    """End the program's process with ``status``: multiprocessing's helpers waited for, and
    stdout flushed (output it could not write fails the program)."""
    _end_helpers()
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        status = status or 1
    os._exit(status & 0xFF)


def _exit_status(error: BaseException | None) -> int:
    """The exit status of a program that ended with ``error`` (None: it ran to its end); a
    failure's traceback goes to stderr, the harness's frames left out."""
    if error is None:
        return 0
    if isinstance(error, SystemExit):
        if not isinstance(error.code, (int, type(None))):
            print(error.code, file=sys.stderr)
        return error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
    try:
        import traceback  # noqa: PLC0415 - only a failing program pays for it
        tb = error.__traceback__
        traceback.print_exception(type(error), error, tb.tb_next if tb is not None else None)
    except BaseException:  # noqa: BLE001
        pass
    return 1


def _execute(code: str, test: dict) -> None:
    """Run the program (and the test's expressions) in a fresh ``__main__``; exit with its status."""
    plain, to_json, emit = _plain, _to_json, _emit  # bound before the program can replace them
    namespace = _program_main(code)
    status = 0
    try:
        exec(compile(code, "solution.py", "exec"), namespace)  # noqa: S102 - the sandbox's job
        if test["kind"] == "call":
            emit(to_json(plain(_call(namespace, test["fn_name"], test["args"]))))
        else:  # eval
            if test.get("setup"):
                exec(compile(test["setup"], "test.py", "exec"), namespace)  # noqa: S102
            values = []
            for expr in test["exprs"]:
                try:
                    value = eval(compile(expr, "test.py", "eval"), namespace)  # noqa: S307
                    values.append({"value": plain(value)})
                except Exception as e:  # noqa: BLE001 - that expression failed, not the harness
                    values.append({"error": f"{type(e).__name__}: {e}"[:300]})
            emit(to_json(values))
    except BaseException as e:  # noqa: BLE001 - the program's failure is its verdict
        status = _exit_status(e)
    _exit(status)


def _judge(code: str, test: dict) -> None:
    """Run an assert test's source against the program, which runs in a child: the source's
    names that the program defines are the program's plain data (copied), modules (imported
    here as installed, so a patched copy is not seen) or ``_Remote`` handles, whose calls the
    child answers with plain data.
    What the source passes that is not data (a lambda, a function or an object of its own)
    stays here: the program gets a handle whose calls run here (``_Channel.serve``). The test
    passes when the source ran here without raising, nor any of its callbacks with an
    AssertionError the program might have caught. Where one of the test's assertions failed it
    reports ``ASSERTION_FAILED`` (a wrong answer); an exception the program raised, whatever
    its type, is the program's error (``raised_by``). This process exits with the status the
    child's own exit gives it when the program ends early (``sys.exit``, a crash, a signal)."""
    import ast  # noqa: PLC0415
    import builtins  # noqa: PLC0415
    import socket  # noqa: PLC0415

    mine, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:
        mine.close()
        os.close(3)  # the result channel is the judge's alone
        _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        _serve(code, theirs)  # never returns
    theirs.close()
    channel = _Channel(mine)
    status, passed, wrong = 1, False, False
    try:
        wanted = {n.id for n in ast.walk(ast.parse(test["source"])) if isinstance(n, ast.Name)}
        names = channel.ask(["start", sorted(n for n in wanted if n not in builtins.__dict__)])[1]
        namespace = {"__builtins__": builtins, "__name__": "__main__"}
        for name, (how, what, *ref) in dict(names).items():
            if how == "module":  # imported here, as installed: a copy the program patched is not seen
                try:
                    namespace[name] = __import__(what, fromlist=["_"])
                except Exception:  # noqa: BLE001 - not installed (one the program made): its handle
                    namespace[name] = _Remote(channel, ref[0])
            else:
                namespace[name] = channel.decode(what) if how == "value" else _Remote(channel, what)
        exec(compile(test["source"], "test.py", "exec"), namespace)  # noqa: S102 - the test's own code
        if channel.failed is not None:
            raise channel.failed
        passed, status = True, 0
    except _ProgramGone:
        status = None
    except BaseException as e:  # noqa: BLE001 - an assertion (or the test) failed
        status = _exit_status(e)
        # the test's assertion (a wrong answer), not the program's AssertionError come through
        wrong = isinstance(e, AssertionError) and getattr(e, "raised_by", None) != "program"
    if passed:
        _emit(test["token"])
    elif wrong:
        _emit(ASSERTION_FAILED)
    mine.close()  # the child exits at the end of its requests
    _, child_status = os.waitpid(child, 0)
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        pass
    if status is None:  # the program ended before answering: its end is the verdict's
        if os.WIFSIGNALED(child_status):
            import signal  # noqa: PLC0415

            sig = os.WTERMSIG(child_status)
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        status = os.WEXITSTATUS(child_status) if os.WIFEXITED(child_status) else 1
    os._exit(status & 0xFF)


class _ProgramGone(Exception):
    """The program's process ended (or broke the protocol) before it answered the judge."""


_REQUESTS = ("call", "getattr", "setattr", "iter", "next")  # the other messages are answers


def _raised(reply: list, by: str) -> Exception:
    """The exception an answer ``["raise", type name, message]`` from ``by`` stands for: the
    builtin type of that name (RuntimeError for others), never a class the other side chose."""
    import builtins  # noqa: PLC0415

    kind = getattr(builtins, str(reply[1]), None) if len(reply) > 1 else None
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = RuntimeError
    error = kind(f"(raised by the {by}) {reply[2] if len(reply) > 2 else ''}"[:300])
    error.raised_by = by   # the judge tells the program's AssertionError from its test's own
    return error


class _Channel:
    """The judge's end of the socket to the program: length-prefixed JSON, values in ``_wire``'s
    tagged form. Whatever comes back is decoded as data only. While it waits for an answer it
    serves the program's calls of the test's own objects (``objects``: callbacks the test
    passed, what they returned), which run here."""

    def __init__(self, sock):
        self.sock = sock
        self.objects: list = []
        self.failed: AssertionError | None = None   # an assertion of the test's that failed in a callback

    def ask(self, request: list):
        import json  # noqa: PLC0415

        _send(self.sock, json.dumps(request))
        while True:
            text = _recv(self.sock)
            if text is None:
                raise _ProgramGone
            try:
                reply = json.loads(text)
            except RecursionError:
                reply = None
            if not (isinstance(reply, list) and len(reply) >= 2 and isinstance(reply[0], str)):
                raise ValueError("the program's process answered the test with something that is not data")
            if reply[0] not in _REQUESTS:
                break
            _send(self.sock, json.dumps(self.serve(reply)))
        if reply[0] == "raise":  # the program's function raised: the same builtin type here
            raise _raised(reply, "program")
        return reply

    def serve(self, request: list) -> list:
        """The answer to the program's request on one of the test's objects. The program may call
        them (a test's callback runs as the test wrote it, with data as its arguments), iterate
        them and read or set the attributes the test's own objects keep in their ``__dict__``
        and their methods; nothing else (no ``_`` names, no module's or function's attributes:
        those would lead to this process's frames and the test's token)."""
        import types  # noqa: PLC0415

        try:
            op, ref, *rest = request
            if type(ref) is not int or not 0 <= ref < len(self.objects):
                raise ValueError("no such object of the test's")
            target = self.objects[ref]
            if op == "call":
                args, kwargs = self.decode(rest[0]), self.decode(rest[1])
                result = target(*args, **{str(k): v for k, v in kwargs.items()})
            elif op == "iter":
                result = iter(target)
            elif op == "next":
                result = next(target)
            else:
                name = rest[0]
                opaque = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
                if type(name) is not str or name.startswith("_") or isinstance(target, opaque):
                    raise AttributeError(f"the test's {type(target).__name__} shows no attribute {name!r} "
                                         "to the program")
                if op == "setattr":
                    if not hasattr(target, "__dict__"):
                        raise AttributeError(f"the test's {type(target).__name__} takes no attribute {name!r}")
                    setattr(target, name, self.decode(rest[1]))
                    result = None
                else:
                    own = name in getattr(target, "__dict__", {})
                    result = getattr(target, name)
                    if not (own or isinstance(result, (types.MethodType, types.BuiltinMethodType))
                            and getattr(result, "__self__", None) is target):
                        raise AttributeError(f"the test's {type(target).__name__} shows no attribute {name!r} "
                                             "to the program")
            return ["value", _wire(result, self.objects)]
        except AssertionError as e:  # the test's own check failed, whatever the program does with it
            self.failed = self.failed or e
            return ["raise", "AssertionError", str(e)[:300]]
        except Exception as e:  # noqa: BLE001 - the program's request failed: it sees why
            return ["raise", type(e).__name__, str(e)[:300]]

    def value(self, reply, args: tuple = ()):
        """A call's or attribute's answer: plain data, or a handle to the program's object."""
        how, what, *rest = reply
        if how == "ref":
            return _Remote(self, what)
        if rest and rest[0] is not None:  # the arguments as the program left them (in-place edits)
            for arg, new in zip(args, self.decode(rest[0])):
                if type(arg) is list and type(new) is list:
                    arg[:] = new
                elif type(arg) in (dict, set) and type(new) is type(arg):
                    arg.clear()
                    arg.update(new)
        return self.decode(what)

    def decode(self, data):
        """``_wire``'s form back to Python values; anything else is not data."""
        if data is None or type(data) in (bool, int, float, str):
            return data
        if type(data) is list:
            return [self.decode(v) for v in data]
        if type(data) is not dict or len(data) != 1:
            raise ValueError("the program's process answered the test with something that is not data")
        (tag, v), = data.items()
        if tag == "t":
            return tuple(self.decode(x) for x in v)
        if tag in ("s", "f"):
            items = [self.decode(x) for x in v]
            return set(items) if tag == "s" else frozenset(items)
        if tag == "d":
            return {self.decode(k): self.decode(x) for k, x in v}
        if tag == "b":
            return v.encode("latin-1")
        if tag == "i":
            return int(v, 16)
        if tag == "r" and type(v) is int:
            return _Remote(self, v)
        if tag == "j" and type(v) is int and 0 <= v < len(self.objects):  # the test's own, given back
            return self.objects[v]
        raise ValueError("the program's process answered the test with something that is not data")


class _Remote:
    """An object of the program's, seen from the judge: calls and attributes are asked of the
    program; it compares equal to nothing but itself and is never turned into data here."""

    __slots__ = ("_channel", "_ref")

    def __init__(self, channel: _Channel, ref: int):
        self._channel, self._ref = channel, ref

    def __call__(self, *args, **kwargs):
        channel = self._channel
        return channel.value(channel.ask(["call", self._ref, _wire(list(args), channel.objects),
                                          _wire(kwargs, channel.objects)]), args)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._channel.value(self._channel.ask(["getattr", self._ref, name]))

    def __repr__(self) -> str:
        return f"<an object of the program's (#{self._ref})>"


def _wire(value, objects: list | None = None):
    """Plain data in a JSON form that keeps its types (tuples, sets, bytes, non-string keys,
    huge integers; subclasses become their base type); ``_Remote`` and ``_TestObject`` handles
    pass as themselves. Anything else is a TypeError, or, given ``objects`` (the judge's), kept
    there and passed as a handle."""
    if value is None or type(value) in (bool, str, float):
        return value
    if isinstance(value, _Remote):
        return {"r": value._ref}
    if isinstance(value, _TestObject):
        return {"j": object.__getattribute__(value, "_ref")}
    if isinstance(value, int):  # bool cannot be subclassed, so this is an int (subclass)
        value = int(value)
        return value if abs(value) < 1 << 4000 else {"i": hex(value)}  # JSON's digit limit
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).decode("latin-1")}
    if isinstance(value, list):
        return [_wire(v, objects) for v in value]
    if isinstance(value, tuple):
        return {"t": [_wire(v, objects) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {"f" if isinstance(value, frozenset) else "s": [_wire(v, objects) for v in value]}
    if isinstance(value, dict):
        return {"d": [[_wire(k, objects), _wire(v, objects)] for k, v in value.items()]}
    if objects is not None:
        objects.append(value)
        return {"j": len(objects) - 1}
    raise TypeError(f"a {type(value).__name__} is not plain data")


def _serve(code: str, sock) -> None:
    """The program's side of ``_judge``: run the program, then answer the judge's requests
    (its names, calls, attributes) until the judge hangs up; exit with the program's status."""
    import json  # noqa: PLC0415
    import types  # noqa: PLC0415

    namespace = _program_main(code)
    peer = _Peer(sock)
    status = 0
    try:
        request = json.loads(_recv(sock) or "[]")
        exec(compile(code, "solution.py", "exec"), namespace)  # noqa: S102 - the sandbox's job
        names = {}
        for name in request[1] if request else []:
            if name in namespace:
                value = namespace[name]
                if isinstance(value, types.ModuleType):
                    names[name] = ["module", str(value.__name__), peer.describe(value)[1]]
                else:
                    names[name] = peer.describe(value)
        _send(sock, json.dumps(["names", names]))
        while (text := _recv(sock)) is not None:
            peer.answer(json.loads(text))
    except BaseException as e:  # noqa: BLE001 - the program's failure is its verdict
        status = _exit_status(e)
    _exit(status)


class _Peer:
    """The program's end of the socket: its objects the judge holds handles to (``handles``),
    and the judge's requests answered, also while the program waits on a test's callback."""

    def __init__(self, sock):
        self.sock = sock
        self.handles: dict = {}

    def answer(self, request: list) -> None:
        import json  # noqa: PLC0415

        op, ref, *rest = request
        try:
            target = self.handles[ref]
            if op == "call":
                args, kwargs = self.unwire(rest[0]), self.unwire(rest[1])
                reply = self.describe(target(*args, **kwargs))
                try:  # the arguments after the call, for a function that edits them in place
                    reply.append(_wire(args) if any(type(a) in (list, dict, set) for a in args) else None)
                except (TypeError, ValueError, RecursionError):
                    reply.append(None)
            else:
                reply = self.describe(getattr(target, rest[0]))
        except Exception as e:  # noqa: BLE001 - the program's answer is that it raised
            reply = ["raise", type(e).__name__, str(e)[:300]]
        _send(self.sock, json.dumps(reply))

    def ask(self, request: list):
        """A request on one of the test's objects; the judge's requests in between are answered."""
        import json  # noqa: PLC0415

        _send(self.sock, json.dumps(request))
        while (text := _recv(self.sock)) is not None:
            reply = json.loads(text)
            if reply[0] not in _REQUESTS:
                if reply[0] == "raise":
                    raise _raised(reply, "test")
                return self.unwire(reply[1])
            self.answer(reply)
        _exit(0)  # the judge is done: its verdict no longer depends on this process

    def describe(self, value) -> list:
        """A value for the judge: as data, or a handle to it (kept in ``handles``) if it is not data."""
        try:
            return ["value", _wire(value)]
        except (TypeError, ValueError, RecursionError):
            self.handles[len(self.handles)] = value
            return ["ref", len(self.handles) - 1]

    def unwire(self, data):
        """The judge's values (``_wire``'s form) as Python values: handles are the program's
        objects ("r") or proxies of the test's ("j")."""
        if data is None or type(data) in (bool, int, float, str):
            return data
        if type(data) is list:
            return [self.unwire(v) for v in data]
        (tag, v), = data.items()
        if tag == "t":
            return tuple(self.unwire(x) for x in v)
        if tag in ("s", "f"):
            return (set if tag == "s" else frozenset)(self.unwire(x) for x in v)
        if tag == "d":
            return {self.unwire(k): self.unwire(x) for k, x in v}
        if tag == "b":
            return v.encode("latin-1")
        if tag == "i":
            return int(v, 16)
        if tag == "j":
            return _TestObject(self, v)
        return self.handles[v]  # "r"


class _TestObject:
    """One of the test's objects (a callback, an object of a class it defined), seen from the
    program: calls, iteration and attributes are asked of the judge, where they run."""

    __slots__ = ("_peer", "_ref")

    def __init__(self, peer: _Peer, ref: int):
        object.__setattr__(self, "_peer", peer)
        object.__setattr__(self, "_ref", ref)

    def _ask(self, *request):
        return object.__getattribute__(self, "_peer").ask([request[0], object.__getattribute__(self, "_ref"),
                                                           *request[1:]])

    def __call__(self, *args, **kwargs):
        return self._ask("call", _wire(list(args)), _wire(kwargs))

    def __iter__(self):
        return self._ask("iter")

    def __next__(self):
        return self._ask("next")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name)

    def __setattr__(self, name: str, value) -> None:
        self._ask("setattr", name, _wire(value))

    def __repr__(self) -> str:
        return f"<an object of the test's (#{object.__getattribute__(self, '_ref')})>"


def _send(sock, text: str) -> None:
    data = text.encode()
    sock.sendall(len(data).to_bytes(8, "big") + data)


def _recv(sock) -> str | None:
    """One message, or None at the end of the connection (or a broken one)."""
    head = _recv_exact(sock, 8)
    if head is None:
        return None
    body = _recv_exact(sock, int.from_bytes(head, "big"))
    return None if body is None else body.decode("utf-8", "replace")


def _recv_exact(sock, n: int) -> bytes | None:
    chunks = []
    try:
        while n:
            chunk = sock.recv(min(n, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
    except OSError:
        return None
    return b"".join(chunks)


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
