"""``python -m ragidx`` runs the command line."""

from ragidx.cli import main

main()
