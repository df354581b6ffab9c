"""Writes a small support-ticket log, a stand-in for your own: one decision a line, in the
normalized row shape (`state`, `tools`, `action`, `meta.env`). Six shops, each with its own queue
names for the same four desks, so a router must read the state rather than memorize a shop.

    .venv/bin/python docs/examples/tickets.py var/data/tickets/logs.jsonl
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

DESKS = ("billing", "tech", "sales", "escalate")
WORDS = {
    "billing": ["refund", "invoice", "charged twice", "receipt"],
    "tech": ["crash", "cannot log in", "error 500", "slow page"],
    "sales": ["pricing", "upgrade plan", "quote", "discount"],
}


def ticket(rng: random.Random, shop: int) -> dict[str, object]:
    topic = rng.choice(list(WORDS))
    tier = rng.choice(["free", "pro", "enterprise"])
    angry = rng.random() < 0.25
    backlog = {desk: rng.randint(0, 40) for desk in DESKS}
    # The rule the log follows: angry enterprise customers go to escalate, unless the escalate
    # desk is swamped; everyone else to the desk their words name.
    desk = "escalate" if angry and tier == "enterprise" and backlog["escalate"] < 30 else topic
    names = {d: f"{d}-{shop}" if shop % 2 else d.upper() for d in DESKS}
    text = f"{rng.choice(WORDS[topic])} please help"
    state = {
        "ticket": {"text": text, "tier": tier, "angry": angry},
        "desks": {names[d]: {"backlog": backlog[d]} for d in DESKS},
    }
    tools = [names[d] for d in DESKS]
    rng.shuffle(tools)
    return {"state": state, "tools": tools, "action": names[desk], "meta": {"env": f"shop-{shop}"}}


def main(out: Path, rows_per_shop: int = 120) -> None:
    rng = random.Random(7)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        for shop in range(6):
            for _ in range(rows_per_shop):
                fh.write(json.dumps(ticket(rng, shop)) + "\n")
    print(f"wrote {6 * rows_per_shop} rows to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
