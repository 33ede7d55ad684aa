"""`klaw chat`: talk to the agent in a terminal, through the gateway's console socket.

The gateway (`klaw gateway`) serves `KlawPaths.console_socket`; this client sends
each line you type as ``{"type":"say","text":...}`` and prints what comes back
(replies, a "…" while the agent is typing, errors) the moment it arrives, above the
line you are typing. The wire format is described in `klaw.gateway.channels.console`.

Line editing and history come from GNU readline (``input()``); the history is kept
in ``$XDG_STATE_HOME/klaw/chat_history`` (mode 600), merged with what other
terminals saved meanwhile. ``/quit`` and ``/exit`` are handled here, not sent.

Exit status: 0 when you leave, by Ctrl-D, ``/quit``, ``/exit`` or Ctrl-C (leaving
is the normal way out of a chat, so Ctrl-C is not reported as a failure); 1 when the
gateway is not running or closes the connection.

Start-up stays light: only the standard library and `klaw.paths` are imported here
(not the gateway, pydantic or httpx).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType, ModuleType
from typing import BinaryIO

from klaw.paths import KlawPaths
from klaw.wire.console import (
    ConsoleError,
    ConsoleMessage,
    Hello,
    Reply,
    Say,
    Typing,
    decode_console,
    encode_console,
)
from klaw.wire.protocol import ProtocolError

__all__ = ["chat"]

PROMPT = "> "
TYPING = "…"
HISTORY_FILE = "chat_history"
HISTORY_LENGTH = 1000
#: How long to wait for the gateway's hello (the command hint) before the first prompt.
HELLO_WAIT = 1.0
#: Without a terminal (``echo hi | klaw chat``): how long to wait at end of input for
#: a reply to the last line.
REPLY_WAIT = 120.0
LEAVE_WORDS = ("/quit", "/exit")

NOT_RUNNING = (
    "the gateway is not running: start it with `klaw gateway` (and `klaw engine`), "
    "or use `make run`"
)


class _GatewayGone(Exception):
    """Raised in the main thread (by a signal) when the gateway closed the connection."""


# Control characters (ESC above all) in a reply must not drive the terminal.
_CONTROLS = {c: None for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if c not in (9, 10)}


def _printable(text: str) -> str:
    return text.replace("\r\n", "\n").translate(_CONTROLS)


def _err(message: str) -> None:
    print(f"klaw: {message}", file=sys.stderr)


class _Screen:
    """The terminal, shared by the prompt (main thread) and the reader thread.

    A line arriving while you type is printed above the prompt: the prompt line is
    cleared, the text written, and the prompt with your unfinished input redrawn.
    The main thread holds `lock` from just before ``input()`` until readline's
    pre-input hook says the prompt is on the screen, so nothing is written while
    readline draws it.
    """

    def __init__(self, readline: ModuleType | None) -> None:
        self.readline = readline  # None without a terminal: plain lines, no prompt
        self.lock = threading.Lock()
        self.at_prompt = False  # readline is reading a line (the prompt is on screen)
        self.typing_above = False  # the "…" line is right above the prompt
        self.typing_shown = False  # "…" was shown for the answer being waited for
        self.away_shown = False
        self._drawing = False  # the main thread holds `lock` while readline draws

    def before_input(self) -> None:
        """Main thread, right before ``input()``: hold the screen until the prompt is up."""
        self.lock.acquire()
        self._drawing = True

    def prompt_shown(self) -> None:
        """readline's pre-input hook (main thread): the prompt is on the screen now."""
        self.at_prompt = True
        if self._drawing:
            self._drawing = False
            self.lock.release()

    def line_entered(self) -> None:
        """Main thread, after ``input()`` returned or raised."""
        if self._drawing:  # the hook did not run
            self._drawing = False
            self.lock.release()
        with self.lock:
            self.at_prompt = False
            self.typing_above = False  # Enter moved the screen on

    def show(self, text: str) -> None:
        text = _printable(text)
        with self.lock:
            self._write(text, replace_typing=True)
            self.typing_shown = False

    def typing(self) -> None:
        if self.readline is None:
            return
        with self.lock:
            if self.typing_shown:
                return
            self._write(TYPING, replace_typing=False)
            self.typing_shown = True
            self.typing_above = self.at_prompt

    def _write(self, text: str, *, replace_typing: bool) -> None:
        out = sys.stdout
        if self.readline is None or not self.at_prompt:
            out.write(text + "\n")
            out.flush()
            return
        buf = self.readline.get_line_buffer()
        seq = "\r\x1b[K"  # clear the prompt line
        if replace_typing and self.typing_above and len(PROMPT) + len(buf) < _columns():
            seq += "\x1b[A\x1b[K"  # and the "…" line above it
        self.typing_above = False
        out.write(seq + text + "\n" + PROMPT + buf)
        out.flush()


def _columns() -> int:
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


class _Session:
    def __init__(self, sock: socket.socket, screen: _Screen) -> None:
        self.sock = sock
        self.screen = screen
        self.hello = threading.Event()
        self.replied = threading.Event()  # a reply came after the last line sent
        self.closed = threading.Event()  # the gateway closed the connection
        self.leaving = False  # the main thread is on its way out: no more signals
        self.left = threading.Event()  # set together with `leaving`
        self.hint_lock = threading.Lock()
        self.commands_shown = False
        self.leave_shown = False

    def send(self, text: str) -> None:
        self.replied.clear()
        self.sock.sendall(encode_console(Say(text=text)))

    def read(self, stream: BinaryIO) -> None:
        """The reader thread: prints what the gateway sends until the connection ends."""
        try:
            for raw in stream:
                try:
                    msg = decode_console(raw)
                except ProtocolError:
                    continue  # a newer gateway's message type, or damage: skip it
                self._handle(msg)
        except (OSError, ValueError):
            pass  # closed under us while leaving
        self.closed.set()
        self.hello.set()
        if self.leaving:
            return
        self.screen.show("the gateway closed the connection; run `klaw chat` again once it is back")
        # Interrupt input() in the main thread. CPython's readline loop looks at signals
        # only when one interrupts its select(); one that lands while it draws the prompt
        # or handles a key waits for the next signal, so repeat until the main thread left.
        main = threading.main_thread().ident or 0
        while not self.leaving:
            signal.pthread_kill(main, signal.SIGUSR1)
            if self.left.wait(0.2):
                break

    def leave(self) -> None:
        self.leaving = True
        self.left.set()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGUSR1 from the reader: the gateway is gone (never raised once leaving).

        Raised again at each repeat until the main thread leaves: one raised inside
        readline's pre-input hook is swallowed by readline."""
        if not self.leaving:
            raise _GatewayGone

    def _handle(self, msg: ConsoleMessage) -> None:
        if isinstance(msg, Reply):
            if msg.queued and not self.screen.away_shown:
                self.screen.away_shown = True
                self.screen.show("(while you were away)")
            self.screen.show(msg.text)
            self.replied.set()
        elif isinstance(msg, Typing):
            self.screen.typing()
        elif isinstance(msg, ConsoleError):
            self.screen.show(f"error: {msg.message}")
        elif isinstance(msg, Hello):
            self.hint([f"/{name}" for name, _ in msg.commands if name])
            self.hello.set()

    def hint(self, commands: list[str]) -> None:
        """Shows the commands once, and how to leave (interactive only)."""
        if self.screen.readline is None:
            return
        with self.hint_lock:
            parts = []
            if commands and not self.commands_shown:
                self.commands_shown = True
                parts.append("commands: " + " ".join(commands))
            if not self.leave_shown:
                self.leave_shown = True
                parts.append("/quit or Ctrl-D to leave")
            if parts:
                self.screen.show(" · ".join(parts))


def _load_history(readline: ModuleType, path: Path) -> int:
    """Reads the saved history; returns how many entries came from the file."""
    readline.set_history_length(-1)  # keep all of this session's lines until saving
    try:
        readline.read_history_file(str(path))
    except FileNotFoundError:
        pass
    except OSError as exc:
        _err(f"warning: cannot read the chat history {path}: {exc.strerror or exc}")
    return int(readline.get_current_history_length())


def _save_history(readline: ModuleType, path: Path, loaded: int) -> None:
    """Appends this session's lines to the file as it is now (another terminal may
    have saved meanwhile), keeping the last `HISTORY_LENGTH` entries."""
    total = int(readline.get_current_history_length())
    new = [readline.get_history_item(i) for i in range(loaded + 1, total + 1)]
    if not new:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        readline.clear_history()
        try:
            readline.read_history_file(str(path))
        except FileNotFoundError:
            pass
        for line in new:
            if line:
                readline.add_history(line)
        readline.set_history_length(HISTORY_LENGTH)
        readline.write_history_file(str(path))
        os.chmod(path, 0o600)
    except OSError as exc:
        _err(f"warning: cannot save the chat history {path}: {exc.strerror or exc}")


def chat() -> int:
    """Runs the chat loop; see the module docstring for the exit status."""
    paths = KlawPaths.from_env()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(paths.console_socket))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        _err(NOT_RUNNING)
        return 1
    except OSError as exc:
        sock.close()
        _err(f"cannot connect to {paths.console_socket}: {exc.strerror or exc}")
        return 1

    readline: ModuleType | None = None
    if sys.stdin.isatty() and sys.stdout.isatty():
        import readline as _readline  # input() edits lines with it once imported

        readline = _readline
    screen = _Screen(readline)
    session = _Session(sock, screen)
    history = paths.state_dir / HISTORY_FILE
    loaded = 0
    if readline is not None:
        loaded = _load_history(readline, history)
        readline.set_pre_input_hook(screen.prompt_shown)

    previous = signal.signal(signal.SIGUSR1, session.on_signal)
    stream = sock.makefile("rb")
    reader = threading.Thread(target=session.read, args=(stream,), name="klaw-chat", daemon=True)
    # The reader thread blocks every signal, so Ctrl-C (a process-wide SIGINT) always
    # lands in the main thread and interrupts readline's select().
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        reader.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    code = 0
    interrupted = False
    try:
        if readline is not None:
            session.hello.wait(HELLO_WAIT)
            session.hint([])
        code = _loop(session, interactive=readline is not None)
    except KeyboardInterrupt:
        interrupted = True
    except _GatewayGone:
        code = 1
    finally:
        session.leave()  # from here on the reader sends no signal
        # Leaving is not to be interrupted (a second Ctrl-C would lose the history).
        sigint = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        if interrupted and readline is not None:
            print()
        if readline is not None:
            readline.set_pre_input_hook(None)
            _save_history(readline, history, loaded)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        reader.join(timeout=1.0)
        stream.close()
        sock.close()
        if previous is not None:
            signal.signal(signal.SIGUSR1, previous)
        if sigint is not None:
            signal.signal(signal.SIGINT, sigint)
    return code


def _loop(session: _Session, *, interactive: bool) -> int:
    sent = False
    while True:
        try:
            if interactive:
                session.screen.before_input()
            line = input(PROMPT if interactive else "")
        except EOFError:
            if interactive:
                print()
            break
        finally:
            session.screen.line_entered()
        text = line.strip()
        if not text:
            continue
        if text in LEAVE_WORDS:
            return 0
        try:
            session.send(line)
        except OSError:
            if session.closed.wait(1.0):
                raise _GatewayGone from None
            _err("cannot send to the gateway: the connection broke")
            return 1
        sent = True
    if sent and not interactive and not session.replied.wait(REPLY_WAIT):
        if session.closed.is_set():
            return 1
        _err(f"no reply within {REPLY_WAIT:.0f} s")
        return 1
    return 0
