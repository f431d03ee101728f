"""``python -m redis_msglog._cli``, as the file it replaced allowed."""

from . import main

main(prog_name="msglog")
