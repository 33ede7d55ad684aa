"""OpenClaw's MCP servers (openclaw.json `mcp.servers`) as engine.yaml `mcpServers`.

OpenClaw writes `{command, args, env, cwd|workingDirectory}` (stdio) or `{url,
transport, headers, auth}` (HTTP); Klaw reads the same keys. What Klaw cannot do is
left out and listed: the SSE transport (Klaw speaks streamable HTTP), OAuth. A value
written out in OpenClaw's file under a secret-looking name (an `env` key or a header
such as Authorization) goes into engine.yaml as a `${VAR:-}` to export, never in clear;
OpenClaw's own `${VAR}` stays one (`${VAR:-}`: while it is unset the server fails to
start and `klaw doctor` says so, the engine starts anyway).
Imported servers keep Klaw's defaults: private, their schemas loaded on demand, the
owner's approval before the first call of a server whose tools write. A server whose
command, arguments, URL or folder hold a control character (a terminal escape that
would hide the rest of the line in the plan the owner reads, a line break) is left
out and listed.
"""

from __future__ import annotations

import re
from typing import Any

from klaw.config.mcp import SERVER_NAME

__all__ = ["map_mcp"]

_SECRET = re.compile(r"key|token|secret|password|passwd|auth|cookie|credential", re.I)
_VAR = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _name(raw: str) -> str | None:
    name = re.sub(r"[^A-Za-z0-9-]+", "-", raw).strip("-")[:24] or None
    return name if name and SERVER_NAME.match(name) else None


def _value(server: str, key: str, value: Any, env_to_set: list[str], where: str) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if not isinstance(value, str):
        return None
    ref = _VAR.match(value.strip())
    if ref:  # `${X:-}`: unset, the server fails (a doctor line), the engine still starts
        return f"${{{ref.group(1)}:-}}"
    if _SECRET.search(key) and value:
        var = re.sub(r"[^A-Z0-9]", "_", f"MCP_{server}_{key}".upper())
        env_to_set.append(f"{var}: {key} of MCP server {server}, in {where}")
        return f"${{{var}:-}}"
    return value


def map_mcp(
    servers: Any, env_to_set: list[str], unmapped: list[str], where: str
) -> dict[str, dict[str, Any]]:
    """engine.yaml `mcpServers` entries for OpenClaw's `mcp.servers`."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(servers, dict):
        return out
    for raw, conf in servers.items():
        name = _name(str(raw))
        if not isinstance(conf, dict) or name is None or name in out:
            unmapped.append(f"MCP server {raw!r}: not a server Klaw can name or read")
            continue
        entry: dict[str, Any] = {}
        if isinstance(conf.get("command"), str):
            entry["command"] = conf["command"]
            args = conf.get("args")
            if isinstance(args, list):
                entry["args"] = [str(a) for a in args]
            cwd = conf.get("cwd") or conf.get("workingDirectory")
            if isinstance(cwd, str):
                entry["cwd"] = cwd
            env = conf.get("env")
            env = env if isinstance(env, dict) else {}
            mapped = {k: _value(name, k, v, env_to_set, where) for k, v in env.items()}
            entry["env"] = {k: v for k, v in mapped.items() if v is not None}
        elif isinstance(conf.get("url"), str):
            if conf.get("transport") == "sse":
                unmapped.append(
                    f"MCP server {raw!r}: the SSE transport (Klaw speaks streamable HTTP; "
                    "add its /mcp URL by hand if it offers one)"
                )
                continue
            if conf.get("auth") == "oauth":
                unmapped.append(f"MCP server {raw!r}: OAuth (give a token in `headers` by hand)")
                continue
            entry["url"] = conf["url"]
            headers = conf.get("headers")
            headers = headers if isinstance(headers, dict) else {}
            mapped = {k: _value(name, k, v, env_to_set, where) for k, v in headers.items()}
            entry["headers"] = {k: v for k, v in mapped.items() if v is not None}
        else:
            unmapped.append(f"MCP server {raw!r}: neither `command` nor `url`")
            continue
        shown = [entry.get("command"), *entry.get("args", []), entry.get("url"), entry.get("cwd")]
        if any(isinstance(v, str) and _CONTROL.search(v) for v in shown):
            unmapped.append(
                f"MCP server {name}: its command, arguments, URL or folder hold a control "
                "character (a terminal escape or a line break); add it by hand if you trust it"
            )
            continue
        if name != raw:
            unmapped.append(f"MCP server {raw!r}: named {name} in Klaw")
        out[name] = entry
    return out
