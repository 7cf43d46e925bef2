"""Print the settings reference: ``python -m dtq_devtools.configdoc > docs/configuration.md``."""

import sys

from dtq_core.infra.settings import configuration_markdown

if __name__ == "__main__":
    sys.stdout.write(configuration_markdown())
