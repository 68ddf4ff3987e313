"""A sandbox head's Python daemons, forked from one import instead of started from four.

Copied into the sandbox's Ray image (rayimage.py) as kfp_ray_sandbox_rayzygote, and used by
`ray start --head` only where the node's environment asks (imagehooks.ZYGOTE_ENV, which RayNode
sets for heads). Self-contained: the image has no kfp_ray_sandbox.

Why: `ray start --head` (ray 2.52.1, ray/_private/services.py start_ray_process) runs four Python
daemons of its own: the dashboard, the Ray client server, the log monitor and the autoscaler
monitor, each a fresh `python <script>` that imports most of Ray again (about 0.6 CPU-s each on
this 2-core machine, where the suite starts about a hundred heads). Here `ray start` starts a
zygote first, a fresh interpreter that imports those daemons' modules once; each daemon is a fork
of it that runs the daemon's script as __main__ (the client server's setup_worker.py then runs
the module in the same process where it would exec a fresh interpreter for it, and the
dashboard's forkserver is a fork of the dashboard before it runs). A head's start: about 4.5
CPU-s, not 7.

What stays Ray's: each daemon is `ray start`'s own child, as Ray made it. The zygote's fork
forks again and exits, and the kernel hands the grandchild to `ray start`, a child subreaper for
the moment of the request (PR_SET_CHILD_SUBREAPER: as a container's PID 1 adopts orphans), so
Ray's Popen object for it waits, polls, signals and reaps it as before. The daemon gets Ray's
stdin, stdout and stderr (passed as file descriptors), its environment, working directory,
process group, SIGINT blocked and, where Ray asks for fate-sharing, PR_SET_PDEATHSIG, set once it
is `ray start`'s child. Not the same: its command line in /proc is the zygote's, and `-u` is
line buffering over the zygote's streams, not unbuffered ones.

A command of another shape, another interpreter, pipes, an environment that differs from the
one the zygote imported under (a module may read it at import), or any failure of the zygote:
Ray's own Popen starts it, as before.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

# The daemons `ray start --head` runs (ray 2.52.1 services.py), by the file or module Ray names,
# and the module that imports what each needs (preloaded once by the zygote).
SCRIPTS = {
    ("ray", "dashboard", "dashboard.py"): "ray.dashboard.dashboard",
    # the Ray client server's: `setup_worker.py -m ray.util.client.server`, which execs the module (_Exec)
    ("ray", "_private", "workers", "setup_worker.py"): "ray._private.workers.setup_worker",
    ("ray", "_private", "log_monitor.py"): "ray._private.log_monitor",
    ("ray", "autoscaler", "_private", "monitor.py"): "ray.autoscaler._private.monitor",
}
MODULES = {"ray.util.client.server": "ray.util.client.server.server"}
DASHBOARD = ("ray", "dashboard", "dashboard.py")
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
REQUEST_TIMEOUT_S = 60  # the zygote's imports, on a loaded machine, before its first fork
MAX_MESSAGE = 1 << 20


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value})")


def target(args) -> dict | None:
    """What a daemon's command runs, if it is one of SCRIPTS or MODULES run by this interpreter:
    {"path": file} or {"module": name}, with its argv and whether it asked for -u."""
    args = [os.fspath(a) for a in args]
    if len(args) < 2 or os.path.realpath(args[0]) != os.path.realpath(sys.executable):
        return None
    rest, unbuffered = args[1:], False
    if rest[0] == "-u":
        rest, unbuffered = rest[1:], True
    if len(rest) >= 2 and rest[0] == "-m" and rest[1] in MODULES:
        return {"module": rest[1], "argv": rest[2:], "unbuffered": unbuffered}
    if rest and not rest[0].startswith("-"):
        parts = tuple(os.path.normpath(rest[0]).split(os.sep))
        if any(parts[-len(key):] == key for key in SCRIPTS):
            return {"path": rest[0], "argv": rest[1:], "unbuffered": unbuffered}
    return None


def _preload() -> None:
    """Import what the daemons import: their modules, and every dashboard module, which the
    dashboard imports to find its modules (ray/dashboard/utils.py get_all_modules). A module
    that fails here is left to the daemon's own import, which reports it."""
    import importlib
    import pkgutil

    for name in sorted({*SCRIPTS.values(), *MODULES.values()}):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            pass
    try:
        import ray.dashboard.modules as modules
    except Exception:  # noqa: BLE001
        return
    for _, name, _ in pkgutil.walk_packages(modules.__path__, modules.__name__ + "."):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            pass


# --- in `ray start`: the client -----------------------------------------------------------------
class Zygote:
    """`ray start`'s end: starts the zygote (once, on first use) and asks it for daemons."""

    def __init__(self):
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._broken = False

    def start(self, env: dict | None) -> None:
        """Start the zygote, once, in the environment Ray gives its first process (final by
        then, with the LD_PRELOAD of Ray's jemalloc that Ray adds for each of its processes)."""
        with self._lock:
            if self._sock is not None or self._broken:
                return
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            code = f"import {__name__} as z; z.serve({theirs.fileno()}, {os.getpid()})"
            try:
                self._proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()],
                                              env=env, stdin=subprocess.DEVNULL)
            except OSError:
                self._broken = True
                ours.close()
                return
            finally:
                theirs.close()
            ours.settimeout(REQUEST_TIMEOUT_S)
            self._sock = ours

    def spawn(self, what: dict, env: dict, cwd: str | None, fate_share: bool, fds: list[int]) -> int | None:
        """The pid of the daemon forked for `what`, now this process's child; None where the
        zygote cannot (the caller starts it itself)."""
        with self._lock:
            if self._broken or self._sock is None:
                return None
            try:
                request = {**what, "env": env, "cwd": cwd or os.getcwd(), "fate_share": fate_share}
                _prctl(PR_SET_CHILD_SUBREAPER, 1)
                try:
                    socket.send_fds(self._sock, [json.dumps(request).encode()], fds)
                    reply = json.loads(self._sock.recv(MAX_MESSAGE) or b"{}")
                finally:
                    _prctl(PR_SET_CHILD_SUBREAPER, 0)
                pid = reply.get("pid")
                if pid is None:
                    return None
                if _parent_of(pid) != os.getpid():  # not ours after all: never hand Ray a pid it cannot wait for
                    os.kill(pid, signal.SIGKILL)
                    return None
                return pid
            except (OSError, ValueError):
                self._broken = True  # once broken, Ray starts what is left itself
                return None


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def install(services) -> None:
    """Make `services.start_ray_process` start the daemons of SCRIPTS and MODULES from a zygote
    (called once `ray._private.services` is imported, in a head's `ray start` only)."""
    base = services.ConsolePopen
    zygote = Zygote()

    class ZygotePopen(base):
        def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                           creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                           *rest):
            zygote.start(env)  # at Ray's first process (the GCS): its imports overlap the head's start
            plain = not (shell or executable or pass_fds) and (p2cwrite, c2pread, errread) == (-1, -1, -1)
            what, fate = (target(args) if plain else None), _fate_share(preexec_fn)
            pid = None
            if what is not None and fate is not None and env is not None:
                fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                       errwrite if errwrite != -1 else 2]
                pid = zygote.spawn(what, dict(env), cwd and os.fspath(cwd), fate, fds)
            if pid is None:
                return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                                              startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread,
                                              c2pwrite, errread, errwrite, *rest)
            self.pid, self._child_created = pid, True
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    services.ConsolePopen = ZygotePopen


def _fate_share(preexec_fn) -> bool | None:
    """Whether Ray's preexec_fn sets PDEATHSIG (its closure's `fate_share`); None: not Ray's."""
    code, cells = getattr(preexec_fn, "__code__", None), getattr(preexec_fn, "__closure__", None) or ()
    if code is None or "fate_share" not in code.co_freevars or len(cells) != len(code.co_freevars):
        return None
    return bool(cells[code.co_freevars.index("fate_share")].cell_contents)


# --- the zygote --------------------------------------------------------------------------------
def serve(fd: int, owner: int) -> None:
    """The zygote: import the daemons' modules, then fork one daemon per request until `ray
    start` (`owner`) closes its end. Returns only in a daemon, which then runs its script."""
    sock = socket.socket(fileno=fd)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with `ray start`, however it ends
    if os.getppid() != owner:
        os._exit(0)
    base_env = dict(os.environ)  # as started: what a daemon's own interpreter would import under
    _preload()
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)  # `ray start` is gone
        request = json.loads(msg)
        env = request.pop("env")
        if env != base_env or len(fds) != 3:
            _close(fds)
            sock.send(b"{}")
            continue
        pid = _fork_daemon(sock, fds, request, owner)
        _close(fds)
        sock.send(json.dumps({"pid": pid}).encode())


def _fork_daemon(sock: socket.socket, fds: list[int], request: dict, owner: int) -> int | None:
    """Fork, fork again and let the middle process exit: the daemon is orphaned to `owner` (a
    subreaper for this request) before its pid is returned."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            daemon = os.fork()
            if daemon == 0:
                os.close(r)
                os.close(w)
                _become_daemon(sock, fds, request, owner)  # does not return
            os.write(w, str(daemon).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        text = f.read()
    os.waitpid(middle, 0)
    return int(text) if text else None


def _become_daemon(sock: socket.socket, fds: list[int], request: dict, owner: int) -> None:
    try:
        sock.close()
        deadline = time.monotonic() + 10
        while os.getppid() != owner:  # the middle process is exiting: then `ray start` is our parent
            if time.monotonic() > deadline:
                os._exit(1)
            time.sleep(0.001)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # Ray's preexec_fn
        if request["fate_share"]:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != owner:
                os._exit(1)
        sys.stdout.flush()
        sys.stderr.flush()
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(request["cwd"])
        if request["unbuffered"]:
            for stream in (sys.stdout, sys.stderr):
                stream.reconfigure(line_buffering=True, write_through=True)
        if tuple(os.path.normpath(request.get("path", "")).split(os.sep)[-3:]) == DASHBOARD:
            _forkserver_forked_here()
        _run(request)
    except BaseException:  # noqa: BLE001 - never return into the zygote's loop
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def _forkserver_forked_here() -> None:
    """Start the dashboard's multiprocessing forkserver (imagehooks: its subprocess modules start
    from one) as a fork of this daemon before it runs, while it is still the zygote's clean state
    with every dashboard module imported, instead of a fresh interpreter importing them again.
    The forkserver is the same code on the same socket (in the node's temp dir), pipe and
    preparation protocol; the dashboard finds it running when it starts its modules."""
    try:
        import kfp_ray_sandbox_imagehooks as hooks  # beside this module in the image
    except ImportError:
        return
    node_dir = os.environ.get(hooks.NODE_ENV)
    if not os.environ.get(hooks.MODULES_ENV) or not node_dir or not os.path.isdir(node_dir):
        return
    import tempfile
    from multiprocessing import forkserver, process, util

    process.current_process()._config["tempdir"] = tempfile.mkdtemp(prefix="pymp-", dir=node_dir)
    spawn = util.spawnv_passfds

    def fork_instead(path, args, passfds):  # the command is forkserver.main(listener, alive_r, ...)
        keep = sorted(map(int, passfds))
        pid = os.fork()
        if pid == 0:
            try:
                low = 3
                for fd in [*keep, os.sysconf("SC_OPEN_MAX")]:  # only what spawnv_passfds would pass
                    os.closerange(low, fd)
                    low = fd + 1
                exec(args[args.index("-c") + 1], {})  # noqa: S102 - multiprocessing's own command
            finally:
                os._exit(0)
        return pid

    util.spawnv_passfds = fork_instead
    try:
        forkserver._forkserver.ensure_running()
    except OSError:
        pass  # the dashboard starts one itself, as Ray would
    finally:
        util.spawnv_passfds = spawn


class _Exec(Exception):  # noqa: N818 - not an error: setup_worker.py's exec of a daemon we run here
    def __init__(self, what: dict):
        self.what = what


def _exec_here(real_execvp):
    """os.execvp for setup_worker.py (ray/_private/runtime_env/context.py exec_worker: `bash -c
    "exec <python> -m <module> ..."`): a daemon of MODULES by this interpreter is run in this
    process, as the exec would run it, instead of by a fresh interpreter; anything else is exec'd."""
    import shlex

    def execvp(file, args):
        if file == "bash" and list(args[:2]) == ["bash", "-c"] and len(args) == 3:
            words = shlex.split(args[2])
            what = target(words[1:]) if words[:1] == ["exec"] else None
            if what is not None and "module" in what and not what["unbuffered"]:
                raise _Exec(what)
        real_execvp(file, args)

    return execvp


def _run(request: dict) -> None:
    """Run the daemon as `python [-u] <file|-m module> argv...` would, then exit as it would."""
    import logging
    import runpy

    code = 0
    handlers = {name: (lg.handlers[:], lg.level, lg.propagate) for name, lg in
                (("", logging.root), ("ray", logging.getLogger("ray")))}
    real_execvp = os.execvp
    os.execvp = _exec_here(real_execvp)
    try:
        try:
            if "module" in request:
                _run_module(request)
            else:
                sys.argv = [request["path"], *request["argv"]]
                sys.path[0] = os.path.dirname(os.path.abspath(request["path"]))
                runpy.run_path(request["path"], run_name="__main__")
        except _Exec as exec_:  # as a fresh process would: Ray's exec'd module, logging as it found it
            os.execvp = real_execvp
            for name, (hs, level, propagate) in handlers.items():
                lg = logging.getLogger(name or None)
                lg.handlers[:], lg.level, lg.propagate = hs, level, propagate
            sys.path[0] = os.getcwd()
            _run_module(exec_.what)
    except SystemExit as e:
        code = e.code
    except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    _exit_as_interpreter(code)


def _run_module(what: dict) -> None:
    """`python -m <module> argv...`, in this process."""
    import runpy

    sys.argv = [what["module"], *what["argv"]]
    runpy.run_module(what["module"], run_name="__main__", alter_sys=True)


def _exit_as_interpreter(code) -> None:
    """Exit as an interpreter does at the end of its script: threads joined, atexit run,
    streams flushed."""
    import atexit

    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own join of non-daemon threads
    atexit._run_exitfuncs()
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0 if code is None else int(code))


def _close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
