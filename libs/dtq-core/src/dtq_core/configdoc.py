"""Print the settings reference: ``python -m dtq_core.configdoc > docs/configuration.md``."""

import sys

from dtq_core.settings import configuration_markdown

if __name__ == "__main__":
    sys.stdout.write(configuration_markdown())
