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

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["MAX_FILE_BYTES", "RULES", "Finding", "Rule", "scan_skill", "scan_text"]

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


_FETCH = r"(?:curl|wget|fetch|iwr|irm|invoke-webrequest|invoke-restmethod)\b"
_SHELL = r"(?:ba|z|k|da)?sh\b|python[0-9.]*\b|perl\b|ruby\b|node\b|iex\b|invoke-expression\b"
_CRED_FILES = (
    r"\.ssh\b|id_rsa|id_ed25519|\.aws/credentials|\.netrc\b|\.gnupg|\.docker/config\.json"
    r"|\.config/gh/hosts|\.kube/config|/etc/shadow|\.git-credentials|\.npmrc|\.pypirc"
    r"|login data|cookies\.sqlite|keychain|\.openclaw/(?:credentials|openclaw\.json)"
    r"|klaw/(?:engine|gateway)\.env|auth-profiles\.json"
)

RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "pipe-to-shell",
        "critical",
        "runs a download as code (a network fetch piped into a shell or interpreter)",
        _r(
            rf"{_FETCH}[^\n|]*\|\s*(?:sudo\s+)?(?:{_SHELL})|(?:{_SHELL})\s*<\(\s*{_FETCH}"
            rf"|(?:iex|invoke-expression)\s*\(?\s*(?:\(\s*)?(?:{_FETCH})"
        ),
    ),
    Rule(
        "decode-and-run",
        "critical",
        "decodes a hidden payload and runs it",
        _r(
            r"base64\s+(?:-d|--decode)[^\n]*\|\s*(?:ba|z)?sh\b"
            r"|(?:eval|exec)\s*\(\s*(?:base64|atob|bytes\.fromhex|codecs\.decode|zlib\.decompress"
            r"|__import__\(\s*['\"](?:base64|zlib|codecs)|b64decode|Buffer\.from)"
            r"|frombase64string"
        ),
    ),
    Rule(
        "obfuscated-blob",
        "warn",
        "a long encoded blob (base64 or hex) whose content cannot be read",
        re.compile(r"[A-Za-z0-9+/]{200,}={0,2}|(?:\\x[0-9a-fA-F]{2}){40,}"),
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
        "reads secrets from the environment and sends or dumps them",
        _r(
            r"(?:printenv|\benv\b)\s*(?:\||>)|os\.environ(?:\.copy\(\))?\s*\)|dict\(os\.environ\)"
            r"|json\.dumps\(\s*(?:dict\()?os\.environ|process\.env\)"
            r"|(?:curl|wget)\b[^\n]*\$\{?[A-Z_]*(?:KEY|TOKEN|SECRET|PASSWORD)"
        ),
    ),
    Rule(
        "exfiltration",
        "critical",
        "sends files or data to a collection endpoint",
        _r(
            r"(?:curl|wget)\b[^\n]*(?:-d|--data(?:-binary)?|-F|--upload-file|-T)\s*@"
            r"|discord(?:app)?\.com/api/webhooks|hooks\.slack\.com|pastebin\.com|requestbin"
            r"|webhook\.site|ngrok\.io|transfer\.sh|\bnc\s+-[a-z]*e\b|/dev/tcp/"
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
            r"|(?:do\s+not|don't|never)\s+(?:tell|inform|mention\s+(?:this\s+)?to)\s+the\s+(?:user|owner)"
            r"|you\s+are\s+no\s+longer\s+bound|override\s+(?:the\s+|your\s+)?system\s+prompt"
            r"|игнорируй\s+(?:все\s+)?(?:предыдущие|прежние)\s+(?:инструкции|правила)"
            r"|忽略(?:之前|以上|先前|所有)(?:的)?(?:所有)?(?:指令|指示|规则)"
        ),
    ),
    Rule(
        "destructive",
        "warn",
        "deletes or opens up the file system wholesale",
        _r(
            r"rm\s+-[a-z]*r[a-z]*f?\s+(?:/|~|\$HOME)(?:\s|$)|chmod\s+-R\s+777\s+/|mkfs\.|dd\s+if=.*of=/dev/"
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


def scan_text(text: str, file: str = "SKILL.md") -> Iterator[Finding]:
    for n, line in enumerate(text.splitlines(), 1):
        for rule in RULES:
            m = rule.pattern.search(line)
            if m is not None:
                start = max(0, m.start() - 20)
                excerpt = line[start : m.end() + 20].strip()
                if len(excerpt) > 120:
                    excerpt = excerpt[:117] + "..."
                yield Finding(rule.id, rule.severity, rule.what, file, n, excerpt)


def scan_skill(folder: Path) -> list[Finding]:
    """Findings over every file of a skill folder (symlinks are reported, not followed)."""
    out: list[Finding] = []
    files = sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink())
    for path in files[:_MAX_FILES]:
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            target = str(path.readlink())
            out.append(
                Finding("symlink", "warn", "a link that points elsewhere", rel, 0, f"-> {target}")
            )
            out.extend(scan_text(target, rel))
            continue
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                out.append(Finding("large-file", "warn", "too big to read", rel, 0, ""))
                continue
            raw = path.read_bytes()
        except OSError as exc:
            out.append(Finding("unreadable", "warn", "could not be read", rel, 0, str(exc)))
            continue
        if b"\0" in raw[:8192]:
            if path.suffix.lower() not in (".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico"):
                out.append(
                    Finding("binary", "warn", "a binary file (not readable text)", rel, 0, "")
                )
            continue
        out.extend(scan_text(raw.decode("utf-8", errors="replace"), rel))
    if len(files) > _MAX_FILES:
        out.append(
            Finding(
                "many-files", "warn", f"more than {_MAX_FILES} files; the rest unread", ".", 0, ""
            )
        )
    return out
