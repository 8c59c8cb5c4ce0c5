import sys

from cablestore.cli import main

sys.exit(main())
