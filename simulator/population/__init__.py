"""The device population: device profiles and traces, availability, client selection, and the
virtual clock's compute and transfer costs. Cost follows the cohort, never the population."""
