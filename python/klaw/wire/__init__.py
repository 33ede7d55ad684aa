"""What crosses process and file boundaries, shared by gateway, engine, tools and CLI.

- `klaw.wire.protocol`: the engine socket protocol (typed messages, one JSON a line).
- `klaw.wire.loglines`: the conversation-log lines the gateway writes and the engine
  stores as rows.
- `klaw.wire.record`: the JSONL record type of the conversation logs.
- `klaw.wire.logfile`: the conversation-log files themselves: the append-only writer
  (the gateway's), and the readers and tailer every other part uses.
- `klaw.wire.accept`: the private bind and the accept loop of Klaw's Unix sockets.

This package imports nothing from `klaw.engine`, `klaw.gateway`, `klaw.tools` or
`klaw.cli`, so each of them can import it without depending on the others.
"""
