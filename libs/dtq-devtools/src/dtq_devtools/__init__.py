"""dtq's developer tools, kept out of the SDK every producer installs: the local trace viewer
(``python -m dtq_devtools.traceview``), the settings reference generator
(``python -m dtq_devtools.configdoc``) and :mod:`dtq_devtools.testing`, the kit dtq's own
suites are built on."""
