"""The run's configuration: typed, frozen dataclasses, one per section (:mod:`.sections`, the
system sections in :mod:`.system`), their field machinery (:mod:`.fields`); YAML and CLI flags are
generated from them."""
