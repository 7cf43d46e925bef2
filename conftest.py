pytest_plugins = ["dtq_devtools.testing.plugin"]
