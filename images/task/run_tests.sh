#!/bin/sh
# The task's evaluation: the repository's tests with the environment's Python, from
# /testbed. Exits 0 only when the bug in calc/stats.py is fixed.
cd /testbed || exit 2
exec /opt/venv/bin/python -m unittest discover -s tests -t . -v
