"""A synthetic spam/ham stream with drift, so the demo runs on any machine without data."""

from __future__ import annotations

import random
from collections.abc import Iterator

_HAM = ("meeting lunch tomorrow call later home dinner thanks see you soon project report "
        "weekend family train office love miss ok sure time today night morning work coffee "
        "please send notes agenda review draft budget team schedule friday monday").split()
_SPAM_CAMPAIGNS = [
    "win cash prize now claim free urgent winner award txt reply stop".split(),
    "loan credit approved rate offer apply instant debt consolidate low".split(),
    "pharmacy pills discount cheap order online prescription meds save".split(),
    "crypto invest bitcoin profit guaranteed returns wallet double trading".split(),
]
_SHARED = "the a to and you for your is are this on with".split()


def spam_ham_stream(n_events: int, *, seed: int = 0, spam_share: float = 0.3) -> Iterator[dict]:
    """Yield {"id", "text", "label"} events; labels "spam" and "ham".

    Drift: spam moves through campaigns (a new vocabulary every n_events / 4 events, so the
    model must keep learning), and ham mentions offers more and more often. Spam mixes campaign
    words with everyday ones, and 1% of labels are wrong, as user feedback is. Deterministic for
    a seed.
    """
    rng = random.Random(seed)
    phase_length = max(1, n_events // len(_SPAM_CAMPAIGNS))
    for index in range(n_events):
        campaign = _SPAM_CAMPAIGNS[min(index // phase_length, len(_SPAM_CAMPAIGNS) - 1)]
        is_spam = rng.random() < spam_share
        length = rng.randint(3, 10)
        if is_spam:  # spam dressed up as ordinary mail: part campaign, part everyday words
            campaign_words = max(1, round(length * rng.uniform(0.3, 0.8)))
            words = rng.choices(campaign, k=campaign_words) + rng.choices(_HAM, k=length - campaign_words)
        else:
            words = rng.choices(_HAM, k=length)
            if rng.random() < 0.1 + 0.15 * index / max(n_events, 1):
                words += rng.choices(campaign, k=rng.randint(1, 2))  # legitimate mail mentioning an offer
        words += rng.choices(_SHARED, k=rng.randint(1, 5))
        rng.shuffle(words)
        if is_spam and rng.random() < 0.3:
            words.append(f"http://{rng.choice(campaign)}{rng.randint(1, 99)}.example/offer")
        label = "spam" if is_spam else "ham"
        if rng.random() < 0.01:  # a mislabeled message now and then, as in real feedback
            label = "ham" if is_spam else "spam"
        yield {"id": f"gen-{index}", "text": " ".join(words), "label": label}
