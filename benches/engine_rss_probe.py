"""The baseline of the idle engine RSS: a bare Python process holding the same
embedding model with onnxruntime + tokenizers, as a user would load it. Embeds
one sentence, prints "ready", then idles until stdin closes."""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
import tokenizers

from klaw.models import resolve_model_files


def main() -> None:
    files = resolve_model_files()
    tok = tokenizers.Tokenizer.from_file(str(files.tokenizer))
    tok.enable_truncation(256)
    tok.enable_padding()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(files.model), opts, providers=["CPUExecutionProvider"])
    enc = tok.encode_batch(["when does the plumber come?"])
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
