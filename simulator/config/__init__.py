"""The run's configuration: typed, frozen dataclasses, one per section (the learning sections in
:mod:`.learning`, the system sections in :mod:`.system`), their field machinery and
:class:`~simulator.config.fields.ConfigError` (:mod:`.fields`, which imports nothing of the
project), the checks of the plugins a config names (:mod:`.plugins`), and the whole
:class:`~simulator.config.sections.Config` built from YAML and flags (:mod:`.sections`); the CLI
flags and the README's reference table are generated from the fields."""
