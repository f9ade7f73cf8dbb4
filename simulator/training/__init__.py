"""Local training: models and the flat model layout, one client's step, the stacked trainer that
runs many clients as one computation, per-client noise, and evaluating models."""
