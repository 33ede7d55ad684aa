"""OpenClaw's providers, models, heartbeat and Telegram settings as Klaw config.

Keys are never copied: a provider's `apiKey` that is a `${VAR}` reference stays that
reference; a key written in clear in openclaw.json or in auth-profiles.json becomes a
`${PROVIDER_API_KEY}` reference and the report says which variable to set. Model refs
are OpenClaw's `provider/model` (split at the first `/`, an alias or a bare name
resolved as OpenClaw does), which is Klaw's own form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from klaw.openclaw.home import Home
from klaw.openclaw.home import env_reference as _env_text

__all__ = ["BUILTIN_PROVIDERS", "Settings", "map_settings", "normalize_provider"]

#: OpenClaw's built-in providers that speak an API Klaw has: (type, endpoint, key variable).
BUILTIN_PROVIDERS: dict[str, tuple[str, str, str]] = {
    "anthropic": ("anthropic", "https://api.anthropic.com/v1", "ANTHROPIC_API_KEY"),
    "openai": ("openai-compatible", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    "zai": ("openai-compatible", "https://api.z.ai/api/paas/v4", "ZAI_API_KEY"),
    "deepseek": ("openai-compatible", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "openrouter": ("openai-compatible", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "moonshot": ("openai-compatible", "https://api.moonshot.ai/v1", "MOONSHOT_API_KEY"),
    "mistral": ("openai-compatible", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
    "groq": ("openai-compatible", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "xai": ("openai-compatible", "https://api.x.ai/v1", "XAI_API_KEY"),
    "ollama": ("openai-compatible", "http://localhost:11434/v1", ""),
    "google": ("gemini", "https://generativelanguage.googleapis.com/v1beta", "GEMINI_API_KEY"),
}
CONTEXT_BUDGET_CAP = 16_000
_ALIASES = {"z.ai": "zai", "z-ai": "zai", "opencode-zen": "opencode", "kimi-code": "kimi-coding"}
_APIS = {
    "openai-completions": "openai-compatible",
    "openai-responses": "openai-compatible",
    "ollama": "openai-compatible",
    "anthropic-messages": "anthropic",
    "google-generative-ai": "gemini",
}


def env_reference(value: Any) -> str | None:
    """`VAR` for `${VAR}`, or for a SecretRef of OpenClaw's newer configs
    (`{"source": "env", "id": "VAR"}`)."""
    if (
        isinstance(value, dict)
        and value.get("source") == "env"
        and isinstance(value.get("id"), str)
    ):
        return str(value["id"])
    return _env_text(value)


def normalize_provider(name: str) -> str:
    low = name.strip().lower()
    return _ALIASES.get(low, low)


@dataclass
class Settings:
    providers: dict[str, dict[str, Any]] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    default: str | None = None
    fallback: list[str] = field(default_factory=list)
    model_map: dict[str, str | None] = field(default_factory=dict)  # OpenClaw ref -> Klaw id
    heartbeat: dict[str, Any] = field(default_factory=dict)
    telegram_token: str | None = None  # a ${VAR} reference
    allowed: list[tuple[str, str]] = field(default_factory=list)  # (chat id, where from)
    env_to_set: list[str] = field(default_factory=list)  # "VAR: where OpenClaw keeps it"
    unmapped: list[str] = field(default_factory=list)
    owner_chat: str | None = None
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)  # engine.yaml's


def _model_ref(home: Home, ref: str, depth: int = 0) -> str:
    ref = ref.strip()
    if "/" in ref:
        provider, model = ref.split("/", 1)
        return f"{normalize_provider(provider)}/{model}"
    catalog = home.get("agents", "defaults", "models")
    if isinstance(catalog, dict) and depth < 4:
        for key, entry in catalog.items():
            alias = entry.get("alias") if isinstance(entry, dict) else None
            if isinstance(alias, str) and alias.lower() == ref.lower() and str(key) != ref:
                return _model_ref(home, str(key), depth + 1)
    return f"anthropic/{ref}"


def _model_setting(value: Any) -> tuple[str | None, list[str]]:
    if isinstance(value, str):
        return value, []
    if isinstance(value, dict):
        primary = value.get("primary")
        fallbacks = value.get("fallbacks")
        return (
            primary if isinstance(primary, str) else None,
            [f for f in fallbacks if isinstance(f, str)] if isinstance(fallbacks, list) else [],
        )
    return None, []


def _stored_keys(home: Home) -> dict[str, str]:
    """provider -> where OpenClaw keeps its key (auth-profiles.json), never the key."""
    data = home.read(home.auth_profiles, "auth profiles")
    out: dict[str, str] = {}
    profiles = data.get("profiles") if isinstance(data, dict) else None
    for pid, prof in profiles.items() if isinstance(profiles, dict) else []:
        if isinstance(prof, dict) and isinstance(prof.get("provider"), str):
            kind = prof.get("type")
            if kind in ("api_key", "token"):
                out.setdefault(
                    normalize_provider(prof["provider"]), f"{home.auth_profiles} ({pid})"
                )
    return out


def _telegram_ids(values: Any) -> tuple[list[str], list[str]]:
    ids, others = [], []
    for v in values if isinstance(values, list) else []:
        text = re.sub(r"^(?:telegram|tg):", "", str(v).strip(), flags=re.IGNORECASE)
        if re.fullmatch(r"-?\d+", text):
            ids.append(text)
        elif text:
            others.append(text)
    return ids, others


def map_settings(home: Home) -> Settings:
    s = Settings()
    # --- providers and models -------------------------------------------
    custom = home.get("models", "providers")
    custom = custom if isinstance(custom, dict) else {}
    stored = _stored_keys(home)
    primary, fallbacks = _model_setting(home.agent_setting("model"))
    refs: list[str] = []
    for ref in [primary, *fallbacks]:
        if ref:
            refs.append(_model_ref(home, ref))
    catalog = home.get("agents", "defaults", "models")
    for key in catalog if isinstance(catalog, dict) else {}:
        refs.append(_model_ref(home, str(key)))
    model_meta: dict[str, dict[str, Any]] = {}
    for pid, prov in custom.items():
        if not isinstance(prov, dict):
            continue
        for m in prov.get("models") or []:
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                ref = f"{normalize_provider(pid)}/{m['id']}"
                model_meta[ref] = m
                refs.append(ref)
    seen: set[str] = set()
    for ref in refs:
        if ref in seen:
            continue
        seen.add(ref)
        provider = ref.split("/", 1)[0]
        if provider not in s.providers and not _provider(s, home, provider, custom, stored):
            s.model_map[ref] = None
            continue
        entry: dict[str, Any] = {}
        meta = model_meta.get(ref, {})
        window, max_tokens = meta.get("contextWindow"), meta.get("maxTokens")
        if isinstance(window, int) and not isinstance(window, bool) and window >= 1024:
            # Klaw sends less than a model can take (token cost): at most 16k of context.
            entry["contextBudget"] = min(window, CONTEXT_BUDGET_CAP)
        if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0:
            # The reply's reserve comes out of the budget: keep three quarters for input.
            budget = entry.get("contextBudget", CONTEXT_BUDGET_CAP)
            entry["maxTokens"] = max(1, min(max_tokens, budget // 4))
        kinds = meta.get("input")
        if isinstance(kinds, list) and "image" in kinds:
            entry["vision"] = True  # OpenClaw's input: ["text", "image"]
        s.models[ref] = entry
        s.model_map[ref] = ref
    # the raw refs (aliases, unnormalised) map as their resolved form
    for raw in [primary, *fallbacks]:
        if raw:
            s.model_map.setdefault(raw, s.model_map.get(_model_ref(home, raw)))
    if catalog and isinstance(catalog, dict):
        for key, entry in catalog.items():
            if isinstance(entry, dict) and isinstance(entry.get("alias"), str):
                s.model_map.setdefault(entry["alias"], s.model_map.get(_model_ref(home, str(key))))
    chain = [s.model_map.get(_model_ref(home, r)) for r in [primary, *fallbacks] if r]
    usable = list(dict.fromkeys(c for c in chain if c))  # an alias may repeat a ref
    if usable:
        s.default, s.fallback = usable[0], usable[1:]
    # --- Telegram ----------------------------------------------------------
    tg = home.get("channels", "telegram")
    tg = tg if isinstance(tg, dict) else {}
    if tg and tg.get("enabled") is False:
        s.unmapped.append("Telegram is off in OpenClaw (channels.telegram.enabled: false)")
        tg = {}
    token = tg.get("botToken")
    ref_var = env_reference(token)
    if ref_var:
        s.telegram_token = f"${{{ref_var}}}"
    elif isinstance(token, str) and token.strip():
        s.telegram_token = "${TELEGRAM_BOT_TOKEN}"
        s.env_to_set.append(
            f"TELEGRAM_BOT_TOKEN: the bot token, in {home.config_path} (channels.telegram.botToken)"
        )
    elif isinstance(tg.get("tokenFile"), str):
        s.telegram_token = "${TELEGRAM_BOT_TOKEN}"
        s.env_to_set.append(f"TELEGRAM_BOT_TOKEN: the bot token, in the file {tg['tokenFile']}")
    ids, others = _telegram_ids(tg.get("allowFrom"))
    stored_allow = home.read(home.credentials_dir / "telegram-allowFrom.json", "Telegram allowlist")
    paired, paired_other = _telegram_ids(
        stored_allow.get("allowFrom") if isinstance(stored_allow, dict) and tg else None
    )
    if tg.get("dmPolicy") == "disabled":
        s.unmapped.append("Telegram DMs are off in OpenClaw (dmPolicy: disabled): none allowed")
        ids, others, paired, paired_other = [], [], [], []
    for chat in ids:
        s.allowed.append((f"telegram_{chat}", "channels.telegram.allowFrom"))
    for chat in paired:
        if f"telegram_{chat}" not in [a for a, _ in s.allowed]:
            s.allowed.append((f"telegram_{chat}", "credentials/telegram-allowFrom.json"))
    if "*" in others or tg.get("dmPolicy") == "open":
        # Klaw's allowAll would let every group in too; OpenClaw's "open" is DMs only.
        s.unmapped.append(
            "Telegram dmPolicy open (anyone may DM the bot): not carried over, Klaw's "
            "allowAll also admits every group; new people pair with `klaw pair approve`"
        )

    for name in [o for o in others + paired_other if o != "*"]:
        s.unmapped.append(
            f"Telegram allowFrom {name!r}: Klaw allows chats by numeric id; "
            "approve it with `klaw pair` when it writes"
        )
    groups = tg.get("groups")
    if tg.get("groupPolicy") == "disabled":
        groups = None  # OpenClaw answers no group
    elif tg.get("groupAllowFrom") or tg.get("groupPolicy") == "open":
        s.unmapped.append(
            "Telegram groupPolicy/groupAllowFrom (which members may talk in a group): Klaw "
            "allows whole groups; only the listed groups are allowed"
        )
    for gid, conf in (groups or {}).items() if isinstance(groups, dict) else []:
        if gid == "*":
            s.unmapped.append(
                "Telegram groups '*': Klaw serves only listed groups; add each group's id"
            )
            continue
        if isinstance(conf, dict) and conf.get("enabled") is False:
            continue
        if re.fullmatch(r"-?\d+", str(gid)):
            s.allowed.append((f"telegram_{gid}", "channels.telegram.groups"))
            if not isinstance(conf, dict) or conf.get("requireMention", True):
                s.unmapped.append(
                    f"Telegram group {gid} requireMention: Klaw answers every message in an "
                    "allowed group"
                )
    if isinstance(tg.get("accounts"), dict) and tg["accounts"]:
        s.unmapped.append(
            "Telegram accounts (several bots): Klaw runs one bot; the default one kept"
        )
    s.owner_chat = next((a for a, _ in s.allowed if not a.startswith("telegram_-")), None)
    # --- heartbeat ---------------------------------------------------------
    hb = home.agent_setting("heartbeat")
    if isinstance(hb, dict):
        every = str(hb.get("every") or "").strip()
        if every:
            m = re.fullmatch(r"(\d+)\s*([smhd]?)", every.lower())
            if m is None:
                s.unmapped.append(f"heartbeat.every {every!r}: not a duration Klaw reads")
            elif m.group(2) == "s" and 0 < int(m.group(1)) < 60:
                s.unmapped.append(f"heartbeat.every {every!r}: Klaw's shortest interval is 1m")
            elif int(m.group(1)) == 0:
                s.unmapped.append(
                    "heartbeat is off in OpenClaw (every: 0m): empty HEARTBEAT.md to keep it off"
                )
            else:
                s.heartbeat["cron"] = f"every {m.group(1)}{m.group(2) or 'm'}"
        if isinstance(hb.get("model"), str):
            mapped = s.model_map.get(_model_ref(home, hb["model"]))
            if mapped:
                s.heartbeat["model"] = mapped
        target, to = hb.get("target"), hb.get("to")
        if to is not None and target in (None, "telegram", "last"):
            s.heartbeat["injectInto"] = f"telegram_{str(to).split(':topic:')[0]}"
        elif target != "none" and s.owner_chat:
            s.heartbeat["injectInto"] = s.owner_chat
        for key in ("activeHours", "prompt"):
            if hb.get(key):
                s.unmapped.append(
                    f"heartbeat.{key}: Klaw's heartbeat runs HEARTBEAT.md at each time; "
                    + (
                        "put quiet hours into the cron expression"
                        if key == "activeHours"
                        else "its instructions belong in HEARTBEAT.md"
                    )
                )
    from klaw.openclaw.mcp_map import map_mcp

    where = str(home.config_path or "openclaw.json")
    s.mcp_servers = map_mcp(home.get("mcp", "servers"), s.env_to_set, s.unmapped, where)
    return s


def _provider(
    s: Settings, home: Home, pid: str, custom: dict[str, Any], stored: dict[str, str]
) -> bool:
    """Adds provider `pid` to `s.providers`; False (with the reason noted) if it cannot."""
    conf = next(
        (v for k, v in custom.items() if normalize_provider(k) == pid and isinstance(v, dict)),
        None,
    )
    var = re.sub(r"[^A-Z0-9]", "_", pid.upper()) + "_API_KEY"
    if conf is not None:
        api = str(conf.get("api") or "openai-completions")
        kind = _APIS.get(api)
        base = conf.get("baseUrl")
        if kind is None or not isinstance(base, str):
            s.unmapped.append(
                f"provider {pid}: API {api!r} has no Klaw client"
                if kind is None
                else f"provider {pid}: no baseUrl"
            )
            return False
        endpoint = base.rstrip("/")
        if api == "ollama" and not endpoint.endswith("/v1"):
            endpoint += "/v1"
        if api == "openai-responses":
            s.unmapped.append(f"provider {pid}: Responses API read as chat completions")
        key = conf.get("apiKey")
        ref = env_reference(key)
        if ref is None and isinstance(key, str) and key.strip():
            s.env_to_set.append(f"{var}: the key of provider {pid}, in {home.config_path}")
            ref = var
        elif ref is None and pid in stored:
            s.env_to_set.append(f"{var}: the key of provider {pid}, in {stored[pid]}")
            ref = var
        entry: dict[str, Any] = {"type": kind, "endpoint": endpoint}
        if ref:
            entry["apiKey"] = f"${{{ref}}}"
        s.providers[pid] = entry
        return True
    builtin = BUILTIN_PROVIDERS.get(pid)
    if builtin is None:
        s.unmapped.append(f"provider {pid}: not one Klaw knows; add it to engine.yaml by hand")
        return False
    kind, endpoint, default_var = builtin
    entry = {"type": kind, "endpoint": endpoint}
    if default_var:
        entry["apiKey"] = f"${{{default_var}}}"
        where = stored.get(pid)
        env_block = home.get("env")
        in_env = isinstance(env_block, dict) and (
            default_var in env_block or default_var in (env_block.get("vars") or {})
        )
        if where or in_env:
            place = where or f"{home.config_path} (env)"
            s.env_to_set.append(f"{default_var}: the key of provider {pid}, in {place}")
    s.providers[pid] = entry
    return True
