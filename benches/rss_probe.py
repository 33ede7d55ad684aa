"""Peak RSS of a process with the model loaded and 100k chunks indexed, after
embedding batches of 400-token chunks. Run as: python rss_probe.py klaw|python DB"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import corpus

CHUNKS = [" ".join(t.split()[:400]) for t in corpus.texts(64, seed=9, words=400)]


def klaw(db: str) -> None:
    from klaw import _core
    from klaw.config import load_engine_config
    from klaw.memory.api import load_backend
    from klaw.paths import KlawPaths

    be = load_backend(load_engine_config(Path("/nonexistent")), KlawPaths.from_env())
    store = _core.Store(db, dim=be.dim)
    for i in range(0, len(CHUNKS), 8):
        be.embed_batch(CHUNKS[i : i + 8])
    q = be.embed_query("dentist appointment")
    store.search(q, "dentist appointment")


def python(db: str) -> None:
    import numpy as np
    import onnxruntime as ort
    import sqlean
    import sqlite_vec
    import tokenizers

    from klaw.config import EmbeddingConfig
    from klaw.memory.models.registry import model_spec, resolve_model_files

    spec = model_spec(EmbeddingConfig().model)
    files = resolve_model_files()
    tok = tokenizers.Tokenizer.from_file(str(files.tokenizer))
    tok.enable_truncation(spec.max_length)
    tok.enable_padding()
    sess = ort.InferenceSession(str(files.model), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    c = sqlean.connect(db)
    c.enable_load_extension(True)
    sqlite_vec.load(c)
    for i in range(0, len(CHUNKS), 8):
        enc = tok.encode_batch([spec.passage_prefix + t for t in CHUNKS[i : i + 8]])
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        sess.run(None, {k: v for k, v in feed.items() if k in names})
    c.execute("SELECT rowid FROM vec_memory LIMIT 1").fetchall()


if __name__ == "__main__":
    {"klaw": klaw, "python": python}[sys.argv[1]](sys.argv[2])
    # VmHWM, not ru_maxrss: ru_maxrss survives exec, so a child of a big pytest
    # process would report its parent's peak.
    status = Path("/proc/self/status").read_text()
    print(int(status.split("VmHWM:")[1].split()[0]))
