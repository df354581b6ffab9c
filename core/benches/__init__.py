"""The bench menu (`specs/benches/*.json`) and how a bench spec resolves to what it scores."""
