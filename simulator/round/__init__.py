"""One round, as data flows: plan -> train -> collect -> aggregate -> record, and the engine
that runs the rounds (DESIGN.md, "One round, as data flows")."""
