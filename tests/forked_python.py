"""`python ARGV` for many commands, without paying interpreter start-up for each.

A command-line test runs `python -m cfgrad …` as a user does, in a process of its own.
Most of such a process's time is start-up (the interpreter, numpy, rich and cfgrad
imported: ~0.6 s of CPU), so a test file with a hundred commands spent a minute starting
processes. `PythonServer` starts one server process that imports those modules once; for
each command it forks a child, which takes the command's working directory, environment,
`sys.argv` and `sys.path[0]` as `python ARGV` would set them, runs the module, `-c` code
or script with runpy, and exits with the status Python would (0, SystemExit's code, or 1
after printing an uncaught exception's traceback). Each command still has a process of
its own, forked from a server that has run nothing but imports (one thread, no Numba), so
no command sees what another did; what differs from a fresh interpreter is only that the
preloaded modules are imported before the command starts (tests/tools/test_cli.py compares a
real `python -m cfgrad` run with a forked one). Where there is no `os.fork`, commands run
as real subprocesses.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HANG_GUARD = 300.0  # seconds a batch of commands may take: stuck, not slow (no timing)

# The server: reads one JSON batch of commands per line, forks at most `parallel` children
# at a time, and answers with one JSON line of exit statuses.
SERVER = r"""
import json, os, runpy, sys, traceback, types
for name in sys.argv[1:]:
    __import__(name)

def child(argv, env, cwd, out, err):
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file in argv[0]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""
            main = sys.modules["__main__"] = types.ModuleType("__main__")
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        status = 0
    except SystemExit as exc:
        status = exc.code
        if status is None:
            status = 0
        elif not isinstance(status, int):
            print(status, file=sys.stderr)
            status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status & 0xFF)

for line in sys.stdin:
    batch, parallel = json.loads(line)
    statuses, running = [None] * len(batch), {}
    for i, command in enumerate(batch):
        while len(running) >= parallel:
            pid, status = os.wait()
            statuses[running.pop(pid)] = os.waitstatus_to_exitcode(status)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            child(**command)
        running[pid] = i
    while running:
        pid, status = os.wait()
        statuses[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    print(json.dumps(statuses), flush=True)
"""


class PythonServer:
    """Runs `python ARGV` commands (`-m MODULE …`, `-c CODE …` or `SCRIPT …`) in forked
    children of one server that has imported `preload`; started on first use."""

    def __init__(self, preload: Sequence[str] = (), parallel: int = 4):
        self.preload, self.parallel = list(preload), parallel
        self._server: subprocess.Popen | None = None
        self._files: tempfile.TemporaryDirectory | None = None

    def run(self, argv: Sequence[str], env: dict[str, str] | None = None,
            cwd: Path | str = ".") -> subprocess.CompletedProcess:
        return self.run_many([argv], env, cwd)[0]

    def run_many(self, argvs: Sequence[Sequence[str]], env: dict[str, str] | None = None,
                 cwd: Path | str = ".") -> list[subprocess.CompletedProcess]:
        """Each of `argvs` as `python ARGV` with `env` (default: this process's) in `cwd`,
        its output captured as text, like `subprocess.run(capture_output=True, text=True)`."""
        env = dict(os.environ if env is None else env)
        if not hasattr(os, "fork"):
            return [subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                                   env=env, cwd=cwd, timeout=HANG_GUARD) for argv in argvs]
        if self._server is None:
            self._files = tempfile.TemporaryDirectory(prefix="forked_python_")
            self._server = subprocess.Popen([sys.executable, "-c", SERVER, *self.preload],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True, start_new_session=True)
        base = Path(self._files.name)
        commands = [{"argv": list(argv), "env": env, "cwd": str(Path(cwd).resolve()),
                     "out": str(base / f"{i}.out"), "err": str(base / f"{i}.err")}
                    for i, argv in enumerate(argvs)]
        statuses = self._ask([commands, self.parallel])
        return [subprocess.CompletedProcess([sys.executable, *c["argv"]], status,
                                            Path(c["out"]).read_text(),
                                            Path(c["err"]).read_text())
                for c, status in zip(commands, statuses)]

    def _ask(self, request: list) -> list[int]:
        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        ready, _, _ = select.select([self._server.stdout], [], [], HANG_GUARD)
        if not ready:
            os.killpg(self._server.pid, signal.SIGKILL)  # the server and its children
            self.close()
            raise subprocess.TimeoutExpired(f"python {request[0][0]['argv']} …", HANG_GUARD)
        line = self._server.stdout.readline()
        if not line:
            self.close()
            raise RuntimeError("the server of forked python commands exited")
        return json.loads(line)

    def close(self) -> None:
        """Stop the server (between batches it has no children) and remove the output
        files; a later command starts a new one."""
        if self._server is not None:
            self._server.stdin.close()  # the server's loop ends
            self._server.wait()
            self._server.stdout.close()
            self._files.cleanup()
            self._server = self._files = None
