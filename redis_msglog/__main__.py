import sys

from ._cli import main

sys.exit(main(prog_name="msglog"))
