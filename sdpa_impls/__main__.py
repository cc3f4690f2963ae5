"""`python -m sdpa_impls` runs the command line."""
import sys

from .cli import main, settled

code = main()
settled()  # the answer is decided: the interpreter's teardown is no time for a signal to change it
sys.exit(code)
