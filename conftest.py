pytest_plugins = ["dtq_core.testing.plugin"]
