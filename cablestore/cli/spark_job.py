"""Entry point for ``spark-submit``: the ``rebuild`` command, with spark-submit's master.

    spark-submit --master yarn "$(python -c 'import cablestore.cli.spark_job as j; print(j.__file__)')" \
        --snapshot /shared/snap
"""

import sys

from cablestore.cli import main

if __name__ == "__main__":
    sys.exit(main(["rebuild", *sys.argv[1:]]))
