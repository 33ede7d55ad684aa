"""Finding 9: at the file-descriptor limit the engine does not spin on accept() nor fill
its log (asyncio's own server logged 820 tracebacks in 3 s here); once clients leave,
`status` answers again."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

from klaw.paths import KlawPaths

RUN = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))
    from klaw.engine.daemon import main
    sys.exit(main(with_memory=False))
    """
)


def test_out_of_fds_one_warning_then_served_again(klaw_home: KlawPaths) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN],
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    assert proc.stderr is not None
    clients: list[socket.socket] = []
    seen: list[str] = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "listening on" in line:
                break
        # More than the engine has fds for (about 40 here), fewer than fill the listen
        # backlog too (16 more): past that, connect() itself would block.
        for _ in range(50):
            c = socket.socket(socket.AF_UNIX)
            c.connect(str(klaw_home.socket))
            clients.append(c)
        for line in proc.stderr:
            seen.append(line)
            if "cannot accept connections" in line:
                break
        for c in clients:
            c.close()
        clients.clear()
        with socket.socket(socket.AF_UNIX) as c:
            c.settimeout(60)
            c.connect(str(klaw_home.socket))
            c.sendall(b'{"type":"status","id":"back"}\n')
            assert b'"status_result"' in c.recv(4096)
    finally:
        for c in clients:
            c.close()
        proc.terminate()
        rest = proc.stderr.read()
        proc.stderr.close()
        proc.wait(30)
    log = "".join(seen) + rest
    assert "Traceback" not in log
    assert log.count("cannot accept connections") <= 3, log
