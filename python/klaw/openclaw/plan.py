"""`klaw import openclaw`: the plan (what would change) and carrying it out.

The plan is built from the OpenClaw home alone and printed by `--dry-run`; applying it
writes only Klaw's side: engine.yaml and gateway.yaml (edited in place, comments kept;
a key the owner already changed is kept and reported), allowed-chats.json, the
conversation logs (record ids derived from OpenClaw's, so a second import writes
nothing), system skills, scheduler.db (jobs remember their OpenClaw id and are not added
twice) and finally `klaw reindex`, which puts the imported conversations into recall
memory. The OpenClaw home is only read. Both daemons must be stopped: the engine owns
klaw.db and scheduler.db, the gateway the conversation logs.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import shlex
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from klaw.config import WORKSPACE_HINT
from klaw.errors import InvalidInput
from klaw.openclaw.home import Home
from klaw.openclaw.jobs import MappedJob, map_job
from klaw.openclaw.settings import Settings, map_settings
from klaw.openclaw.transcripts import Transcript, chat_for_key, chat_of_file, read_transcript
from klaw.openclaw.treecopy import copy_tree
from klaw.paths import KlawPaths, unsafe_workspace
from klaw.wire.record import Record, validate_chat_id

__all__ = ["ImportPlan", "ImportReport", "apply_plan", "build_plan"]

log = logging.getLogger("klaw.openclaw")

WORKSPACE_FILES = (
    "AGENTS.md",
    "SOUL.md",
    "IDENTITY.md",
    "USER.md",
    "TOOLS.md",
    "MEMORY.md",
    "HEARTBEAT.md",
    "BOOT.md",
    "BOOTSTRAP.md",
)
_SKIP_DIRS = {".git", ".openclaw", "node_modules", "__pycache__"}


@dataclass
class ChatHistory:
    chat_id: str
    transcripts: list[Transcript] = field(default_factory=list)

    @property
    def messages(self) -> int:
        return sum(len(t.records) for t in self.transcripts)


@dataclass
class ImportPlan:
    home: Home
    copy_to: Path | None  # None: use the workspace where it lies
    settings: Settings
    jobs: list[MappedJob] = field(default_factory=list)
    chats: dict[str, ChatHistory] = field(default_factory=dict)
    skills: list[Path] = field(default_factory=list)
    skipped_sessions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # malformed files, read errors
    workspace_refused: str | None = None  # why OpenClaw's workspace is neither used nor copied

    @property
    def workspace(self) -> Path | None:
        """Klaw's workspace after the import; None: engine.yaml's is left as it is."""
        if self.workspace_refused is not None:
            return None
        return self.copy_to or self.home.workspace

    @property
    def unmapped(self) -> list[str]:
        out = list(self.settings.unmapped)
        out += [f"cron job {j.label!r}: {j.reason}" for j in self.jobs if j.spec is None]
        out += self.skipped_sessions
        if self.home.other_agents:
            out.append(
                "agents " + ", ".join(self.home.other_agents) + ": Klaw runs one agent; "
                f"only {self.home.agent_id!r} was imported"
            )
        return out

    def render(self) -> str:
        """The plan as the owner reads it (`--dry-run`, and before applying)."""
        s = self.settings
        out = io.StringIO()

        def p(line: str = "") -> None:
            print(line, file=out)

        p(f"OpenClaw home: {self.home.root} (config {self.home.config_path or 'missing'})")
        ws = self.home.workspace
        present = [n for n in WORKSPACE_FILES if (ws / n).is_file()]
        logs = sorted((ws / "memory").glob("*.md")) if (ws / "memory").is_dir() else []
        if self.workspace_refused is not None:
            p(f"workspace: {ws} is not imported (see problems)")
        elif self.copy_to is None:
            p(f"workspace: use {ws} in place (engine.yaml `workspace`)")
        else:
            p(f"workspace: copy {ws} to {self.copy_to} (files already there are kept)")
        p(f"  {', '.join(present) or 'no persona files'}; {len(logs)} daily log(s)")
        p("engine.yaml:")
        for pid, prov in s.providers.items():
            key = prov.get("apiKey", "no key")
            p(f"  provider {pid}: {prov['type']} {prov['endpoint']} key {key}")
        for mid in s.models:
            p(f"  model {mid}")
        if s.default:
            p(f"  routing.default {s.default}; fallback {', '.join(s.fallback) or 'none'}")
        for k, v in s.heartbeat.items():
            p(f"  scheduler.heartbeat.{k} {v}")
        for name, server in s.mcp_servers.items():  # what runs, whole: the args too
            run = [server["command"], *server.get("args", [])] if "command" in server else []
            p(f"  mcpServers.{name}: {shlex.join(run) if run else server.get('url')}")
        p("gateway:")
        if s.telegram_token:
            p(f"  channels.telegram.token {s.telegram_token}")
        for chat, src in s.allowed:
            p(f"  allow {chat} (from {src})")
        p(f"cron jobs: {sum(1 for j in self.jobs if j.spec)} of {len(self.jobs)}")
        for j in self.jobs:
            if j.spec is not None:
                state = "" if j.spec.enabled else " [paused]"
                to = j.spec.inject_into or "log only"
                note = f" ({j.reason})" if j.reason else ""
                p(f"  {j.spec.name}: {j.spec.cron} ({j.spec.timezone}) -> {to}{state}{note}")
        total = sum(c.messages for c in self.chats.values())
        p(f"conversations: {total} message(s) into {len(self.chats)} chat(s)")
        for hist in self.chats.values():
            p(f"  {hist.chat_id}: {hist.messages} from {len(hist.transcripts)} session(s)")
        if self.skills:
            p("skills: " + ", ".join(sk.name for sk in self.skills) + " (into Klaw's skills)")
        if s.env_to_set:
            p("set in the environment (Klaw never copies keys; for systemd: engine.env):")
            for e in s.env_to_set:
                p(f"  {e}")
        if self.unmapped:
            p("not imported:")
            for u in self.unmapped:
                p(f"  - {u}")
        if self.problems or self.home.problems:
            p("problems (skipped, the rest is imported):")
            for pr in self.home.problems + self.problems:
                p(f"  ! {pr}")
        return out.getvalue()


def _bad_chat(chat: str) -> str | None:
    """Why `chat` cannot be a Klaw chat id (it names a folder), or None."""
    try:
        validate_chat_id(chat)
    except InvalidInput as exc:
        return str(exc)
    return None


def _owner_chat(home: Home, settings: Settings, sessions: dict[str, Any]) -> str | None:
    main = sessions.get(f"agent:{home.agent_id}:main")
    if isinstance(main, dict):
        chat = chat_for_key("", main, None)
        if chat:
            return chat
    return settings.owner_chat


def build_plan(
    home: Home,
    *,
    copy_to: Path | None = None,
    zone: str | None = None,
    paths: KlawPaths | None = None,
) -> ImportPlan:
    """What importing `home` would do; InvalidInput for a `copy_to` no workspace may be."""
    from klaw.scheduler.control import system_zone

    paths = paths or KlawPaths.from_env()
    if copy_to is not None and (why := unsafe_workspace(copy_to, paths)):
        raise InvalidInput(f"--copy-workspace {copy_to}: {why}; {WORKSPACE_HINT}")
    settings = map_settings(home)
    plan = ImportPlan(home, copy_to, settings)
    _plan_workspace(plan, paths)
    # --- transcripts ---------------------------------------------------------
    sessions_dir = home.sessions_dir
    index = home.read(sessions_dir / "sessions.json", "session index")
    index = index if isinstance(index, dict) else {}
    owner = _owner_chat(home, settings, index)
    if owner is not None and (why := _bad_chat(owner)):
        plan.problems.append(f"the main session's chat: {why}; not used")
        owner = settings.owner_chat
    settings.owner_chat = owner or settings.owner_chat
    inject = settings.heartbeat.get("injectInto")
    if isinstance(inject, str) and (why := _bad_chat(inject)):
        del settings.heartbeat["injectInto"]
        settings.unmapped.append(f"heartbeat target: {why}")
    if owner and owner not in [a for a, _ in settings.allowed] and owner.startswith("telegram_"):
        settings.allowed.insert(0, (owner, "the main session's chat"))
    by_file: dict[Path, str | None] = {}
    for key, entry in index.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("sessionId"), str):
            continue
        named = entry.get("sessionFile")
        path = Path(named) if isinstance(named, str) and named else None
        if path is None or not path.is_absolute() or not path.exists():
            path = sessions_dir / (path.name if path else f"{entry['sessionId']}.jsonl")
        chat = chat_for_key(key, entry, owner)
        if chat is not None and (why := _bad_chat(chat)):
            plan.skipped_sessions.append(f"session {key}: {why}")
            by_file[path.resolve()] = None
            continue
        by_file[path.resolve()] = chat
        if chat is None:
            plan.skipped_sessions.append(
                f"session {key}: a job, hook or subagent run, or another channel's chat"
            )
    files = sorted(sessions_dir.glob("*.jsonl")) + sorted(sessions_dir.glob("*.jsonl.reset.*"))
    for path in files:
        if path.resolve() in by_file:
            chat = by_file[path.resolve()]
        else:
            chat = chat_of_file(path, owner)
            if chat is None:
                plan.skipped_sessions.append(
                    f"transcript {path.name}: not in sessions.json and not the owner's chat"
                )
        if chat is None:
            continue
        channel = chat.split("_", 1)[0]
        try:
            t = read_transcript(path, chat, channel)
        except Exception as exc:  # one unreadable transcript never stops the import
            plan.problems.append(f"{path}: {exc}; not imported")
            continue
        for n, why in t.skipped_lines[:5]:
            plan.problems.append(f"{path.name}:{n}: {why}; line skipped")
        if len(t.skipped_lines) > 5:
            plan.problems.append(
                f"{path.name}: {len(t.skipped_lines) - 5} more bad line(s) skipped"
            )
        if t.records:
            plan.chats.setdefault(chat, ChatHistory(chat)).transcripts.append(t)
    if files and owner is None and not plan.chats:
        plan.problems.append("no chat to put the transcripts in (no Telegram owner found)")
    for hist in plan.chats.values():
        hist.transcripts.sort(key=lambda t: t.records[0].ts)
    # --- cron ------------------------------------------------------------------
    store = home.read(home.cron_store, "cron jobs")
    if store is not None:
        jobs = store.get("jobs") if isinstance(store, dict) else store
        if not isinstance(jobs, list):
            plan.problems.append(f"{home.cron_store}: no `jobs` list; cron jobs not imported")
            jobs = []
        taken: set[str] = set()
        for job in jobs:
            if isinstance(job, dict):
                mapped = map_job(
                    job,
                    zone=zone or system_zone(),
                    owner_chat=owner,
                    models=settings.model_map,
                    taken=taken,
                )
                target = mapped.spec.inject_into if mapped.spec is not None else None
                if target is not None and (why := _bad_chat(target)):
                    mapped = dataclasses.replace(mapped, spec=None, reason=f"its delivery: {why}")
                plan.jobs.append(mapped)
            elif job:
                plan.problems.append(f"{home.cron_store}: a job that is not an object; skipped")
    # --- skills the owner installed for every agent (~/.openclaw/skills) --------
    if home.managed_skills.is_dir():
        plan.skills = sorted(d for d in home.managed_skills.iterdir() if (d / "SKILL.md").is_file())
    for skill in (s for s in plan.skills if not (paths.skills / s.name).exists()):
        dry = copy_tree(skill, paths.skills / skill.name, _SKIP_DIRS, dry_run=True)
        plan.problems += [f"skill {skill.name}: {s}" for s in dry.skipped]
    if home.sqlite_era():
        plan.problems.append(
            "this OpenClaw keeps sessions and cron in SQLite ("
            + ", ".join(str(p) for p in home.sqlite_era())
            + "): the JSON files read here may be stale"
        )
    return plan


def _plan_workspace(plan: ImportPlan, paths: KlawPaths) -> None:
    """Refuses OpenClaw's workspace where no workspace may be (`~`, `/etc`...): neither
    used in place nor copied; lists what a copy would leave out."""
    ws = plan.home.workspace
    why = unsafe_workspace(ws, paths)
    if why is not None:
        plan.workspace_refused = why
        source = plan.home.workspace_source
        plan.problems.append(
            f"workspace: {source} names {ws}, but {why} and the agent's file tools read and "
            "write all of a workspace: it is neither used nor copied; move OpenClaw's "
            f"workspace files into a folder of their own, point {source} at it and import again"
        )
    elif plan.copy_to is not None and ws.is_dir():
        dry = copy_tree(ws, plan.copy_to, _SKIP_DIRS, dry_run=True)
        plan.problems += [f"workspace {s}" for s in dry.skipped]


# --------------------------------------------------------------------------- apply


@dataclass
class ImportReport:
    changed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # present already, or the owner's own value
    messages: int = 0
    jobs_added: int = 0
    reindexed: bool = False


def _yaml() -> Any:
    from ruamel.yaml import YAML

    y = YAML()
    y.preserve_quotes = True
    y.width = 100
    return y


def _edit_yaml(path: Path, default_text: str, edit: Any, check: Any) -> bool:
    """Loads `path` (or the default text), lets `edit(data)` change it, and when anything
    changed writes it back atomically, after `check(tmp)` loaded the new text: a file
    the engine could not load never replaces the owner's. True if it changed."""
    from klaw.errors import KlawError
    from klaw.fsutil import replace_durably

    y = _yaml()
    text = path.read_text(encoding="utf-8") if path.exists() else default_text
    data = y.load(text)
    if data is None:
        data = y.load("{}")
    if not edit(data) and path.exists():
        return False
    buf = io.StringIO()
    y.dump(data, buf)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".import-tmp")
    tmp.write_text(buf.getvalue(), encoding="utf-8")
    tmp.chmod(0o600)
    try:
        check(tmp)
    except (KlawError, ValueError) as exc:
        tmp.unlink(missing_ok=True)
        raise InvalidInput(
            f"the imported {path.name} would not load, left unchanged: {exc}"
        ) from None
    replace_durably(tmp, path)
    return True


def _section(data: Any, *keys: str) -> Any:
    from ruamel.yaml.comments import CommentedMap

    for k in keys:
        if not isinstance(data.get(k), dict):
            data[k] = CommentedMap()
        data = data[k]
    return data


def _engine_edits(plan: ImportPlan, report: ImportReport) -> Any:
    from klaw.config import RoutingConfig

    s = plan.settings
    defaults = RoutingConfig()

    def edit(data: Any) -> bool:
        changed = False
        ws = str(plan.workspace)
        current = data.get("workspace")
        if plan.workspace is None:
            pass  # refused: the plan says why
        elif current in (None, ""):
            data["workspace"] = ws
            report.changed.append(f"engine.yaml workspace: {ws}")
            changed = True
        elif str(current) != ws:
            report.kept.append(
                f"engine.yaml workspace {current} (yours; OpenClaw's is {ws}: use "
                "--copy-workspace to copy it into yours)"
            )
        providers = _section(data, "providers")
        for pid, entry in s.providers.items():
            if pid in providers:
                same = providers[pid].get("endpoint") == entry["endpoint"]
                report.kept.append(f"provider {pid}" + ("" if same else " (yours differs)"))
                continue
            providers[pid] = dict(entry)
            report.changed.append(f"provider {pid}")
            changed = True
        models = _section(data, "models")
        for mid, entry in s.models.items():
            if mid in models:
                report.kept.append(f"model {mid}")
                continue
            models[mid] = dict(entry)
            report.changed.append(f"model {mid}")
            changed = True
        routing = _section(data, "routing")
        if s.default:
            current = routing.get("default", defaults.default)
            if current in (defaults.default, s.default):
                if current != s.default:
                    routing["default"] = s.default
                    report.changed.append(f"routing.default {s.default}")
                    changed = True
            else:
                report.kept.append(f"routing.default {current} (yours; OpenClaw's {s.default})")
            fallback = list(routing.get("fallback", defaults.fallback))
            if fallback == defaults.fallback and fallback != s.fallback:
                routing["fallback"] = list(s.fallback)
                report.changed.append(f"routing.fallback {s.fallback}")
                changed = True
        if s.heartbeat:
            hb = _section(data, "scheduler", "heartbeat")
            for key, value in s.heartbeat.items():
                if hb.get(key) in (None, value) or (key == "cron" and hb.get(key) == "0 0 * * * ?"):
                    if hb.get(key) != value:
                        hb[key] = value
                        report.changed.append(f"scheduler.heartbeat.{key} {value}")
                        changed = True
                else:
                    report.kept.append(f"scheduler.heartbeat.{key} {hb.get(key)} (yours)")
        servers = _section(data, "mcpServers") if s.mcp_servers else {}
        for name, entry in s.mcp_servers.items():
            if name in servers:
                report.kept.append(f"mcpServers.{name} (yours)")
                continue
            servers[name] = dict(entry)
            report.changed.append(f"mcpServers.{name}")
            changed = True
        return changed

    return edit


def _gateway_edits(plan: ImportPlan, report: ImportReport) -> Any:
    s = plan.settings

    def edit(data: Any) -> bool:
        changed = False
        tg = _section(data, "channels", "telegram")
        if s.telegram_token and tg.get("token") in (None, "", "${TELEGRAM_BOT_TOKEN}"):
            if tg.get("token") != s.telegram_token:
                tg["token"] = s.telegram_token
                report.changed.append(f"gateway.yaml telegram token {s.telegram_token}")
                changed = True
        return changed

    return edit


def _copy_workspace(src: Path, dst: Path, report: ImportReport) -> None:
    # Confined like the file tools; what is skipped the plan listed already.
    done = copy_tree(src, dst, _SKIP_DIRS)
    report.changed += [f"workspace {rel}" for rel in done.copied]
    report.kept += [
        f"workspace {rel} (yours differs; OpenClaw's not copied)" for rel in done.differs
    ]


def _write_history(plan: ImportPlan, paths: KlawPaths, report: ImportReport) -> None:
    from klaw.gateway.logbook import LogBook
    from klaw.wire.protocol import LogLine

    book = LogBook(paths.conversations)

    def line(r: Record) -> LogLine:
        return LogLine(
            id=r.id, ts=datetime.fromisoformat(r.ts), role=r.role,  # type: ignore[arg-type]
            type=r.type,
            content=r.content, meta=r.meta,
        )  # fmt: skip

    for chat in plan.chats.values():
        lines: list[LogLine] = []
        for n, t in enumerate(chat.transcripts):
            if n > 0:  # OpenClaw's /new between sessions: a fresh context in Klaw too
                first = t.records[0]
                lines.append(
                    LogLine(
                        id=f"oc-break-{first.id}",
                        ts=datetime.fromisoformat(first.ts),
                        role="system",
                        type="session_break",
                        meta={"reason": "openclaw_session", "imported": "openclaw"},
                    )
                )
            lines.extend(line(r) for r in t.records)
        written = book.write(chat.chat_id, lines)
        report.messages += written
        if written:
            report.changed.append(f"conversation {chat.chat_id}: {written} line(s)")
        else:
            report.kept.append(f"conversation {chat.chat_id} (imported before)")


def _store_jobs(plan: ImportPlan, paths: KlawPaths, report: ImportReport) -> None:
    from klaw.scheduler.service import store_jobs

    specs = [j.spec for j in plan.jobs if j.spec is not None]
    if not specs:
        return
    for spec, status in store_jobs(paths.scheduler_db, specs):
        if status == "added":
            report.jobs_added += 1
            report.changed.append(f"job {spec.name}")
        elif status == "exists":
            report.kept.append(f"job {spec.name} (imported before)")
        else:
            report.kept.append(f"job {spec.name} not added: {status}")


def _approve(plan: ImportPlan, paths: KlawPaths, report: ImportReport) -> None:
    from klaw.gateway.access import Approvals, PairingCode

    approvals = Approvals(paths.approved_chats)
    known = approvals.ids()
    now = datetime.now(UTC).isoformat(timespec="seconds")
    for chat, source in plan.settings.allowed:
        if chat in known:
            report.kept.append(f"allowed chat {chat}")
            continue
        approvals.add(
            PairingCode("openclaw", chat, chat.split("_", 1)[1], f"OpenClaw {source}", now)
        )
        report.changed.append(f"allowed chat {chat}")


def _copy_skills(plan: ImportPlan, paths: KlawPaths, report: ImportReport) -> None:
    for src in plan.skills:
        dst = paths.skills / src.name
        if dst.exists():
            report.kept.append(f"skill {src.name}")
            continue
        copy_tree(src, dst, _SKIP_DIRS)  # confined like the workspace
        report.changed.append(f"skill {src.name} (checked like any skill: `klaw skills check`)")


def apply_plan(plan: ImportPlan, paths: KlawPaths, *, reindex: bool = True) -> ImportReport:
    """Carries out `plan`; the caller holds both daemons' locks."""
    from klaw.config import default_engine_yaml, default_gateway_yaml, load_engine_config

    report = ImportReport()
    if plan.workspace is None:
        pass  # refused: the plan says why
    elif plan.copy_to is not None:
        plan.copy_to.mkdir(parents=True, exist_ok=True)
        _copy_workspace(plan.home.workspace, plan.copy_to, report)
    elif not plan.home.workspace.is_dir():
        raise InvalidInput(f"OpenClaw's workspace {plan.home.workspace} does not exist")
    from klaw.config import load_gateway_config

    _edit_yaml(
        paths.engine_config, default_engine_yaml(), _engine_edits(plan, report), load_engine_config
    )
    _edit_yaml(
        paths.gateway_config,
        default_gateway_yaml(),
        _gateway_edits(plan, report),
        load_gateway_config,
    )
    _approve(plan, paths, report)
    _copy_skills(plan, paths, report)
    _write_history(plan, paths, report)
    _store_jobs(plan, paths, report)
    if reindex:
        from klaw.config import resolve_workspace
        from klaw.memory.api import rebuild

        config = load_engine_config(paths.engine_config)
        here = dataclasses.replace(paths, workspace=resolve_workspace(config))
        rebuild(here, config, progress=False, lock=False)  # the caller holds the lock
        report.reindexed = True
    return report
