"""Root conftest: load the gpugauge pytest plugin, which holds every option, fixture and hook."""

pytest_plugins = ["gpugauge.plugin"]
