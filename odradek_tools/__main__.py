import sys

from odradek_tools.cli import main

sys.exit(main())
