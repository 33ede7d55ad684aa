"""The Ollama embedding backend against a local server speaking `/api/embed`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from klaw.errors import EmbeddingBackendError
from klaw.memory import Memory
from klaw.memory.embedding import OllamaBackend
from klaw.paths import KlawPaths

DIM = 8


def fake_vector(text: str) -> list[float]:
    """Deterministic, unnormalised: words sharing letters land close together."""
    v = [0.0] * DIM
    for ch in text.lower():
        v[ord(ch) % DIM] += 1.0
    return v


class Handler(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.requests.append(body)
        if self.path != "/api/embed" or body.get("model") != "all-minilm:l6-v2":
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b'{"error":"model not found"}')
            return
        data = json.dumps(
            {"model": body["model"], "embeddings": [fake_vector(t) for t in body["input"]]}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def ollama() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    t.join(5)


def test_ollama_backend_embeds_and_normalises(ollama: str) -> None:
    be = OllamaBackend(ollama, "all-minilm:l6-v2")
    assert be.dim == DIM
    import struct

    vecs = be.embed_batch(["abc", "hello"])
    values = struct.unpack(f"<{2 * DIM}f", vecs)
    assert abs(sum(x * x for x in values[:DIM]) - 1.0) < 1e-5
    assert Handler.requests[-1]["input"] == ["abc", "hello"]


def test_memory_works_on_the_ollama_backend(ollama: str, klaw_home: KlawPaths) -> None:
    from klaw.config import load_engine_config

    be = OllamaBackend(ollama, "all-minilm:l6-v2")
    with Memory.open(
        paths=klaw_home, config=load_engine_config(klaw_home.engine_config), backend=be
    ) as m:
        m.save("zebra crossing near the school")
        m.save("quarterly budget review")
        # Both legs agree on this one (the fake vectors compare letters).
        assert "zebra" in m.search("zebra crossing", top_k=1)[0].content
        assert m.store.meta_get("embedding_model") == "ollama:all-minilm:l6-v2"


def test_ollama_down_or_wrong_model_is_a_clear_error(ollama: str) -> None:
    with pytest.raises(EmbeddingBackendError, match="ollama pull nomodel"):
        OllamaBackend(ollama, "nomodel").embed_batch(["x"])
    with pytest.raises(EmbeddingBackendError, match="ollama serve"):
        OllamaBackend("http://127.0.0.1:9", "all-minilm:l6-v2", timeout=2).embed_batch(["x"])


def test_user_md_initialises_core_memory_once(klaw_home: KlawPaths, ollama: str) -> None:
    from klaw.config import load_engine_config
    from klaw.memory import CoreMemory

    (klaw_home.workspace / "USER.md").write_text(
        "# User\n\n- **Name:** Roman\n- Location: Prague\n"
    )
    be = OllamaBackend(ollama, "all-minilm:l6-v2")
    cfg = load_engine_config(klaw_home.engine_config)
    Memory.open(paths=klaw_home, config=cfg, backend=be).close()
    assert CoreMemory(klaw_home.core_memory).get("user")["name"] == "Roman"
    (klaw_home.workspace / "USER.md").write_text("- Name: Someone Else\n")
    Memory.open(paths=klaw_home, config=cfg, backend=be).close()
    assert CoreMemory(klaw_home.core_memory).get("user")["name"] == "Roman"
