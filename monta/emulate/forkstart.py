"""Start a rank by forking the supervisor after it imported the ranks' heavy modules once.

Every rank of an emulated job used to start as ``python -m MODULE``: 8 or 16 interpreters each importing
torch (2.5 s of CPU), DeepSpeed (0.7 s) and, at DeepSpeed's first ``initialize``, torch._dynamo (3.7 s,
through the Muon optimizer's ``torch.compile`` decorators), all at once on the machine's 2 cores. An
8-rank training step spent ~40 s of wall time importing before its first step; 16 ranks twice that.
Here the supervisor imports them once (``preload``) and each rank is a fork of it that then runs MODULE as
``__main__``, exactly what ``python -m`` would run, in a process of its own: its own PID, session, node
namespaces, dropped capabilities, environment, log and exit status. The rank's start is what
``preexec_fn`` did before ``exec``; only the ``exec`` and the imports are gone. torch supports being
forked after import (a DataLoader's workers are forked this way); nothing here has started a thread
pool or a process group before the fork.

``MONTA_RANK_FORK=0`` starts every rank with ``exec`` again (a fresh interpreter per rank).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence

FORK_ENV = "MONTA_RANK_FORK"


def module_of(argv: Sequence[str]) -> str | None:
    """MODULE when ``argv`` is ``[this python, -m, MODULE, ...]`` (what a fork can run), else None."""
    if len(argv) >= 3 and argv[1] == "-m" and os.path.realpath(argv[0]) == os.path.realpath(sys.executable):
        return argv[2]
    return None


def enabled(argv: Sequence[str], preload: Sequence[str]) -> bool:
    return bool(preload) and module_of(argv) is not None and os.environ.get(FORK_ENV, "1") != "0"


def import_all(preload: Sequence[str]) -> str | None:
    """Import ``preload`` into this process; None, or why not (the ranks then start with exec and meet the
    same error themselves, in their own logs)."""
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as e:  # an ImportError, or a module failing at import time
            return f"cannot preload {name} ({type(e).__name__}: {e}); every rank starts its own interpreter"
    return None


class ForkedRank:
    """What the supervisor keeps of a rank it forked: the fields of ``subprocess.Popen`` it reads."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None


def start(
    argv: Sequence[str],
    env: Mapping[str, str],
    stdout_fd: int | None,
    stderr_fd: int,
    prepare: Callable[[], None],
    close: Sequence[int] = (),
) -> ForkedRank:
    """Fork a rank that runs ``argv``'s module as ``__main__`` with ``env`` as its whole environment,
    ``stdout_fd``/``stderr_fd`` as its fds 1/2 (``stdout_fd`` None: the supervisor's own stdout), stdin
    from /dev/null, in a new session; ``prepare`` runs first in the child (enter the node's namespaces,
    drop capabilities), as ``preexec_fn`` did; ``close``: fds the rank must not keep (closed in the child
    once used; the parent closes its own copies). The parent returns at once; it reaps the child itself."""
    module = module_of(argv)
    if module is None:
        raise ValueError(f"argv={list(argv)!r}: a forked rank runs `{sys.executable} -m MODULE ...`")
    for stream in (sys.stdout, sys.stderr):  # buffered output would be written twice, by parent and child
        stream.flush()
    pid = os.fork()
    if pid:
        return ForkedRank(pid)
    _child(module, list(argv[3:]), dict(env), (stdout_fd, stderr_fd), prepare, close)  # never returns


def _child(
    module: str,
    args: list[str],
    env: dict[str, str],
    stdio: tuple[int | None, int],
    prepare: Callable[[], None],
    close: Sequence[int],
) -> None:
    stdout_fd, stderr_fd = stdio
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if stdout_fd is not None:
            os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)  # from here on a failure's traceback lands in the rank's log
        prepare()
        for fd in {*close, stderr_fd, stdout_fd} - {None, 0, 1, 2}:
            os.close(fd)
        _fresh_process_state(env)
        code = _run(module, args)
    except BaseException:  # the rank's set-up failed: say so in its log, exit 1 (never return to the supervisor)
        try:
            import traceback

            traceback.print_exc()
        except BaseException:
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code)


def _fresh_process_state(env: dict[str, str]) -> None:
    """What a fresh interpreter would have that the supervisor changed: the environment, the signal
    dispositions (Python's own: SIGINT raises KeyboardInterrupt, SIGTERM/SIGHUP kill), faulthandler."""
    import signal

    os.environ.clear()
    os.environ.update(env)
    _name_process(f"monta-rank{env.get('RANK', '')}")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if env.get("PYTHONFAULTHANDLER"):
        import faulthandler

        faulthandler.enable(all_threads=True)


def _name_process(name: str) -> None:
    """/proc/PID/comm (what ps, top and py-spy show; 15 bytes): a forked rank's command line is still the
    supervisor's, so this is what tells the ranks apart (tools/faults.py finds them by it)."""
    import ctypes

    pr_set_name = 15
    ctypes.CDLL(None).prctl(pr_set_name, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def _run(module: str, args: list[str]) -> int:
    """``python -m module args``'s run and exit: the module as ``__main__``, then what the interpreter does
    at exit (wait for non-daemon threads, atexit handlers); its exit code."""
    import atexit
    import runpy
    import threading
    import traceback

    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = _exit_code(e.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # the interpreter's own exit step (multiprocessing's forked children call it too)
    atexit._run_exitfuncs()
    return code


def _exit_code(value: object) -> int:
    """``sys.exit(value)``'s status, as the interpreter gives it (a message goes to stderr, status 1)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1
