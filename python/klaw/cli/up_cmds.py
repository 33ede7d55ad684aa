"""`klaw up`: engine + gateway as child processes, and `klaw chat` in the foreground.

What `make run` starts. The daemons log to `$XDG_STATE_HOME/klaw/logs/{engine,
gateway}.log`; a daemon that is already running (e.g. under systemd) is used as it
is. Leaving the chat (Ctrl-D, /quit) or Ctrl-C stops the daemons this command
started: SIGTERM, then SIGKILL after a grace period.

Stopping is not interrupted: Ctrl-C (or SIGTERM, SIGHUP) while the daemons stop is
noted, the stop goes on to its end (the engine may be finishing a reply), and the
command then exits with `INTERRUPTED` (130, as for a shell command ended by Ctrl-C)
instead of the chat's status. Nothing is left running either way.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

from klaw.paths import KlawPaths

START_TIMEOUT_S = 120.0  # the first start may build the model cache
STOP_TIMEOUT_S = 70.0  # the engine waits up to 60 s for in-flight replies
INTERRUPTED = 130  # the exit status after a Ctrl-C while stopping


def _err(msg: str) -> int:
    print(f"klaw: {msg}", file=sys.stderr)
    return 1


def _alive(path: Path) -> bool:
    import socket

    if not path.exists():
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(1.0)
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _spawn(name: str, paths: KlawPaths) -> subprocess.Popen[bytes]:
    paths.logs.mkdir(parents=True, exist_ok=True)
    print(f"starting the {name} (log: {paths.logs / f'{name}.log'})", file=sys.stderr)
    # The child keeps its own copy of the descriptor; ours is closed on return.
    with open(paths.logs / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "klaw.cli.app", name],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # stopped in order by us, not by the tty's Ctrl-C
            preexec_fn=_die_with_parent,
        )


def _die_with_parent() -> None:
    """In the child: SIGTERM when `klaw up` dies, however it dies (Linux prctl)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _wait_for(path: Path, proc: subprocess.Popen[bytes], name: str, paths: KlawPaths) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _alive(path):
            return True
        if proc.poll() is not None:
            tail = _tail(paths.logs / f"{name}.log")
            print(f"klaw: the {name} exited with code {proc.returncode}:\n{tail}", file=sys.stderr)
            return False
        time.sleep(0.1)
    print(f"klaw: the {name} did not start within {START_TIMEOUT_S:.0f} s", file=sys.stderr)
    return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class _Signals:
    """SIGINT, SIGTERM and SIGHUP for `klaw up`: KeyboardInterrupt (it unwinds to the
    stop) until stopping began; from then on only counted, since one raised inside the
    stop would leave daemons behind. `stopping` is set by the first statement of each
    way out (no signal is handled before an assignment)."""

    def __init__(self) -> None:
        self.stopping = False
        self.during_stop = 0  # signals that came while stopping
        self._told = False

    def __call__(self, signum: int, frame: object) -> None:
        if self.stopping:
            self.during_stop += 1
            return
        # Not marked here: readline swallows an exception raised while it draws the
        # prompt, and the next Ctrl-C must still leave the chat.
        raise KeyboardInterrupt

    def tell(self) -> None:
        """Says once that a signal during the stop does not cut it short."""
        if self.during_stop and not self._told:
            self._told = True
            print("still stopping: klaw up exits once both daemons have stopped", file=sys.stderr)


def _stop(procs: list[tuple[str, subprocess.Popen[bytes]]], signals: _Signals) -> None:
    # Gateway first: it stops polling and keeps its buffer; then the engine.
    for name, proc in procs:
        if proc.poll() is None:
            print(f"stopping the {name}", file=sys.stderr)
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while proc.poll() is None:
                signals.tell()
                if time.monotonic() >= deadline:
                    proc.kill()
                    proc.wait()
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(0.2)
    signals.tell()


def up() -> int:
    # A closed terminal (SIGHUP) or a plain kill (SIGTERM) must stop the daemons too.
    signals = _Signals()
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signals)
    try:
        code = _up(signals)
    except KeyboardInterrupt:  # before anything was started
        code = 0
    return INTERRUPTED if signals.during_stop else code


def _up(signals: _Signals) -> int:
    paths = KlawPaths.from_env()
    if not paths.engine_config.exists():
        from klaw.cli.setup_cmds import init

        if init(None) != 0:
            return 1
    from klaw.config import load_gateway_config
    from klaw.errors import ConfigError

    try:
        if not load_gateway_config(paths.gateway_config).channels.console.enabled:
            return _err(
                "the console channel is off (channels.console.enabled in "
                f"{paths.gateway_config}); `klaw up` chats through it"
            )
    except ConfigError as exc:
        return _err(str(exc))
    started: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        code = _start_and_chat(paths, started)
        signals.stopping = True  # a signal just before this is caught below
    except KeyboardInterrupt:
        signals.stopping = True
        code = 0
    finally:
        signals.stopping = True  # the stop is not interrupted: signals are counted
        _stop(started, signals)
        if started:
            print("stopped", file=sys.stderr)
    return code


def _start_and_chat(paths: KlawPaths, started: list[tuple[str, subprocess.Popen[bytes]]]) -> int:
    """Starts what is not running (added to `started`, first to stop first) and chats."""
    for name, sock in (("engine", paths.socket), ("gateway", paths.console_socket)):
        if _alive(sock):
            print(f"using the running {name}", file=sys.stderr)
            continue
        proc = _spawn(name, paths)
        started.insert(0, (name, proc))
        if not _wait_for(sock, proc, name, paths):
            return 1
    from klaw.cli.chat_cmds import chat

    return chat()
