"""The gateway: pure transport between chat channels and the engine (design §2.1–2.4)."""
