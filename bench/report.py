"""`python -m bench.report`: the old module path of `python -m bench.tools.report`, kept so existing
command lines work."""
import sys

from bench.tools.report import main

if __name__ == "__main__":
    sys.exit(main())
