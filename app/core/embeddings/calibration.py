"""Where a model's cosine similarities fall, so that a default threshold fits the model in use.

Cosine similarity has no fixed meaning across models: two unrelated texts score about 0.0 to 0.2 under
all-MiniLM-L6-v2 and 0.6 to 0.7 under some larger models. A family therefore states its default thresholds
as a rule over a model's `Calibration`, never as a bare number:

- `unrelated`: the cosine that a question and a text about something else stay below, the 95th
  percentile over the `PAIRS` below, each question against every other pair's answer;
- `related`: the median cosine of a question and the short text that answers it, over the same pairs.

A provider may declare its calibration (`EmbeddingProvider.calibration`: the local model declares `LOCAL`,
measured with `measure` and checked again by its unit test); for any other model the server measures it
once per process on first use (`calibration_of`: twice len(PAIRS) short texts, one batch) and keeps it.
When the model cannot be reached, `calibration_of` answers the local model's figures and says so
(`source = "assumed"`), so a search ranked by text alone still has a threshold.

Worked example (all-MiniLM-L6-v2, the figures of `LOCAL`): a family whose rule is "a hit found by meaning
alone must beat `unrelated`" uses a floor of 0.176; under a model whose unrelated pairs reach 0.65 the same
rule gives 0.65, and noise stays out under both.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from app.core.embeddings.provider import Calibration, EmbeddingProvider

__all__ = ["LOCAL", "PAIRS", "Calibration", "calibration_of", "forget", "from_vectors", "measure"]

log = logging.getLogger("cairn.embeddings")

# (question, the short text that answers it): everyday and technical topics, none answering another.
PAIRS: tuple[tuple[str, str], ...] = (
    ("how do I renew the TLS certificate", "The TLS certificate is renewed by certbot every 60 days"),
    ("why did the nightly backup fail", "The nightly backup failed because the disk was full"),
    ("which database does billing use", "Billing stores invoices in PostgreSQL"),
    ("who is on call this weekend", "Maria is on call from Friday evening to Monday morning"),
    ("what is the rate limit of the public API", "The public API allows 100 requests per minute per key"),
    ("how long do we keep audit logs", "Audit logs are retained for 400 days"),
    ("when is the quarterly planning meeting", "Quarterly planning takes place on the first Tuesday of March"),
    ("what time does the bakery open", "The bakery opens at seven in the morning"),
    ("how much water should a cactus get", "Water a cactus once every two weeks in summer"),
    ("which train goes to the airport", "The S8 line runs to the airport every 20 minutes"),
    ("how do you make pancakes fluffy", "Beat the egg whites separately to make pancakes fluffy"),
    ("what is the capital of Australia", "Canberra is the capital city of Australia"),
    ("how many players are on a soccer team", "A soccer team fields eleven players"),
    ("when does the swimming pool close", "The pool closes at nine on weekdays"),
    ("what causes rust on iron", "Iron rusts when it reacts with oxygen and moisture"),
    ("how do I reset my router", "Hold the router's reset button for ten seconds"),
    ("which vaccine do cats need", "Cats need a yearly rabies vaccination"),
    ("how far is the moon from the earth", "The moon is about 384,000 kilometres from the earth"),
    ("what language is spoken in Brazil", "Portuguese is the official language of Brazil"),
    ("why is the sky blue", "Air scatters blue sunlight more than red light"),
    ("how do I cancel my gym membership", "Gym memberships are cancelled in writing one month ahead"),
    ("what should I pack for a ski trip", "Bring thermal layers, goggles and gloves on a ski trip"),
    ("how is the deploy pipeline triggered", "A merge to main triggers the deploy pipeline"),
    ("where are the user uploads stored", "User uploads are stored in the S3 bucket media-prod"),
)

RELATED_PERCENTILE = 50.0
UNRELATED_PERCENTILE = 95.0


# all-MiniLM-L6-v2 over PAIRS (tests/unit/core/embeddings/test_calibration.py measures it again).
LOCAL = Calibration(unrelated=0.176, related=0.731)


def from_vectors(questions: np.ndarray, answers: np.ndarray) -> Calibration:
    """The calibration from unit vectors of the questions and answers of `PAIRS`, row for row."""
    cos = questions @ answers.T
    n = cos.shape[0]
    related = np.diag(cos)
    unrelated = cos[~np.eye(n, dtype=bool)]
    return Calibration(
        unrelated=round(float(np.percentile(unrelated, UNRELATED_PERCENTILE)), 3),
        related=round(float(np.percentile(related, RELATED_PERCENTILE)), 3),
        source="measured",
    )


async def measure(provider: EmbeddingProvider) -> Calibration:
    """Embed `PAIRS` with `provider` (one batch) and compute its calibration."""
    vectors = np.asarray(await provider.embed([t for pair in PAIRS for t in pair]), dtype=np.float64)
    return from_vectors(vectors[0::2], vectors[1::2])


_MEASURED: dict[str, Calibration] = {}
_LOCK = asyncio.Lock()


async def calibration_of(provider: EmbeddingProvider) -> Calibration:
    """The provider's declared calibration, else the one measured for its model in this process (measured
    now on first use), else, while the model cannot be reached, `LOCAL` marked `assumed`."""
    if provider.calibration is not None:
        return provider.calibration
    known = _MEASURED.get(provider.model)
    if known is not None:
        return known
    async with _LOCK:
        if provider.model not in _MEASURED:
            try:
                _MEASURED[provider.model] = await measure(provider)
            except Exception as exc:  # any provider failure: a threshold is still needed, measured next time
                log.warning("the calibration of %s could not be measured: %s", provider.model, exc)
                return Calibration(LOCAL.unrelated, LOCAL.related, "assumed")
            log.info("calibration of %s measured: %s", provider.model, _MEASURED[provider.model])
        return _MEASURED[provider.model]


def forget() -> None:
    """Drop the calibrations measured in this process (tests that switch models)."""
    _MEASURED.clear()
