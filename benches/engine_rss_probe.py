"""The baseline of the idle engine RSS: a bare Python process holding the same
embedding model with onnxruntime + tokenizers, as a user would load it. Embeds
one sentence, prints "ready", then idles until stdin closes."""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
import tokenizers

from klaw.config import EmbeddingConfig
from klaw.memory.models.registry import model_spec, resolve_model_files


def main() -> None:
    spec = model_spec(EmbeddingConfig().model)
    files = resolve_model_files()
    tok = tokenizers.Tokenizer.from_file(str(files.tokenizer))
    tok.enable_truncation(spec.max_length)
    tok.enable_padding()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(files.model), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    enc = tok.encode_batch([spec.query_prefix + "when does the plumber come?"])
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    sess.run(None, {k: v for k, v in feed.items() if k in names})
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
