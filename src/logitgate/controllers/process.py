"""Controllers in worker processes: the out-of-process runtime (AICI's runtime beside the engine).

POSIX only (it needs ``os.fork``; Linux for the subreaper that collects the exit status of forked
sequences). ``ProcessControllers(factory, limits)`` wraps a controller factory (for instance
``scripting.load_script(path)``) so that every sequence's controller runs in its own worker
process; it is itself a factory for ``run_controller``, unchanged::

    with ProcessControllers(scripting.load_script("prog.py"), limits) as remote:
        result = run_controller(remote, model, prompt, limits=limits)

Design:

* **Start.** The root worker is ``os.fork()``-ed from this process, so the factory, the tokenizer
  and the script are inherited, never pickled. It builds its controller with a host whose
  ``tokenize_bytes`` is the parent's function (inherited), whose ``variables`` is a proxy (``get``,
  ``set``, ``append`` are requests that this process answers while it waits for the worker's
  reply) and whose ``log`` is captured in the worker and shipped back with each reply (the proxy
  appends it to this side's ``host.log``, so the runner streams it). The worker's ``sys.stdout``
  and ``sys.stderr`` go to that log, and so do its file descriptors 1 and 2 (a ``memfd``).
* **Channel.** Commands and replies are small pickled tuples over a ``socketpair``
  (``multiprocessing`` ``Pipe``). The sequence's tokens travel as deltas (kept prefix, new tail).
* **Masks.** Every worker has a ``SharedMemory`` block of ``ceil(n_tokens / 32)`` int32 words,
  created here (so it is unlinked here). ``mid_process`` writes its bitmask there and replies with
  the word count; the proxy returns ``SampleWithBias`` with a copy of the block (a few KB: the
  copy keeps a result valid whatever happens to the worker afterwards).
* **Fork.** ``RemoteController.fork(host)`` creates the new sequence's channel and block here and
  sends both file descriptors to the worker (``SCM_RIGHTS``); the worker forks (twice, so that
  the new worker is re-parented to this process, a child subreaper on Linux, which can then
  reap it and read its exit status); the new process keeps the whole Python state (a script's
  suspended coroutine included: nothing is replayed), takes its new ``seq_id``, channel, block and
  log, and says hello. The new worker is a process group of its own.
* **Limits.** The proxy waits for each reply with the call's limit from ``runner.Limits``
  (``init_prompt`` also covers building the root controller, ``fork`` the fork); past it, it kills
  the worker's process group and raises ``ControllerTimeout`` naming the call and the limit, which
  the runner records as that sequence's error: only that sequence ends (unlike in-process, a call
  that never returns is interrupted). A worker that dies (``os._exit``, a signal) raises
  ``WorkerDied`` with its exit status or signal. ``Limits.max_sequences`` also bounds the live
  workers. ``memory_limit`` (bytes) caps each worker's address space growth (``RLIMIT_AS`` set to
  its size at start plus the limit), so a runaway allocation is a ``MemoryError`` in that worker.
* **Cleanup.** A worker whose controller returns ``Stop``, or that fails, is ended at once; every
  other worker is ended by ``close()`` (the context manager; also run when the object is garbage
  collected): its process group is killed, it is reaped, its block unlinked.
"""
from __future__ import annotations

import ctypes
import io
import math
import os
import select
import signal
import socket
import sys
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing import Pipe, reduction
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from .protocol import (
    Controller,
    ControllerError,
    ControllerHost,
    MidResult,
    PostResult,
    PreResult,
    SampleWithBias,
    Stop,
    VariableStore,
)
from .runner import Call, CallFailed, Limits, PipelinedController, run_chain

__all__ = [
    "ControllerTimeout",
    "ProcessControllers",
    "RemoteController",
    "RemoteError",
    "WorkerDied",
    "remote_factory",
]


class ControllerTimeout(ControllerError):
    """A worker did not answer a call within its limit (it was killed); ``call`` names the call."""

    logged = True  # the cause is in the sequence's log already

    def __init__(self, message: str, call: str = "") -> None:
        super().__init__(message)
        self.call = call


class WorkerDied(ControllerError):
    """A worker exited or was killed by a signal during a call."""

    logged = True  # the cause is in the sequence's log already


class RemoteError(ControllerError):
    """The controller raised in its worker (the worker's traceback is in the sequence's log). The
    exception raised here is a subclass named as the worker's exception (``ValueError`` ...), so
    the runner's message reads as in-process."""

    logged = True  # the worker's traceback is in the sequence's log already


_remote_types: dict[str, type[RemoteError]] = {}


def _remote_error(name: str, text: str) -> RemoteError:
    cls = _remote_types.get(name)
    if cls is None:
        cls = _remote_types[name] = type(name if name.isidentifier() else "RemoteError", (RemoteError,), {})
    return cls(text)


_subreaper_done = False


def _become_subreaper() -> bool:
    """Linux: orphaned descendants (forked sequences) are re-parented to this process, which can
    then reap them and read their exit status."""
    global _subreaper_done
    if not _subreaper_done and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper_done = libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            pass
    return _subreaper_done


def _block_size(n_words: int) -> int:
    """Bytes of a worker's shared block: the mask words, then (8-aligned) two float64: the index
    of the call of a chain the worker is running and when it started (``time.perf_counter``, the
    system's monotonic clock, the same in every process)."""
    return _status_offset(n_words) + 16


_DONE = -2
"""The call index a worker publishes once its chain is over (the parent set -1 when it sent it)."""
_SPIN_S = 100e-6
"""How long the runtime polls for the reply of a single worker before it sleeps on it."""
_RECHECK_S = 0.05
"""Longest sleep while waiting for workers: a worker that moves on to the next call of its chain
gets that call's (possibly shorter) limit, which the runtime sees when it next wakes."""
_WAITING = -3
"""... while a call waits for the runtime to answer a variable request."""


def _status_offset(n_words: int) -> int:
    return (n_words * 4 + 7) // 8 * 8


def _views(buf: Any, n_words: int) -> tuple[np.ndarray, np.ndarray]:
    """The mask words and the status pair of a shared block."""
    return (np.ndarray((n_words,), np.int32, buffer=buf),
            np.ndarray((2,), np.float64, buffer=buf, offset=_status_offset(n_words)))


def _delta(old: list[int], new: list[int]) -> tuple[int, list[int]] | None:
    """How to turn ``old`` into ``new``: (kept prefix, tail); None when equal."""
    n = len(old)
    if len(new) == n and new == old:
        return None
    if len(new) >= n and new[:n] == old:
        return n, new[n:]
    k = 0
    m = min(n, len(new))
    while k < m and old[k] == new[k]:
        k += 1
    return k, new[k:]


def _status_text(status: int | None) -> str:
    if status is None:
        return "exit status unknown"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by signal {sig} ({name})"
    if os.WIFEXITED(status):
        return f"exit status {os.WEXITSTATUS(status)}"
    return f"status {status}"


# ------------------------------------------------------------------------------------------------
# the worker side (runs in the forked process; never returns: os._exit)
# ------------------------------------------------------------------------------------------------


class _RemoteVariables(VariableStore):
    """The request's variables, asked of the parent over the worker's channel. The parent answers
    when it collects replies (after the model's forward pass): the time a call waits for an answer
    is not counted against its limit (``waited``; the start time published for the parent's
    deadline moves by as much)."""

    def __init__(self, worker: _Worker) -> None:
        super().__init__()
        self.worker = worker
        self.waited = 0.0

    def _ask(self, op: str, *args: Any) -> Any:
        w = self.worker
        t = time.perf_counter()
        running = w.progress[0]
        w.progress[0] = _WAITING  # no limit runs while the runtime owes the answer
        w.conn.send(("var", op, args))
        tag, value = w.conn.recv()
        dt = time.perf_counter() - t
        self.waited += dt
        w.progress[1] += dt
        w.progress[0] = running
        if tag == "varerr":  # the runtime refused it (the request's variables are full)
            raise ControllerError(value)
        assert tag == "varres", tag
        return value

    def get(self, name: str) -> bytes | None:
        return self._ask("get", str(name))

    def set(self, name: str, value: bytes | str) -> None:
        self._ask("set", str(name), value.encode() if isinstance(value, str) else bytes(value))

    def append(self, name: str, value: bytes | str) -> None:
        self._ask("append", str(name), value.encode() if isinstance(value, str) else bytes(value))

    def snapshot(self) -> dict[str, bytes]:
        return self._ask("snapshot")


class _Worker:
    """The state of one worker process."""

    def __init__(self, conn: Connection, buf: Any, n_words: int, log_fd: int) -> None:
        self.conn = conn
        self.buf = buf
        self.mask, self.progress = _views(buf, n_words)
        self.n_words = n_words
        self.host: ControllerHost | None = None
        self.ctrl: Controller | None = None
        self.synced: list[int] = []
        self.out_fd = -1
        self._capture_fds(log_fd)

    def _capture_fds(self, fd: int) -> None:
        """File descriptors 1 and 2, and the log (``_FdLog``), into the anonymous file ``fd`` the
        parent holds too (``_log_file``): read back after every call, and by the parent when the
        worker dies or is killed."""
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        import faulthandler
        if faulthandler.is_enabled():  # a crash dump goes to this worker's output, not the parent's stderr
            faulthandler.enable(file=2)
        if self.out_fd >= 0 and self.out_fd != fd:
            os.close(self.out_fd)  # the worker this one was forked from: its file
        self.out_fd = fd

    def take_log(self) -> str:
        return _take_text(self.out_fd)

    def reply(self, msg: tuple) -> None:
        """Send ``msg`` with the change the controller made to ``host.tokens`` (if any) and the log."""
        back = None
        if self.host is not None:
            back = _delta(self.synced, self.host.tokens)
            if back is not None:
                self.synced = list(self.host.tokens)
        self.conn.send(msg + (back, self.take_log()))

    def sync(self, delta: tuple[int, list[int]] | None) -> None:
        if delta is not None and self.host is not None:
            keep, tail = delta
            toks = self.host.tokens
            del toks[keep:]
            toks.extend(tail)
            self.synced = list(toks)

    def fail(self, exc: BaseException, call: str = "init_prompt") -> None:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.reply(("err", type(exc).__name__, str(exc), tb, call))

    def loop(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return
            op = msg[0]
            if op == "close":
                return
            try:
                if op == "fork":
                    self.do_fork(msg[1])
                    continue
                self.sync(msg[-1])
                ctrl = self.ctrl
                assert ctrl is not None
                if op == "chain":
                    self.chain(ctrl, msg[1])
                else:
                    raise ControllerError(f"unknown command {op!r}")
            except BaseException as exc:  # noqa: BLE001 (everything goes back to the parent)
                self.fail(exc)

    def result(self, r: object) -> object:
        """A result as it travels: a bitmask goes into the shared block (``("mask", words)``)."""
        if isinstance(r, SampleWithBias):
            if r.bitmask is None:
                return ("nomask",)
            bm = np.asarray(r.bitmask)
            if bm.dtype == np.int32 and bm.ndim == 1 and bm.shape[0] <= self.n_words:
                self.mask[:bm.shape[0]] = bm
                return ("mask", int(bm.shape[0]))
        return r  # anything else, a bad bitmask included: the runner judges it

    def chain(self, ctrl: Controller, calls: list[tuple[str, tuple]]) -> None:
        """Run a chain of calls (``runner.run_chain``), publishing in the shared block which call
        runs since when, so that the parent can enforce each call's own limit."""
        progress = self.progress
        variables = self.host.variables if self.host is not None else None
        paused = (lambda: variables.waited) if isinstance(variables, _RemoteVariables) else None

        def on_call(i: int) -> None:
            progress[1] = time.perf_counter()
            progress[0] = i

        try:
            results, times = run_chain(ctrl, calls, on_call=on_call, paused=paused, catch=BaseException)
        except CallFailed as failed:
            exc = failed.exc
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            progress[0] = _DONE
            self.reply(("err", type(exc).__name__, str(exc), tb, failed.call))
            return
        progress[0] = _DONE
        self.reply(("chain", [self.result(r) for r in results], times))

    def do_fork(self, new_id: int) -> None:
        """Fork the new sequence's worker: it gets a new channel and mask block (their descriptors
        follow the command) and the whole Python state of this one."""
        with socket.fromfd(self.conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as s:
            conn_fd, shm_fd, log_fd = reduction.recvfds(s, 3)
        pid = os.fork()
        if pid:
            os.close(conn_fd)
            os.close(shm_fd)
            os.close(log_fd)
            os.waitpid(pid, 0)  # the intermediate process exits at once
            self.reply(("ok", None))
            return
        # the intermediate: fork again and exit, so the new worker is re-parented (to the subreaper)
        try:
            mid = os.getpid()
            if os.fork():
                os._exit(0)
            while os.getppid() == mid:
                time.sleep(0.0002)
            os.setpgid(0, 0)
            old = self.conn
            self.conn = Connection(conn_fd)
            old.close()
            import mmap
            self.buf = mmap.mmap(shm_fd, _block_size(self.n_words))
            os.close(shm_fd)
            self.mask, self.progress = _views(self.buf, self.n_words)
            self._capture_fds(log_fd)
            host = self.host
            assert host is not None
            host.seq_id = new_id
            self.conn.send(("hello", os.getpid(), None, ""))
            self.loop()
        finally:
            os._exit(0)


class _FdLog(io.TextIOBase):
    """A worker's ``host.log`` and ``sys.stdout``: every write goes to its log file at once, so
    that the parent finds it there even if the worker is killed before its reply."""

    def __init__(self, worker: _Worker) -> None:
        self.worker = worker

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        data = str(text).encode("utf-8", errors="replace")
        view = memoryview(data)
        while view:
            view = view[os.write(self.worker.out_fd, view):]
        return len(text)

    def getvalue(self) -> str:
        """Nothing: the text is in the file (``take_log`` reads it)."""
        return ""


def _log_file() -> int:
    """An anonymous file for a worker's output (appended to; the parent keeps a descriptor)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("logitgate-worker-out")
    else:  # pragma: no cover (non-Linux POSIX)
        import tempfile
        fd, path = tempfile.mkstemp()
        os.unlink(path)
    import fcntl
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
    return fd


def _take_text(fd: int) -> str:
    """What a worker's log file holds (emptied)."""
    size = os.fstat(fd).st_size
    if not size:
        return ""
    text = os.pread(fd, size, 0).decode("utf-8", errors="replace")
    os.ftruncate(fd, 0)
    return text


def _worker_main(conn: Connection, buf: Any, n_words: int, factory: Callable[[ControllerHost], Controller],
                 parent_host: ControllerHost, memory_limit: int | None, close_fds: list[int], log_fd: int) -> None:
    try:
        os.setpgid(0, 0)
        for fd in close_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        w = _Worker(conn, buf, n_words, log_fd)
        log = _FdLog(w)
        sys.stdout = sys.stderr = log  # type: ignore[assignment]
        if memory_limit is not None:
            import resource
            with open("/proc/self/statm") as f:
                size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            cap = size + int(memory_limit)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        host = ControllerHost(parent_host.tokenizer, parent_host.tokenize_bytes, _RemoteVariables(w),
                              parent_host.seq_id, log, list(parent_host.tokens))
        w.host = host
        w.synced = list(host.tokens)
        try:
            w.ctrl = factory(host)
        except BaseException as exc:  # noqa: BLE001
            w.fail(exc)
            return
        w.reply(("hello", os.getpid()))
        w.loop()
    except BaseException:  # noqa: BLE001, S110 (a worker never returns into the parent's code)
        pass
    finally:
        os._exit(0)


def _readable(conns: Iterable[Connection], timeout: float | None) -> list[Connection]:
    """The connections with something to read (or closed) within ``timeout`` seconds (None: no
    limit): one ``poll`` system call (``multiprocessing.connection.wait`` builds a selector object
    each time, which costs more than the rest of collecting a reply)."""
    p = select.poll()
    by_fd = {}
    for c in conns:
        fd = c.fileno()
        by_fd[fd] = c
        p.register(fd, select.POLLIN | select.POLLPRI)
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    while True:
        try:
            return [by_fd[fd] for fd, _ in p.poll(ms)]
        except InterruptedError:  # pragma: no cover (PEP 475 retries; kept for old Pythons)
            continue


# ------------------------------------------------------------------------------------------------
# the parent side
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndedWorker:
    """A worker that was ended and reaped: its sequence, process id, mask block and wait status."""

    seq_id: int
    pid: int
    shm_name: str
    status: int | None

    @property
    def cause(self) -> str:
        return _status_text(self.status)


@dataclass
class _Handle:
    """A worker, as the parent knows it."""

    seq_id: int
    conn: Connection
    shm: SharedMemory
    pid: int = 0
    alive: bool = True
    status: int | None = None
    mask: np.ndarray | None = field(default=None, repr=False)
    progress: np.ndarray | None = field(default=None, repr=False)
    """The worker's (call index, start time) pair in the shared block."""
    ended: Any = field(default=None, repr=False)
    """Where to record this worker when it ends (``ProcessControllers.ended``)."""
    log_fd: int = -1
    """The worker's log file (``_log_file``)."""
    last_log: str = ""
    """What was left in it when the worker ended (a killed worker's last output)."""


def _end_worker(h: _Handle, graceful: bool = False) -> None:
    """Stop a worker's process group, reap it, close its channel and unlink its block."""
    if h.alive:
        h.alive = False
        if graceful:
            try:
                h.conn.send(("close",))
                h.conn.poll(0.5)  # EOF when it has exited
            except (OSError, EOFError, ValueError):
                pass
        if h.pid:
            for kill in (os.killpg, os.kill):
                try:
                    kill(h.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                _, h.status = os.waitpid(h.pid, 0)
            except ChildProcessError:  # not our child (no subreaper) or already reaped
                pass
            _reap_group(h.pid)
        try:
            h.conn.close()
        except OSError:
            pass
        if h.log_fd >= 0:
            try:
                h.last_log = _take_text(h.log_fd)
            finally:
                os.close(h.log_fd)
                h.log_fd = -1
        h.mask = h.progress = None
        try:
            h.shm.close()
        except BufferError:
            pass
        try:
            h.shm.unlink()
        except FileNotFoundError:
            pass
        if h.ended is not None:
            h.ended.append(EndedWorker(h.seq_id, h.pid, h.shm.name, h.status))


def _reap_group(pgid: int, wait_s: float = 0.2) -> None:
    """Reap what a worker's script forked (its process group, killed with it): those processes
    are re-parented to this process (the subreaper) and would stay zombies here. Best effort: one
    that left the group (``setsid``) is neither killed nor reaped."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:  # none left in the group (or none is our child)
            return
        if pid == 0:  # some are still dying
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)


def _end_all(handles: dict[int, _Handle]) -> None:
    for h in list(handles.values()):
        _end_worker(h)
    handles.clear()


class ProcessControllers:
    """A controller factory whose controllers run each in a worker process (see the module doc).

    ``factory(host) -> Controller`` is called in the root worker. ``limits`` gives the hard time
    limit of every call (defaults: ``runner.Limits()``) and the most live workers
    (``max_sequences``). ``memory_limit``: bytes each worker may add to its address space
    (``None``: no cap). Use it as a context manager, or call ``close()``: both end every worker.
    """

    def __init__(self, factory: Callable[[ControllerHost], Controller], limits: Limits | None = None, *,
                 memory_limit: int | None = None) -> None:
        if not hasattr(os, "fork"):
            raise OSError("ProcessControllers needs os.fork (POSIX)")
        from ..kernels import load_all

        load_all()  # loaded here, so every forked worker inherits them instead of loading its own
        self.factory = factory
        self.limits = limits if limits is not None else Limits()
        self.memory_limit = memory_limit
        self.handles: dict[int, _Handle] = {}
        self.ended: deque[EndedWorker] = deque(maxlen=4096)
        """The latest workers that ended (kept for diagnostics and tests)."""
        self._key = 0
        self.subreaper = _become_subreaper()
        self._finalizer = weakref.finalize(self, _end_all, self.handles)

    def __enter__(self) -> ProcessControllers:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End every worker (kill, reap, unlink its mask block)."""
        _end_all(self.handles)

    def live_workers(self) -> list[int]:
        """The process ids of the workers still running."""
        return [h.pid for h in self.handles.values() if h.alive]

    def _new_handle(self, seq_id: int, n_words: int) -> tuple[_Handle, Connection]:
        for key in [k for k, o in self.handles.items() if not o.alive]:
            del self.handles[key]
        if len(self.live_workers()) >= self.limits.max_sequences:
            raise ControllerError(f"a new worker would exceed {self.limits.max_sequences} live sequences")
        ours, theirs = Pipe(duplex=True)
        shm = SharedMemory(create=True, size=_block_size(n_words))
        h = _Handle(seq_id, ours, shm, ended=self.ended, log_fd=_log_file())
        h.mask, h.progress = _views(shm.buf, n_words)
        self._key += 1
        self.handles[self._key] = h
        return h, theirs

    def __call__(self, host: ControllerHost) -> RemoteController:
        """The root controller of a run, in a new worker forked from this process."""
        n_words = (host.tokenizer.n_tokens + 31) // 32
        h, theirs = self._new_handle(host.seq_id, n_words)
        close_fds = [fd for o in self.handles.values() if o is not h and o.alive
                     for fd in (o.conn.fileno(), o.log_fd)]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker
            try:
                h.conn.close()
            finally:
                _worker_main(theirs, h.shm.buf, n_words, self.factory, host, self.memory_limit, close_fds, h.log_fd)
        h.pid = pid
        theirs.close()
        proxy = RemoteController(self, h, host, n_words)
        proxy._wait("init_prompt", expect="hello")
        return proxy


def remote_factory(factory: Callable[[ControllerHost], Controller], limits: Limits | None = None, *,
                   memory_limit: int | None = None) -> ProcessControllers:
    """``ProcessControllers(factory, limits, memory_limit=...)``: a factory for ``run_controller``."""
    return ProcessControllers(factory, limits, memory_limit=memory_limit)


class RemoteController(PipelinedController):
    """The parent-side proxy of a controller that runs in a worker process. Every call is a chain
    (``runner.run_chain``) sent as one message; the runner starts chains on many workers before it
    collects them (``finish_many``), so the workers run in parallel with each other and with the
    model."""

    def __init__(self, runtime: ProcessControllers, handle: _Handle, host: ControllerHost, n_words: int,
                 sent: list[int] | None = None) -> None:
        self.runtime = runtime
        self.handle = handle
        self.host = host
        self.n_words = n_words
        self._sent = list(host.tokens) if sent is None else sent
        self._chain: list[str] = []
        self._sent_at = 0.0

    @property
    def pid(self) -> int:
        """The worker process's id."""
        return self.handle.pid

    def _send(self, what: str, *args: Any) -> None:
        h = self.handle
        if not h.alive:
            raise ControllerError(f"the worker of sequence {self.host.seq_id} has ended")
        delta = _delta(self._sent, self.host.tokens)
        if delta is not None:
            self._sent = list(self.host.tokens)
        try:
            h.conn.send((what, *args, delta))
        except (OSError, EOFError, ValueError):
            self._died(what)

    def _died(self, what: str) -> None:
        h = self.handle
        _end_worker(h)
        self.host.log.write(h.last_log)  # what it wrote during the call it died in
        self.host.log.write(f"\n[logitgate] the worker (pid {h.pid}) of sequence {self.host.seq_id} died during "
                            f"{what}: {_status_text(h.status)}\n")
        raise WorkerDied(f"the worker of sequence {self.host.seq_id} (pid {h.pid}) died during {what}: "
                         f"{_status_text(h.status)}") from None

    def _timeout(self, what: str, limit: float) -> None:
        h = self.handle
        _end_worker(h)
        self.host.log.write(h.last_log)  # what it wrote during the call it was killed in
        self.host.log.write(f"\n[logitgate] the worker (pid {h.pid}) was killed: {what} did not return within "
                            f"its limit of {limit * 1e3:.0f} ms\n")
        raise ControllerTimeout(f"{what} did not return within its limit of {limit * 1e3:.0f} ms "
                                f"(the worker was killed)", what)

    def _handle_msg(self, msg: tuple, what: str, expect: str) -> tuple | None:
        """Act on one message from the worker: answer a variable request (None), or return the
        final reply, having applied its token changes and log (an ``err`` reply raises)."""
        host = self.host
        if msg[0] == "var":
            _, op, args = msg
            if op not in ("get", "set", "append", "snapshot"):
                self.handle.conn.send(("varerr", f"no variable operation {str(op)[:40]!r}"))
                return None
            try:
                value = getattr(host.variables, op)(*args)
            except Exception as exc:  # noqa: BLE001 (the controller's own error, raised in its worker)
                self.handle.conn.send(("varerr", f"variables.{op}: {exc}"))
                return None
            self.handle.conn.send(("varres", value))
            return None
        back, log = msg[-2], msg[-1]
        if log:
            host.log.write(log)
        if back is not None:  # the controller changed host.tokens (as an in-process one may)
            keep, tail = back
            del host.tokens[keep:]
            host.tokens.extend(tail)
            self._sent = list(host.tokens)
        if msg[0] == "err":
            name, text, tb, call = msg[1:5]
            host.log.write(tb)
            _end_worker(self.handle)
            exc = _remote_error(name, text)
            if expect == "hello":  # building the controller failed
                raise exc
            raise CallFailed(call, exc)
        if msg[0] == "hello":
            if expect != "hello":
                raise ControllerError(f"unexpected hello from the worker during {what}")
            self.handle.pid = msg[1]
            return msg
        if expect == "hello":
            raise ControllerError(f"the worker said {msg[0]!r} instead of hello")
        return msg

    def _wait(self, what: str, expect: str = "ok") -> tuple:
        """The worker's reply to ``what`` (not a chain), within that call's limit."""
        conn = self.handle.conn
        limit = getattr(self.runtime.limits, what)
        deadline = time.perf_counter() + limit
        while True:
            left = deadline - time.perf_counter()
            try:
                if not (left > 0 and conn.poll(left)):
                    self._timeout(what, limit)
                msg = conn.recv()
            except (EOFError, OSError):
                self._died(what)
            final = self._handle_msg(msg, what, expect)
            if final is not None:
                return final

    # -- chains -----------------------------------------------------------------------------------
    def start_calls(self, calls: Sequence[Call]) -> None:
        self._chain = [name for name, _ in calls]
        st = self.handle.progress
        if st is not None:
            st[0] = -1.0  # not started yet: the first call's limit counts from now
        self._sent_at = time.perf_counter()
        self._send("chain", [(name, tuple(args)) for name, args in calls])

    def _deadline(self) -> tuple[float, str, float]:
        """When the running call of the chain overruns its limit: (time, call, limit)."""
        limits = self.runtime.limits
        st = self.handle.progress
        i, started = -1, self._sent_at
        if st is not None:
            for _ in range(3):  # the worker writes the start time, then the index
                i = int(st[0])
                t = float(st[1])
                if int(st[0]) == i:
                    break
            if i == _DONE:  # the reply is on its way (or waiting to be read): no limit runs
                return float("inf"), "", 0.0
            if i == _WAITING:  # for the runtime's answer: look again soon, judge nothing now
                return time.perf_counter() + 0.005, "", float("inf")
            if i >= 0:
                started = t
        name = self._chain[max(i, 0)] if self._chain else "call"
        limit = getattr(limits, name, limits.mid_process)
        return started + limit, name, limit

    def _chain_result(self, msg: tuple) -> tuple[list[object], list[float]]:
        results: list[object] = []
        for r in msg[1]:
            if isinstance(r, tuple) and r and r[0] == "mask":
                assert self.handle.mask is not None
                r = SampleWithBias(self.handle.mask[:r[1]].copy())
            elif isinstance(r, tuple) and r == ("nomask",):
                r = SampleWithBias(None)
            results.append(r)
        if any(isinstance(r, Stop) for r in results):
            _end_worker(self.handle, graceful=True)
        return results, list(msg[2])

    def _receive(self) -> tuple[list[object], list[float]] | None:
        """Read one message of the running chain: its result, or None (answered a request)."""
        what = "/".join(self._chain) or "call"
        try:
            msg = self.handle.conn.recv()
        except (EOFError, OSError):
            self._died(what)
        final = self._handle_msg(msg, what, "ok")
        if final is None:
            return None
        if final[0] != "chain":
            raise ControllerError(f"the worker said {final[0]!r} instead of the results of {what}")
        return self._chain_result(final)

    def finish_calls(self) -> tuple[list[object], list[float]]:
        r = self.finish_many([self])[0]
        if isinstance(r, BaseException):
            raise r
        return r

    @classmethod
    def finish_many(cls, controllers: Sequence[PipelinedController]) -> list[tuple | BaseException]:
        """Collect the chains of many workers as their replies arrive (answering their variable
        requests meanwhile); a worker whose running call overruns its limit is killed."""
        out: dict[int, tuple | BaseException] = {}
        pending = {c.handle.conn: c for c in controllers}  # type: ignore[attr-defined]
        while pending:
            now = time.perf_counter()
            soonest = min(c._deadline()[0] for c in pending.values())
            ready = _readable(pending, 0.0)
            if not ready and len(pending) == 1 and soonest > now:
                # one sequence: spin briefly (a wake-up from sleep costs 30-60 µs on small
                # machines); with many, the workers need the CPU more than the runtime does
                spin_end = min(soonest, now + _SPIN_S)
                while not ready and time.perf_counter() < spin_end:
                    ready = _readable(pending, 0.0)
            if not ready and soonest > time.perf_counter():
                ready = _readable(pending, min(_RECHECK_S, soonest - time.perf_counter()))
            if not ready:
                now = time.perf_counter()
                for conn, c in list(pending.items()):
                    deadline, name, limit = c._deadline()
                    if deadline <= now and limit != float("inf") and not _readable([conn], 0.0):
                        del pending[conn]
                        try:
                            c._timeout(name, limit)
                        except ControllerError as exc:
                            out[id(c)] = exc
                continue
            for conn in ready:
                c = pending[conn]
                try:
                    res = c._receive()
                except Exception as exc:  # noqa: BLE001
                    out[id(c)] = exc
                    del pending[conn]
                    continue
                if res is not None:
                    out[id(c)] = res
                    del pending[conn]
        return [out[id(c)] for c in controllers]

    def _call(self, what: str, *args: Any) -> Any:
        """One call as a chain of one, raising the controller's own error (as in process)."""
        self.start_calls([(what, args)])
        try:
            results, _ = self.finish_calls()
        except CallFailed as failed:
            raise failed.exc from None
        return results[0] if results else None

    def init_prompt(self, prompt: list[int]) -> None:
        self._call("init_prompt", list(prompt))

    def pre_process(self) -> PreResult:
        return self._call("pre_process")

    def mid_process(self, fork_group: list[int]) -> MidResult:
        return self._call("mid_process", list(fork_group))

    def post_process(self, tokens: list[int], backtrack: int = 0) -> PostResult:
        return self._call("post_process", list(tokens), int(backtrack))

    def close(self) -> None:
        """End the worker (the runner calls this when the sequence ends for any reason)."""
        if self.handle.alive:
            _end_worker(self.handle, graceful=True)

    def fork(self, host: ControllerHost) -> RemoteController:
        """The worker forks: the new process keeps the controller's state (nothing is replayed)."""
        h = self.handle
        if not h.alive:
            raise ControllerError(f"the worker of sequence {self.host.seq_id} has ended")
        new, theirs = self.runtime._new_handle(host.seq_id, self.n_words)
        try:
            h.conn.send(("fork", host.seq_id))
            with socket.fromfd(h.conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as s:
                reduction.sendfds(s, [theirs.fileno(), new.shm._fd, new.log_fd])  # type: ignore[attr-defined]
        except (OSError, EOFError, ValueError):
            theirs.close()
            _end_worker(new)
            self._died("fork")
        theirs.close()
        proxy = RemoteController(self.runtime, new, host, self.n_words, list(self._sent))
        try:
            self._wait("fork")  # the worker forked (or says why not)
            proxy._wait("fork", expect="hello")
        except ControllerError:
            _end_worker(new)
            raise
        return proxy
