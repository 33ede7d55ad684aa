"""`klaw skills check`: what a skill's files would do that the owner should see first.

A skill is instructions, not permission (docs/skills.md): loading one grants nothing.
Its text still reaches the model, and its scripts may be run in the sandbox, so a
skill that pipes a download into a shell, reads credential files or secrets from the
environment, carries an obfuscated payload or tells the model to ignore its rules is
flagged, and a flagged skill stays off until the owner enables it by name.

The rules follow what public skill scanners flag (OpenClaw's skill scanner and
ClawHub's moderation, Cisco's skill-scanner, Snyk's agent-scan): they are patterns,
not a sandbox, and say where they matched so the owner can judge. Every file of the
skill folder is read (text files up to `MAX_FILE_BYTES`; binaries are listed as such).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "MAX_FILE_BYTES",
    "RULES",
    "SKIPPED_DIRS",
    "Finding",
    "Rule",
    "SkillFiles",
    "read_skill",
    "scan_files",
    "scan_skill",
    "scan_text",
    "skill_files",
]

MAX_FILE_BYTES: Final = 512 * 1024
_MAX_FILES: Final = 500


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    severity: str  # "critical" or "warn"
    what: str
    pattern: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    severity: str
    what: str
    file: str  # relative to the skill folder
    line: int
    excerpt: str

    def __str__(self) -> str:
        return (
            f"[{self.severity}] {self.rule}: {self.what} ({self.file}:{self.line}: {self.excerpt})"
        )


def _r(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_FETCH = r"(?:curl|wget|iwr|irm|invoke-webrequest|invoke-restmethod)\b"
_SHELL = (
    r"(?:sudo(?:\s+-\S+)*\s+)?(?:(?:busybox|toybox|env|exec|nohup)\s+)?(?:/\S*/)?"
    r"(?:(?:ba|z|k|da|a)?sh|python[0-9.]*|perl|ruby|node|iex|invoke-expression)\b"
)
# Code that reads a download: Python's urllib/requests/httpx, JavaScript's fetch.
_GET = r"urlopen|urllib\.request|urllib2|requests\.get|httpx\.get|\bfetch\s*\(|https?\.get\("
_DECODE = (
    r"b64decode|base64|atob\s*\(|frombase64string|decodestring|bytes\.fromhex|unhexlify"
    r"|codecs\.decode|zlib\.decompress|marshal\.loads|Buffer\.from"
)
# What may stand between `exec(` and the call it runs: `compile(`, `await (`, a module.
_CALLS = r"\s*(?:(?:await\s+)?\(?\s*[\w.]+\s*\(\s*){0,3}(?:await\s+)?[\w.]*?"
_B64D = r"base64\s+(?:-[a-z]*d[a-z]*|--decode|-D)\b"
# Who a hidden instruction hides from: the user or owner, in Russian and in Chinese.
_RU_USER = r"(?:пользовател|владельц|владелец|хозяин|юзер)\w*"
_ZH_USER = r"(?:用[户戶]|使用者|主人)"
_ZH_DONT = r"(?:不要|别|別|不得|切勿|勿|不可|不能|千万别|千萬別)"
_CRED_FILES = (
    r"\.ssh\b|id_rsa|id_ed25519|\.aws/credentials|\.netrc\b|\.gnupg|\.docker/config\.json"
    r"|\.config/gh/hosts|\.kube/config|/etc/shadow|\.git-credentials|\.npmrc|\.pypirc"
    r"|login data|cookies\.sqlite|security\s+find-(?:generic|internet)-password"
    r"|\.openclaw/(?:credentials|openclaw\.json)|klaw/(?:engine|gateway)\.env|auth-profiles\.json"
)
_SEND = r"(?:curl|wget|nc|ncat)\b|urlopen|requests\.(?:post|put)|http\.request|fetch\("
# Every gap is bounded: a long line must not make a pattern backtrack for minutes.
RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "pipe-to-shell",
        "critical",
        "runs a download as code (a network fetch piped into a shell or interpreter)",
        _r(
            rf"{_FETCH}[^\n|]{{0,400}}\|\s*{_SHELL}|{_SHELL}\s*<\(\s*{_FETCH}"
            rf"|(?:ba|z)?sh\s+-c\s+[\"']?\$\(\s*{_FETCH}"
            rf"|(?:iex|invoke-expression)\s*\(?\s*(?:\(\s*)?{_FETCH}"
            rf"|(?:source|\.)\s+<\(\s*{_FETCH}"
            rf"|\b(?:exec|eval)\s*\({_CALLS}(?:{_GET})"
        ),
    ),
    Rule(
        "decode-and-run",
        "critical",
        "decodes a hidden payload and runs it",
        _r(
            rf"{_B64D}[^\n|]{{0,200}}\|\s*{_SHELL}"
            r"|(?:eval|exec)\s*\(\s*(?:base64|atob|bytes\.fromhex|codecs\.decode|zlib\.decompress"
            r"|__import__\(\s*['\"](?:base64|zlib|codecs)|b64decode|Buffer\.from)"
            r"|frombase64string"
            rf"|\b(?:eval|exec)\s*\({_CALLS}(?:{_DECODE})"
            rf"|(?:b64decode|atob)\s*\([^\n]{{0,200}}\b(?:eval|exec)\s*\("
            rf"|\beval\s+[\"']?(?:\$\(|`)[^\n]{{0,200}}?{_B64D}"
            r"|\bFunction\s*\(\s*atob\s*\("
        ),
    ),
    Rule(
        "obfuscated-blob",
        "warn",
        "a long encoded blob (base64 or hex) whose content cannot be read",
        re.compile(r"[A-Za-z0-9+/]{200,}={0,2}|(?:\\x[0-9a-fA-F]{2}){40,}"),
    ),
    Rule(
        "hidden-unicode",
        "warn",
        "invisible or direction-changing characters (they can hide text from a reader)",
        re.compile(r"[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]"),
    ),
    Rule(
        "credential-files",
        "critical",
        "reads credential files (SSH keys, cloud or git credentials, browser data, agent keys)",
        _r(_CRED_FILES),
    ),
    Rule(
        "env-secrets",
        "critical",
        "sends the environment (where secrets live) somewhere, or dumps it",
        _r(
            rf"(?:printenv|\benv)\s*\|\s*(?:{_SEND})|json\.dumps\(\s*(?:dict\()?os\.environ"
            rf"|JSON\.stringify\(\s*process\.env|(?:{_SEND})[^\n]{{0,200}}(?:os\.environ\b(?!\.get|\[)"
            r"|process\.env\b(?!\.))"
        ),
    ),
    Rule(
        "exfiltration",
        "critical",
        "sends data to a collection endpoint (webhooks, paste sites, tunnels, reverse shells)",
        _r(
            r"discord(?:app)?\.com/api/webhooks|hooks\.slack\.com|pastebin\.com|requestbin"
            r"|webhook\.site|ngrok\.io|transfer\.sh|\bnc\s+-[a-z]*e\b|/dev/tcp/"
            # Reverse shells: a socket made the shell's stdin/stdout, or a shell on a
            # pipe to netcat, socat or a script language's socket.
            r"|os\.dup2\(\s*[\w.]+\.fileno\(\)|pty\.spawn\(\s*[\"'](?:/bin/)?(?:ba|z|da)?sh"
            r"|[\"'](?:/bin/)?(?:ba|z|da)?sh[\"']\s*,\s*[\"']-i[\"']"
            r"|\bsh\s+-i\b[^\n]{0,60}\|\s*(?:nc|ncat|netcat|openssl)\b"
            r"|\b(?:nc|ncat|netcat)\b[^\n|;]{0,100}\s-[a-z]*[ec]\s+(?:/bin/)?(?:ba|z|da)?sh\b"
            r"|\bsocat\b[^\n]{0,200}\bexec:|use\s+Socket\b[^\n]{0,300}\bexec\b"
            r"|TCPSocket\.(?:new|open)\b[^\n]{0,300}(?:/bin/(?:ba)?sh|\bexec\b|\bspawn\b)"
        ),
    ),
    Rule(
        "prompt-injection",
        "critical",
        "tells the model to drop its rules or hide what it does",
        _r(
            r"ignore\s+(?:all\s+|any\s+)?(?:the\s+)?(?:previous|prior|above|earlier|system)\s+"
            r"(?:instructions|rules|prompts?|messages)"
            r"|disregard\s+(?:all\s+|any\s+)?(?:the\s+)?(?:previous|prior|above|system|your)\s+"
            r"(?:instructions|rules|guidelines)"
            r"|(?:do\s+not|don't|never)\s+(?:tell|inform|let)\s+the\s+(?:user|owner)\s+"
            r"(?:about|that|know)|without\s+(?:telling|informing)\s+the\s+(?:user|owner)"
            r"|you\s+are\s+no\s+longer\s+bound|override\s+(?:the\s+|your\s+)?system\s+prompt"
            r"|(?:do\s+not|don't|never)\s+(?:mention|reveal|disclose)\s+(?:this|it|that|these)\s+"
            r"(?:\w+\s+){0,3}?to\s+the\s+(?:user|owner)"
            r"|(?:hide|conceal)\s+(?:this|it|that)\s+(?:\w+\s+){0,2}?from\s+the\s+(?:user|owner)"
            r"|игнорируй\s+(?:все\s+)?(?:предыдущие|прежние)\s+(?:инструкции|правила)"
            # "Не говори пользователю об этом", "скрой от пользователя", "без ведома..."
            r"|не\s+(?:говор|сообщ|рассказ|расскаж|скаж|упомин|признава)\w*\s+"
            rf"(?:[^\s.!?]+\s+){{0,3}}?{_RU_USER}"
            rf"|скр(?:ой|ыва|ыть|ойте)\w*\s+(?:[^\s.!?]+\s+){{0,3}}?от\s+{_RU_USER}"
            rf"|без\s+ведома\s+{_RU_USER}"
            rf"|{_RU_USER}\s+не\s+(?:должен|должна|должны|нужно)\s+(?:знать|узнать|видеть|замечать)"
            r"|忽略(?:之前|以上|先前|所有)(?:的)?(?:所有)?(?:指令|指示|规则)"
            # "不要告诉用户", "别让用户知道", "不要向用户透露", "对用户保密", "瞒着用户"
            rf"|{_ZH_DONT}\s*(?:告[诉訴]|告知|通知|[让讓]|透露[给給])\s*{_ZH_USER}"
            rf"|{_ZH_DONT}\s*(?:向|对|對|跟|和)\s*{_ZH_USER}\s*(?:透露|提及|提起|提到|说|說|讲|講|显示|顯示)"
            rf"|(?:对|對|向)\s*{_ZH_USER}\s*(?:隐瞒|隱瞞|保密)|瞒着\s*{_ZH_USER}|瞞著\s*{_ZH_USER}"
        ),
    ),
    Rule(
        "destructive",
        "warn",
        "deletes or opens up the file system wholesale",
        _r(
            r"rm\s+-[a-z]*r[a-z]*\s+[\"']?(?:/|~/?|\$\{?HOME\}?/?)[\"']?(?:\s|$|\*)"
            r"|chmod\s+-R\s+777\s+/|mkfs\.|dd\s+if=[^\n]{0,200}of=/dev/"
        ),
    ),
    Rule(
        "miner",
        "critical",
        "runs a cryptocurrency miner",
        _r(r"xmrig|stratum\+tcp://|cryptonight|minerd\b"),
    ),
    Rule(
        "persistence",
        "warn",
        "installs itself to run on its own (cron, shell start-up files, services)",
        _r(
            r"crontab\s+-|>>?\s*~?/?(?:\.bashrc|\.profile|\.zshrc)|systemctl\s+(?:--user\s+)?enable"
            r"|/etc/cron\.|launchctl\s+load"
        ),
    ),
)

_INVISIBLE = re.compile(r"[\u200b-\u200f\u2060-\u2064\ufeff]")
_WINDOW = 2000  # long lines are matched in overlapping windows of this many characters
_TEXT_SUFFIXES = frozenset(
    {".md", ".txt", ".sh", ".bash", ".zsh", ".py", ".js", ".mjs", ".cjs", ".ts", ".json",
     ".yaml", ".yml", ".toml", ".rb", ".pl", ".ps1", ".bat", ".cmd", ".env", ".cfg", ".ini"}
)  # fmt: skip
#: Folders of tools, not of the skill: not read, and never served by skill_load.
SKIPPED_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv"})


def _windows(line: str) -> Iterator[tuple[int, str]]:
    if len(line) <= _WINDOW:
        yield 0, line
        return
    for start in range(0, len(line), _WINDOW // 2):
        yield start, line[start : start + _WINDOW]


def scan_text(text: str, file: str = "SKILL.md") -> Iterator[Finding]:
    for n, raw in enumerate(text.splitlines(), 1):
        seen: set[str] = set()
        for _offset, part in _windows(raw):
            visible = _INVISIBLE.sub("", part)  # "ignore\u200b all previous…" still matches
            for rule in RULES:
                if rule.id in seen:
                    continue
                m = rule.pattern.search(part if rule.id == "hidden-unicode" else visible)
                if m is not None:
                    seen.add(rule.id)
                    text_ = part if rule.id == "hidden-unicode" else visible
                    start = max(0, m.start() - 20)
                    excerpt = text_[start : m.end() + 20].strip()
                    if len(excerpt) > 120:
                        excerpt = excerpt[:117] + "..."
                    yield Finding(rule.id, rule.severity, rule.what, file, n, excerpt)


def skill_files(folder: Path) -> list[Path]:
    """The files of a skill that are its own (tool folders such as .git left out)."""
    out: list[Path] = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part in SKIPPED_DIRS for part in rel.parts[:-1]) or rel.parts[0] in SKIPPED_DIRS:
            continue
        if path.is_file() or path.is_symlink():
            out.append(path)
    return out


@dataclass(frozen=True, slots=True)
class SkillFiles:
    """A skill folder read once: the digest of what was read and, in file order, what
    could not be checked and the texts to check (the same bytes the digest covers)."""

    digest: str  # sha256 hex over every file's name, length and bytes
    parts: tuple[Finding | tuple[str, str], ...]  # a problem, or (relative path, text)


def read_skill(folder: Path) -> SkillFiles:
    """Every file of a skill folder, read once. What cannot be checked is a finding:
    SKILL.md or a text file that is binary, too big or unreadable, a link that leaves
    the folder, more files than are read (all critical: an unchecked text could say
    anything). Size and mtime prove nothing (both can be put back after an edit), so
    the digest covers the bytes: each file with its name and length, so moving bytes
    from one file into the next changes it; a file too big to be read counts by its
    identity (it is flagged, never served), one past the file cap by its name."""
    h = hashlib.sha256()
    out: list[Finding | tuple[str, str]] = []
    root = folder.resolve()
    files = skill_files(folder)
    if len(files) > _MAX_FILES:
        out.append(
            Finding(
                "many-files",
                "critical",
                f"more than {_MAX_FILES} files: not all checked",
                ".",
                0,
                "",
            )
        )
    for n, path in enumerate(files):
        rel = path.relative_to(folder).as_posix()
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        if n >= _MAX_FILES:
            continue
        texty = path.name == "SKILL.md" or path.suffix.lower() in _TEXT_SUFFIXES
        if path.is_symlink():
            try:
                target = path.resolve(strict=True)
            except (OSError, RuntimeError):
                h.update(b"broken link")
                out.append(Finding("symlink", "critical", "a broken or looping link", rel, 0, ""))
                continue
            if not target.is_relative_to(root):
                h.update(b"link out " + os.fsencode(target))
                out.append(
                    Finding(
                        "symlink",
                        "critical",
                        "a link that leaves the skill's folder",
                        rel,
                        0,
                        f"-> {target}",
                    )
                )
                continue
        try:
            st = path.stat()
            if st.st_size > MAX_FILE_BYTES:
                h.update(f"big {st.st_size} {st.st_ino} {st.st_mtime_ns} {st.st_ctime_ns}".encode())
                sev = "critical" if texty else "warn"
                out.append(
                    Finding(
                        "large-file", sev, "too big to be checked", rel, 0, f"{st.st_size} bytes"
                    )
                )
                continue
            raw = path.read_bytes()
        except OSError as exc:
            h.update(b"unreadable")
            out.append(Finding("unreadable", "critical", "could not be read", rel, 0, str(exc)))
            continue
        h.update(len(raw).to_bytes(8, "big") + raw)
        if b"\0" in raw[:8192] and not texty:
            if path.suffix.lower() not in (".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico"):
                out.append(
                    Finding("binary", "warn", "a binary file (not readable text)", rel, 0, "")
                )
            continue
        if b"\0" in raw:
            out.append(Finding("binary", "critical", "a text file with binary bytes", rel, 0, ""))
        out.append((rel, raw.replace(b"\0", b" ").decode("utf-8", errors="replace")))
    return SkillFiles(h.hexdigest(), tuple(out))


def scan_files(files: SkillFiles) -> list[Finding]:
    """What the check finds in a folder read by `read_skill`."""
    out: list[Finding] = []
    for part in files.parts:
        if isinstance(part, Finding):
            out.append(part)
        else:
            out.extend(scan_text(part[1], part[0]))
    return out


def scan_skill(folder: Path) -> list[Finding]:
    """Findings over every file of a skill folder (`read_skill`, then `scan_files`)."""
    return scan_files(read_skill(folder))
